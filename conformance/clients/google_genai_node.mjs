// @google/genai (JS SDK): generateContentStream against GOOGLE_GEMINI_BASE_URL.
// CONFORMANCE_TIMEOUT (seconds): httpOptions.timeout (ms), the SDK's own.
import { GoogleGenAI } from "@google/genai";

const timeout = process.env.CONFORMANCE_TIMEOUT;
const ai = new GoogleGenAI({
  apiKey: "sse-proxy-test-not-a-real-key",
  httpOptions: {
    baseUrl: process.env.GOOGLE_GEMINI_BASE_URL,
    ...(timeout === undefined ? {} : { timeout: Number(timeout) * 1000 }),
  },
});
const stream = await ai.models.generateContentStream({ model: "gemini-2.0-flash", contents: "hi" });
let text = "";
for await (const chunk of stream) text += chunk.text ?? "";
process.stdout.write(text);
