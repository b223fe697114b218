// @google/genai (JS SDK): generateContentStream against GOOGLE_GEMINI_BASE_URL.
import { GoogleGenAI } from "@google/genai";

const ai = new GoogleGenAI({
  apiKey: "sse-proxy-test-not-a-real-key",
  httpOptions: { baseUrl: process.env.GOOGLE_GEMINI_BASE_URL },
});
const stream = await ai.models.generateContentStream({ model: "gemini-2.0-flash", contents: "hi" });
let text = "";
for await (const chunk of stream) text += chunk.text ?? "";
process.stdout.write(text);
