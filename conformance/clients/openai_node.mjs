// openai (Node): chat.completions stream; OPENAI_BASE_URL and OPENAI_API_KEY from env.
import OpenAI from "openai";

const stream = await new OpenAI({ maxRetries: 0 }).chat.completions.create({
  model: "gpt-4o-mini", messages: [{ role: "user", content: "hi" }], stream: true,
});
let text = "";
for await (const chunk of stream) text += chunk.choices.find((c) => c.index === 0)?.delta?.content ?? "";
process.stdout.write(text);
