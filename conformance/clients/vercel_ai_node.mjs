// The Vercel AI SDK (ai + @ai-sdk/openai): streamText's textStream over the Chat API.
// CONFORMANCE_TIMEOUT (seconds): streamText's abortSignal: AbortSignal.timeout.
import { createOpenAI } from "@ai-sdk/openai";
import { streamText } from "ai";

const timeout = process.env.CONFORMANCE_TIMEOUT;

const openai = createOpenAI({ baseURL: process.env.OPENAI_BASE_URL, apiKey: process.env.OPENAI_API_KEY });
const result = streamText({ model: openai.chat("gpt-4o-mini"), prompt: "hi", maxRetries: 0,
  ...(timeout === undefined ? {} : { abortSignal: AbortSignal.timeout(Number(timeout) * 1000) }),
  onError: ({ error }) => { console.error(error); process.exitCode = 1; } });
let text = "";
for await (const delta of result.textStream) text += delta;
process.stdout.write(text);
