// @google/genai (JS SDK): a Gemini interaction streamed with ai.interactions.create({...,
// stream: true}) and, after a drop, resumed by hand with ai.interactions.get(id, {stream:
// true, last_event_id}), the event_id of the last event it had (test-client --resume
// --dialect gemini); GOOGLE_GEMINI_BASE_URL from env. The SDK does not resume by itself: a
// drop is an error thrown by the stream's iterator. An error answer (a resume refused) is
// thrown.
import { GoogleGenAI } from "@google/genai";

const ai = new GoogleGenAI({
  apiKey: "sse-proxy-test-not-a-real-key",
  httpOptions: { baseUrl: process.env.GOOGLE_GEMINI_BASE_URL },
});
let text = "";
let interactionId;
let lastEventId;
let done = false;
let stream = await ai.interactions.create({
  model: "gemini-2.5-flash",
  input: "Say hello",
  stream: true,
});
for (let i = 0; i < 10; i++) {
  try {
    for await (const event of stream) {
      lastEventId = event.event_id ?? lastEventId;
      if (event.event_type === "interaction.created") interactionId = event.interaction.id;
      else if (event.event_type === "step.delta" && event.delta.type === "text") {
        text += event.delta.text;
      }
      else if (event.event_type === "interaction.completed") done = true;
    }
  } catch (error) {
    // a drop: APIConnectionError (not exported) from create's stream, TypeError from get's
    process.stderr.write(`dropped: ${error?.constructor?.name}: ${error?.message}\n`);
  }
  if (done || interactionId === undefined) break;
  stream = await ai.interactions.get(interactionId, { stream: true, last_event_id: lastEventId });
}
process.stdout.write(text);
if (!done) {
  process.stderr.write("the stream ended without interaction.completed\n");
  process.exitCode = 1;
}
