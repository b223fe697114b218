// npx vitest run chaos.vitest.test.mjs: the same, with vitest.
import { afterAll, describe, test } from "vitest";
import { REWRITES, STRATEGIES, startChaosProxy } from "./chaos-proxy.mjs";

// The client under test: replace with your own module.
const { streamText } = await import(process.env.SSE_CLIENT ?? "./sse-client.mjs");

// Started once for the file; without sse-proxy on PATH the file fails here, saying so.
const chaos = await startChaosProxy({ dialect: "openai" });
afterAll(() => chaos.stop());

describe.each([...STRATEGIES, ...REWRITES, "utf8+crlf", "boundaries+cr"])("%s", (strategy) => {
  test.each([1, 2, 3])("seed=%i", async (seed) => {
    const text = await streamText(chaos.url, {
      body: chaos.body,
      dialect: chaos.dialect,
      headers: chaos.headers(strategy, seed),
    });
    chaos.assertText(text, strategy); // a failure is sse-proxy's diagnosis, not a diff
  });
});
