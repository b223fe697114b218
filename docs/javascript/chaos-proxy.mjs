// Start sse-proxy's mock LLM upstream and a chaos proxy in front of it, on free ports, for
// a test file; stop both afterwards. `sse-proxy` must be on PATH (pip install sse-proxy).
import { execFileSync, spawn } from "node:child_process";
import net from "node:net";

const SSE_PROXY = process.env.SSE_PROXY_BIN ?? "sse-proxy";

function freePort() {
  return new Promise((resolve, reject) => {
    const server = net.createServer();
    server.once("error", reject);
    server.listen(0, "127.0.0.1", () => {
      const { port } = server.address();
      server.close(() => resolve(port));
    });
  });
}

async function listening(port, seconds = 20) {
  const until = Date.now() + seconds * 1000;
  while (Date.now() < until) {
    const ok = await new Promise((resolve) => {
      const sock = net.connect(port, "127.0.0.1", () => sock.end(() => resolve(true)));
      sock.once("error", () => resolve(false));
    });
    if (ok) return;
    await new Promise((r) => setTimeout(r, 100));
  }
  throw new Error(`nothing listens on port ${port}`);
}

/** The mock upstream and a chaos proxy; `stream(strategy, seed)` gives a request's URL,
 * body and the header that picks its chaos; `expected` is the exact text to get. */
export async function startChaosProxy({ dialect = "openai" } = {}) {
  const [upPort, proxyPort] = [await freePort(), await freePort()];
  const mock = spawn(SSE_PROXY, ["mock-upstream", "--port", String(upPort)], { stdio: "ignore" });
  const proxy = spawn(
    SSE_PROXY,
    ["serve", "--upstream", `http://127.0.0.1:${upPort}`, "--port", String(proxyPort),
     "--mode", "chaos", "--log-level", "warning"],
    { stdio: "ignore" },
  );
  await Promise.all([listening(upPort), listening(proxyPort)]);
  const paths = {
    openai: "/v1/chat/completions",
    anthropic: "/v1/messages",
    responses: "/v1/responses",
    text: "/v1/text",
  };
  const body = JSON.stringify(
    dialect === "anthropic"
      ? { model: "claude", max_tokens: 64, stream: true, messages: [{ role: "user", content: "hi" }] }
      : { model: "gpt-4o-mini", stream: true, messages: [{ role: "user", content: "hi" }] },
  );
  return {
    url: `http://127.0.0.1:${proxyPort}${paths[dialect]}`,
    body,
    dialect,
    expected: execFileSync(SSE_PROXY, ["expected-text", "--dialect", dialect], { encoding: "utf8" }),
    headers: (strategy, seed) => ({ "x-sse-proxy-chaos": `strategy=${strategy}; seed=${seed}` }),
    stop() {
      proxy.kill();
      mock.kill();
    },
  };
}

export const STRATEGIES = ["bytewise", "utf8", "boundaries", "random", "coalesce"];
export const REWRITES = ["crlf", "cr", "mixed_newlines", "bom", "keepalive", "dataless", "blank_lines", "nospace"];
