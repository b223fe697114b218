// A correct streaming client with fetch: one TextDecoder per stream, lines split on CRLF,
// LF or CR across reads, events dispatched at blank lines, and an error when the stream
// ends without its terminal marker. Run it alone (`node sse-client.mjs`: it reads the
// variables `sse-proxy test-client` sets) or import streamText() in your tests.

// Whether an event is the dialect's last one: without it, the answer is cut short.
function isTerminal(dialect, event, data) {
  if (dialect === "openai") return data === "[DONE]";
  if (dialect === "text") return false;
  const obj = JSON.parse(data);
  if (dialect === "anthropic") return (event || obj.type) === "message_stop";
  if (dialect === "responses") return obj.type === "response.completed";
  if (dialect === "gemini") return Boolean(obj.candidates?.[0]?.finishReason);
  return false;
}

function deltaText(dialect, event, data) {
  if (dialect === "text") return data;
  const obj = JSON.parse(data);
  if (obj.error || event === "error") throw new Error(`the API sent an error: ${data}`);
  if (dialect === "openai") return (obj.choices ?? []).map((c) => c.delta?.content ?? "").join("");
  if (dialect === "anthropic") return obj.type === "content_block_delta" ? (obj.delta?.text ?? "") : "";
  if (dialect === "responses") return obj.type === "response.output_text.delta" ? (obj.delta ?? "") : "";
  if (dialect === "gemini") {
    const parts = obj.candidates?.[0]?.content?.parts ?? [];
    return parts.filter((p) => !p.thought).map((p) => p.text ?? "").join("");
  }
  throw new Error(`unknown dialect ${dialect}`);
}

/** Stream one answer from `url` and return its text. */
export async function streamText(url, { body = "{}", headers = {}, dialect = "openai" } = {}) {
  const res = await fetch(url, {
    method: "POST",
    headers: { "content-type": "application/json", accept: "text/event-stream", ...headers },
    body,
  });
  if (!res.ok) throw new Error(`HTTP ${res.status}`);
  const decoder = new TextDecoder(); // one per stream; it also drops a leading BOM
  let pending = "";
  let data = [];
  let event = "";
  let text = "";
  let ended = dialect === "text"; // raw text has no terminal marker
  const dispatch = () => {
    if (data.length) {
      const joined = data.join("\n");
      if (dialect === "openai" && joined === "[DONE]") ended = true;
      else text += deltaText(dialect, event, joined);
      if (isTerminal(dialect, event, joined)) ended = true;
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
    if (value.startsWith(" ")) value = value.slice(1); // exactly one space
    if (name === "data") data.push(value);
    else if (name === "event") event = value;
  };
  const lines = (final) => {
    for (;;) {
      const m = /\r\n|\r|\n/.exec(pending);
      if (!m) break;
      // a CR at the very end may be the first half of a CRLF: wait, unless the body ended
      if (m[0] === "\r" && m.index === pending.length - 1 && !final) break;
      line(pending.slice(0, m.index));
      pending = pending.slice(m.index + m[0].length);
    }
  };
  for await (const chunk of res.body) {
    pending += decoder.decode(chunk, { stream: true });
    lines(false);
  }
  pending += decoder.decode();
  lines(true);
  if (!ended) throw new Error("the stream ended without its terminal marker");
  return text;
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const text = await streamText(process.env.SSE_PROXY_STREAM_URL, {
    body: process.env.SSE_PROXY_STREAM_BODY,
    dialect: process.env.SSE_PROXY_DIALECT,
  });
  process.stdout.write(text);
}
