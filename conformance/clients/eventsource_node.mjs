// eventsource (npm, the WHATWG EventSource for Node): its fetch option POSTs the body.
import { EventSource } from "eventsource";

const source = new EventSource(process.env.SSE_PROXY_STREAM_URL, {
  fetch: (url, init) => fetch(url, {
    ...init, method: "POST", body: process.env.SSE_PROXY_STREAM_BODY,
    headers: { ...init.headers, "content-type": "application/json" },
  }),
});
let text = "";
await new Promise((resolve, reject) => {
  source.onmessage = (event) => {
    if (event.data === "[DONE]") { source.close(); resolve(); return; }
    text += JSON.parse(event.data).choices.find((c) => c.index === 0)?.delta?.content ?? "";
  };
  source.onerror = (err) => { source.close(); reject(new Error(`stream ended without [DONE]: ${err.message ?? err.type}`)); };
});
process.stdout.write(text);
