// @microsoft/fetch-event-source on the raw-text stream, resuming (test-client --resume) as its
// README shows: onopen throws a fatal error on a client error (4xx) and a retriable one on an
// answer that is not an event stream, onclose throws to reconnect (the library itself ends
// at a clean close), onerror returns (a retry after the stream's retry:, with last-event-id)
// on all but a fatal error. Its content-type check is the library's own (startsWith): the
// README's === refuses "text/event-stream; charset=utf-8". The library has no stop signal:
// a 204 is retried like any answer that is not an event stream. CONFORMANCE_RESUME_FIX=1:
// onopen also stops at a 204, the fix a caller must add.
import { fetchEventSource } from "@microsoft/fetch-event-source";

// a browser library: Node needs these stand-ins (fetch_event_source_node.mjs says why)
globalThis.window ??= globalThis;
globalThis.document ??= { hidden: false, addEventListener() {}, removeEventListener() {} };

const stopAt204 = process.env.CONFORMANCE_RESUME_FIX === "1";

class Fatal extends Error {}
class Retriable extends Error {}
class Ended extends Error {}

let text = "";
try {
  await fetchEventSource(process.env.SSE_PROXY_STREAM_URL, {
    openWhenHidden: true,
    async onopen(response) {
      if (stopAt204 && response.status === 204) throw new Ended("204 No Content");
      if (response.ok && response.headers.get("content-type")?.startsWith("text/event-stream")) return;
      if (response.status >= 400 && response.status < 500 && response.status !== 429) {
        throw new Fatal(`HTTP ${response.status}`);
      }
      throw new Retriable(`HTTP ${response.status}`);
    },
    onmessage(event) { text += event.data; },
    onclose() { throw new Retriable("the connection closed"); },
    onerror(err) {
      if (err instanceof Fatal || err instanceof Ended) throw err;
      // return: a retry
    },
  });
} catch (err) {
  if (!(err instanceof Ended)) {
    process.stdout.write(text);
    console.error(String(err));
    process.exit(1);
  }
}
process.stdout.write(text);
