// eventsource (npm, the WHATWG EventSource for Node): its fetch option POSTs the body.
// CONFORMANCE_TIMEOUT (seconds): EventSource has no timeout; a watchdog timer that every
// message resets closes it.
import { EventSource } from "eventsource";

const timeout = process.env.CONFORMANCE_TIMEOUT;

const source = new EventSource(process.env.SSE_PROXY_STREAM_URL, {
  fetch: (url, init) => fetch(url, {
    ...init, method: "POST", body: process.env.SSE_PROXY_STREAM_BODY,
    headers: { ...init.headers, "content-type": "application/json" },
  }),
});
let text = "";
await new Promise((resolve, reject) => {
  let watchdog;
  const watch = () => {
    if (timeout === undefined) return;
    clearTimeout(watchdog);
    watchdog = setTimeout(() => { source.close(); reject(new Error(`no message for ${timeout} s`)); }, Number(timeout) * 1000);
  };
  watch();
  source.onmessage = (event) => {
    watch();
    if (event.data === "[DONE]") { clearTimeout(watchdog); source.close(); resolve(); return; }
    text += JSON.parse(event.data).choices.find((c) => c.index === 0)?.delta?.content ?? "";
  };
  source.onerror = (err) => { clearTimeout(watchdog); source.close(); reject(new Error(`stream ended without [DONE]: ${err.message ?? err.type}`)); };
});
process.stdout.write(text);
