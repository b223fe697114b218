// eventsource-parser (npm) as a test subject: fetch the stream, parse, print the text.
// eventsource-parser is installed beside it (package-lock.json here) by scripts/js-deps.sh.
import { createParser } from "eventsource-parser";

const dialect = process.env.SSE_PROXY_DIALECT ?? "openai";
const parts = [];

function deltaText(event, data) {
  if (dialect === "text") return data;
  if (data === "[DONE]") return "";
  const obj = JSON.parse(data);
  if (dialect === "openai") return (obj.choices ?? []).map((c) => c.delta?.content ?? "").join("");
  if (dialect === "anthropic") return obj.type === "content_block_delta" ? obj.delta?.text ?? "" : "";
  if (dialect === "responses") return obj.type === "response.output_text.delta" ? obj.delta ?? "" : "";
  throw new Error(`unknown dialect ${dialect}`);
}

const parser = createParser({
  onEvent: (ev) => parts.push(deltaText(ev.event, ev.data)),
  onError: (err) => console.error(`eventsource-parser: ${err.message}`),
});
const res = await fetch(process.env.SSE_PROXY_STREAM_URL, {
  method: "POST",
  headers: { "content-type": "application/json", accept: "text/event-stream" },
  body: process.env.SSE_PROXY_STREAM_BODY ?? "{}",
});
if (!res.ok) throw new Error(`HTTP ${res.status}`);
const decoder = new TextDecoder("utf-8");
for await (const chunk of res.body) parser.feed(decoder.decode(chunk, { stream: true }));
parser.feed(decoder.decode());
parser.reset({ consume: true }); // end of stream: dispatch a last event held after a bare CR
process.stdout.write(parts.join(""));
