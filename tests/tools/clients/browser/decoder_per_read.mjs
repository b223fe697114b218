// The bug of ollama-js#255 and many chat UIs: a fresh TextDecoder for every read, so a
// read that ends inside a multi-byte character yields U+FFFD.
export async function stream({ url, body, headers, dialect }) {
  const response = await fetch(url, { method: "POST", headers, body });
  const reader = response.body.getReader();
  let pending = "";
  let text = "";
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    pending += new TextDecoder().decode(value);
    let end;
    while ((end = pending.indexOf("\n\n")) >= 0) {
      const block = pending.slice(0, end);
      pending = pending.slice(end + 2);
      for (const line of block.split("\n")) {
        if (!line.startsWith("data: ") || line === "data: [DONE]") continue;
        const payload = line.slice(6);
        text += dialect === "text" ? payload : JSON.parse(payload).choices?.[0]?.delta?.content ?? "";
      }
    }
  }
  return text;
}

export default stream;
