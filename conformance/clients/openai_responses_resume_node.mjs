// openai (Node): the Responses API in background mode, resumed with the raw
// client.responses.retrieve(id, { stream: true, starting_after }) after a drop (test-client
// --resume --dialect responses); OPENAI_BASE_URL and OPENAI_API_KEY from env. Events it had
// (by sequence_number) are skipped; an error answer (a resume refused) is thrown.
import OpenAI, { APIError, OpenAIError } from "openai";

const client = new OpenAI({ maxRetries: 0 });
let text = "";
let responseId;
let seq;
let done = false;
let stream = await client.responses.create({
  model: "gpt-4o-mini", input: "Say hello", stream: true, background: true,
});
for (let attempt = 0; attempt < 10; attempt++) {
  try {
    for await (const event of stream) {
      if (seq !== undefined && event.sequence_number <= seq) continue;
      seq = event.sequence_number;
      if (event.type === "response.created") responseId = event.response.id;
      else if (event.type === "response.output_text.delta") text += event.delta;
      else if (event.type === "response.completed") done = true;
    }
  } catch (err) {
    // a dropped connection (undici's TypeError, or the SDK's error around it); an answer
    // with an error status (APIError: a resume refused) is not one
    const dropped = err instanceof TypeError || (err instanceof OpenAIError && !(err instanceof APIError));
    if (!dropped) throw err;
  }
  if (done || responseId === undefined) break;
  stream = await client.responses.retrieve(responseId, { stream: true, starting_after: seq });
}
process.stdout.write(text);
if (!done) { console.error("the stream ended without response.completed"); process.exit(1); }
