// A correct fetch client: one TextDecoder per stream (stream: true), lines split across
// reads on CRLF, CR or LF, one event per blank line. OpenAI Chat or raw text.
export async function stream({ url, body, headers, dialect, signal }) {
  const response = await fetch(url, { method: "POST", headers, body, signal });
  if (!response.ok) throw new Error(`HTTP ${response.status}`);
  const reader = response.body.getReader();
  const decoder = new TextDecoder();
  let pending = "";
  let data = [];
  let text = "";
  let first = true;
  const dispatch = () => {
    if (!data.length) return;
    const payload = data.join("\n");
    data = [];
    if (dialect === "text") text += payload;
    else if (payload !== "[DONE]") text += JSON.parse(payload).choices.find((c) => c.index === 0)?.delta?.content ?? "";
  };
  for (;;) {
    const { done, value } = await reader.read();
    pending += done ? decoder.decode() : decoder.decode(value, { stream: true });
    if (first && pending.length) {
      pending = pending.replace(/^\uFEFF/, "");
      first = false;
    }
    // a trailing CR may be the first half of a CRLF: keep it until more comes
    const cut = done ? pending.length : pending.endsWith("\r") ? pending.length - 1 : pending.length;
    const lines = pending.slice(0, cut).split(/\r\n|\r|\n/);
    pending = done ? "" : lines.pop() + pending.slice(cut);
    for (const line of lines) {
      if (line === "") dispatch();
      else if (line.startsWith("data:")) data.push(line.slice(line.startsWith("data: ") ? 6 : 5));
    }
    if (done) break;
  }
  return text;
}

export default stream;
