// Start sse-proxy's mock LLM upstream and a chaos proxy in front of it, on free ports, for
// a test file; stop both afterwards; judge a text with sse-proxy's own diagnosis. It needs
// `sse-proxy` on PATH (pip install sse-proxy; or SSE_PROXY_BIN=/path/to/sse-proxy) and
// nothing from npm. `sse-proxy js-helper > chaos-proxy.mjs` writes this file out.
import { spawn, spawnSync } from "node:child_process";
import net from "node:net";

const SSE_PROXY = process.env.SSE_PROXY_BIN ?? "sse-proxy";

// Fail at once, saying why, when sse-proxy cannot run: not after seconds of waiting for
// ports nothing will ever listen on.
function checkSseProxy() {
  const probe = spawnSync(SSE_PROXY, ["--version"], { encoding: "utf8" });
  if (probe.error?.code === "ENOENT") {
    throw new Error(
      `\`${SSE_PROXY}\` is not on PATH: install it (pip install sse-proxy) or set ` +
        "SSE_PROXY_BIN to the sse-proxy executable",
    );
  }
  if (probe.error) throw new Error(`cannot run \`${SSE_PROXY}\`: ${probe.error.message}`);
  if (probe.status !== 0) {
    throw new Error(`\`${SSE_PROXY} --version\` exited ${probe.status}: ${probe.stderr.trim()}`);
  }
}

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

// The child listening on `port`, or a rejection with its own words if it exits first.
function started(child, port, what, seconds = 60) {
  let stderr = "";
  let gone = false;
  child.stderr.setEncoding("utf8");
  child.stderr.on("data", (text) => {
    stderr = (stderr + text).slice(-2000);
  });
  const exited = new Promise((_, reject) => {
    child.once("error", (err) => {
      gone = true;
      reject(new Error(`${what}: ${err.message}`));
    });
    child.once("exit", (code) => {
      gone = true;
      reject(new Error(`${what} exited (status ${code}) before listening:\n${stderr.trim()}`));
    });
  });
  const listening = (async () => {
    const until = Date.now() + seconds * 1000;
    while (!gone && Date.now() < until) {
      const ok = await new Promise((resolve) => {
        const sock = net.connect(port, "127.0.0.1", () => sock.end(() => resolve(true)));
        sock.once("error", () => resolve(false));
      });
      if (ok) return;
      await new Promise((r) => setTimeout(r, 50));
    }
    throw new Error(`${what} does not listen on port ${port} after ${seconds} s:\n${stderr}`);
  })();
  return Promise.race([listening, exited]).finally(() => {
    child.removeAllListeners("exit");
    child.stderr.resume(); // keep draining it (a full pipe would block the child)
  });
}

/** The mock upstream and a chaos proxy: `url` and `body` make a streaming request,
 * `headers(strategy, seed)` is the header that picks its chaos, `expected` the exact text
 * to get, and `assertText(text, strategy)` fails with sse-proxy's diagnosis (the bug
 * family, the evidence, the fix in JavaScript) instead of a diff. */
export async function startChaosProxy({ dialect = "openai" } = {}) {
  checkSseProxy();
  const [upPort, proxyPort] = [await freePort(), await freePort()];
  const pipes = { stdio: ["ignore", "ignore", "pipe"] };
  const mock = spawn(SSE_PROXY, ["mock-upstream", "--port", String(upPort)], pipes);
  const proxy = spawn(
    SSE_PROXY,
    ["serve", "--upstream", `http://127.0.0.1:${upPort}`, "--port", String(proxyPort),
     "--mode", "chaos", "--log-level", "warning"],
    pipes,
  );
  const stop = () => {
    proxy.kill();
    mock.kill();
  };
  try {
    await Promise.all([
      started(mock, upPort, "sse-proxy mock-upstream"),
      started(proxy, proxyPort, "sse-proxy serve"),
    ]);
  } catch (err) {
    stop();
    throw err;
  }
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
  const expected = run(["expected-text", "--dialect", dialect]).stdout;
  /** sse-proxy's diagnosis of `text` (what the client got under `strategy`), as text. */
  const diagnose = (text, strategy) =>
    run(
      ["diagnose", "--dialect", dialect, "--got", "-", "--lang", "javascript",
       ...(strategy ? ["--strategy", strategy] : [])],
      text,
      [0, 1],
    ).stdout;
  return {
    url: `http://127.0.0.1:${proxyPort}${paths[dialect]}`,
    body,
    dialect,
    expected,
    headers: (strategy, seed) => ({ "x-sse-proxy-chaos": `strategy=${strategy}; seed=${seed}` }),
    diagnose,
    assertText(text, strategy) {
      if (text !== expected) throw new Error(diagnose(text, strategy).trimEnd());
    },
    stop,
  };
}

function run(args, input, ok = [0]) {
  const done = spawnSync(SSE_PROXY, args, { input, encoding: "utf8", maxBuffer: 64 << 20 });
  if (done.error || !ok.includes(done.status)) {
    throw new Error(`\`${SSE_PROXY} ${args[0]}\` failed: ${done.error?.message ?? done.stderr}`);
  }
  return done;
}

export const STRATEGIES = ["bytewise", "utf8", "boundaries", "random", "coalesce"];
export const REWRITES = ["crlf", "cr", "mixed_newlines", "bom", "keepalive", "dataless", "blank_lines", "nospace"];
