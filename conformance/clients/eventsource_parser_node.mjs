// eventsource-parser: fetch, one TextDecoder (stream: true), the parser, the OpenAI stream.
// CONFORMANCE_TIMEOUT (seconds): fetch's signal: AbortSignal.timeout (the whole answer).
import { createParser } from "eventsource-parser";

const timeout = process.env.CONFORMANCE_TIMEOUT;

let text = "";
const parser = createParser({
  onEvent: (event) => {
    if (event.data !== "[DONE]") text += JSON.parse(event.data).choices.find((c) => c.index === 0)?.delta?.content ?? "";
  },
});
const res = await fetch(process.env.SSE_PROXY_STREAM_URL, {
  method: "POST", headers: { "content-type": "application/json" }, body: process.env.SSE_PROXY_STREAM_BODY,
  ...(timeout === undefined ? {} : { signal: AbortSignal.timeout(Number(timeout) * 1000) }),
});
const decoder = new TextDecoder();
for await (const chunk of res.body) parser.feed(decoder.decode(chunk, { stream: true }));
parser.feed(decoder.decode());
parser.reset({ consume: true });
process.stdout.write(text);
