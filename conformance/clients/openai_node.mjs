// openai (Node): chat.completions stream; OPENAI_BASE_URL and OPENAI_API_KEY from env.
// CONFORMANCE_TIMEOUT (seconds): the SDK's own timeout option (ms).
import OpenAI from "openai";

const timeout = process.env.CONFORMANCE_TIMEOUT;
const options = timeout === undefined ? {} : { timeout: Number(timeout) * 1000 };
const stream = await new OpenAI({ maxRetries: 0, ...options }).chat.completions.create({
  model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }], stream: true,
});
let text = "";
for await (const chunk of stream) text += chunk.choices.find((c) => c.index === 0)?.delta?.content ?? "";
process.stdout.write(text);
