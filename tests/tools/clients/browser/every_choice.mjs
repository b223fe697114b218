// A correct fetch client that reads every choice of each chunk and asks for one (its body
// has no `n`): with n = 1 a provider sends choice 0 only, so joining every choice's content
// is right. Otherwise careful: one TextDecoder per stream, lines split across reads on CRLF,
// CR or LF, one event per blank line, and a rejection when the stream ends without its
// terminal marker or carries an error event. OpenAI Chat or raw text.
export default async function stream({ url, body, headers, dialect }) {
  const response = await fetch(url, { method: "POST", headers, body });
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  const reader = response.body.getReader();
  const decoder = new TextDecoder(); // it drops a leading BOM itself
  let pending = "";
  let data = [];
  let event = "";
  let text = "";
  let ended = dialect === "text"; // raw text has no terminal marker
  const dispatch = () => {
    if (data.length) {
      const payload = data.join("\n");
      if (event === "error") throw new Error(`error event: ${payload}`);
      if (dialect === "text") text += payload;
      else if (payload === "[DONE]") ended = true;
      else {
        const chunk = JSON.parse(payload);
        if (chunk.error) throw new Error(`error event: ${payload}`);
        for (const choice of chunk.choices ?? []) text += choice.delta?.content ?? "";
      }
    }
    data = [];
    event = "";
  };
  const line = (l) => {
    if (l === "") return dispatch();
    if (l.startsWith(":")) return;
    const colon = l.indexOf(":");
    const name = colon < 0 ? l : l.slice(0, colon);
    let value = colon < 0 ? "" : l.slice(colon + 1);
    if (value.startsWith(" ")) value = value.slice(1);
    if (name === "data") data.push(value);
    else if (name === "event") event = value;
  };
  for (;;) {
    const { done, value } = await reader.read();
    pending += done ? decoder.decode() : decoder.decode(value, { stream: true });
    for (;;) {
      const m = /\r\n|\r|\n/.exec(pending);
      if (!m) break;
      // a CR at the very end may be the first half of a CRLF: wait, unless the body ended
      if (m[0] === "\r" && m.index === pending.length - 1 && !done) break;
      line(pending.slice(0, m.index));
      pending = pending.slice(m.index + m[0].length);
    }
    if (done) break;
  }
  if (pending || data.length) throw new Error("the stream ended inside an event");
  if (!ended) throw new Error("the stream ended without its terminal marker");
  return text;
}
