// The browser's own EventSource on the raw-text stream, resuming (test-client --resume): an
// error while readyState is CONNECTING is a drop it resumes by itself (Last-Event-ID, after
// the retry delay); once it is CLOSED (a 204 on the reconnect after the end, or a refusal)
// the answer is done.
export default function stream({ url }) {
  return new Promise((resolve) => {
    const source = new EventSource(url);
    let text = "";
    source.onmessage = (event) => { text += event.data; };
    source.onerror = () => { if (source.readyState === EventSource.CLOSED) resolve(text); };
  });
}
