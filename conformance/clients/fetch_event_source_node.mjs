// @microsoft/fetch-event-source in Node: fetchEventSource with openWhenHidden (no document).
// CONFORMANCE_TIMEOUT (seconds): its signal: AbortSignal.timeout (the whole answer).
import { fetchEventSource } from "@microsoft/fetch-event-source";

const timeout = process.env.CONFORMANCE_TIMEOUT;
const signal = timeout === undefined ? undefined : AbortSignal.timeout(Number(timeout) * 1000);

// a browser library: it calls window.setTimeout/clearTimeout and, when a stream ends,
// document.removeEventListener, so Node needs these stand-ins (without them every stream
// ends in "ReferenceError: window is not defined" or "document is not defined")
globalThis.window ??= globalThis;
globalThis.document ??= { hidden: false, addEventListener() {}, removeEventListener() {} };

let text = "";
let done = false;
await fetchEventSource(process.env.SSE_PROXY_STREAM_URL, {
  method: "POST", headers: { "content-type": "application/json" }, body: process.env.SSE_PROXY_STREAM_BODY,
  openWhenHidden: true,
  signal,
  onmessage(event) {
    if (event.data === "[DONE]") { done = true; return; }
    text += JSON.parse(event.data).choices.find((c) => c.index === 0)?.delta?.content ?? "";
  },
  onclose() { if (!done) throw new Error("stream ended without [DONE]"); },
  onerror(err) { throw err; },
});
process.stdout.write(text);
