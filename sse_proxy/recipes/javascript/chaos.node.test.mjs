// node --test chaos.node.test.mjs: your client against every chaos strategy and rewrite.
import { after, test } from "node:test";
import { REWRITES, STRATEGIES, startChaosProxy } from "./chaos-proxy.mjs";

// The client under test: replace with your own module.
const { streamText } = await import(process.env.SSE_CLIENT ?? "./sse-client.mjs");

// Started once for the file; without sse-proxy on PATH the file fails here, saying so.
const chaos = await startChaosProxy({ dialect: "openai" });
after(() => chaos.stop());

for (const strategy of [...STRATEGIES, ...REWRITES, "utf8+crlf", "boundaries+cr"]) {
  for (const seed of [1, 2, 3]) {
    test(`${strategy} seed=${seed}`, async () => {
      const text = await streamText(chaos.url, {
        body: chaos.body,
        dialect: chaos.dialect,
        headers: chaos.headers(strategy, seed),
      });
      chaos.assertText(text, strategy); // a failure is sse-proxy's diagnosis, not a diff
    });
  }
}
