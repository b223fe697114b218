// @anthropic-ai/sdk (TypeScript SDK, run by Node): messages.stream's text events.
// CONFORMANCE_TIMEOUT (seconds): the SDK's own timeout option (ms).
import Anthropic from "@anthropic-ai/sdk";

const timeout = process.env.CONFORMANCE_TIMEOUT;
const options = timeout === undefined ? {} : { timeout: Number(timeout) * 1000 };
const stream = new Anthropic({ maxRetries: 0, ...options }).messages.stream({
  model: "claude-sonnet-4-5", max_tokens: 1024, messages: [{ role: "user", content: "hi" }],
});
let text = "";
stream.on("text", (delta) => { text += delta; });
await stream.finalMessage();
process.stdout.write(text);
