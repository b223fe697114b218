// For the suite: one script, one behaviour per case, so one browser run covers them all.
// utf8 seeds 1 and 2: a fresh TextDecoder per read; tokens:chars: logs, then throws (a
// crash, with the console); tokens:midword: never answers (a hang); the rest: correct.
import { stream as correct } from "./correct_fetch.mjs";
import { stream as perRead } from "./decoder_per_read.mjs";

export default async function (options) {
  const name = options.case;
  if (name === "utf8 seed=1" || name === "utf8 seed=2") return perRead(options);
  if (name === "tokens:chars") {
    console.log("about to fail", { on: name });
    throw new TypeError("the client gave up on purpose");
  }
  if (name === "tokens:midword") return new Promise(() => {});
  return correct(options);
}
