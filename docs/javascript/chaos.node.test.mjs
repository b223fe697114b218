// node --test chaos.node.test.mjs: your client against every chaos strategy and rewrite.
import assert from "node:assert/strict";
import { after, before, test } from "node:test";
import { REWRITES, STRATEGIES, startChaosProxy } from "./chaos-proxy.mjs";

// The client under test: replace with your own module.
const { streamText } = await import(process.env.SSE_CLIENT ?? "./sse-client.mjs");

let chaos;
before(async () => {
  chaos = await startChaosProxy({ dialect: "openai" });
});
after(() => chaos.stop());

for (const strategy of [...STRATEGIES, ...REWRITES, "utf8+crlf", "boundaries+cr"]) {
  for (const seed of [1, 2, 3]) {
    test(`${strategy} seed=${seed}`, async () => {
      const text = await streamText(chaos.url, {
        body: chaos.body,
        dialect: chaos.dialect,
        headers: chaos.headers(strategy, seed),
      });
      assert.equal(text, chaos.expected);
    });
  }
}
