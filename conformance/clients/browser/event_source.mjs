// The browser's own EventSource on the raw-text stream (GET): every message's data; the
// stream's end (the connection closing) is an error event, and ends the answer.
export default function stream({ url }) {
  return new Promise((resolve) => {
    const source = new EventSource(url);
    let text = "";
    source.onmessage = (event) => { text += event.data; };
    source.onerror = () => { source.close(); resolve(text); };
  });
}
