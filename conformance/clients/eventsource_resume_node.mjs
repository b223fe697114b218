// eventsource (npm) on the raw-text stream, resuming (test-client --resume): a GET, as in a
// browser; an error while readyState is CONNECTING is a drop it resumes by itself; CLOSED
// (a 204 after the end, or a refusal) ends the answer. Its reconnect timer is unref()'d, so
// an interval keeps Node alive while it waits.
import { EventSource } from "eventsource";

const alive = setInterval(() => {}, 1000);
const source = new EventSource(process.env.SSE_PROXY_STREAM_URL);
let text = "";
await new Promise((resolve) => {
  source.onmessage = (event) => { text += event.data; };
  source.onerror = () => { if (source.readyState === EventSource.CLOSED) resolve(); };
});
clearInterval(alive);
process.stdout.write(text);
