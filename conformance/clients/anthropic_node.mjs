// @anthropic-ai/sdk (TypeScript SDK, run by Node): messages.stream's text events.
import Anthropic from "@anthropic-ai/sdk";

const stream = new Anthropic({ maxRetries: 0 }).messages.stream({
  model: "claude-sonnet-4-5", max_tokens: 1024, messages: [{ role: "user", content: "hi" }],
});
let text = "";
stream.on("text", (delta) => { text += delta; });
await stream.finalMessage();
process.stdout.write(text);
