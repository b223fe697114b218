// openai (Node): the Responses API in background mode through the SDK's helper,
// client.responses.stream({ ..., background: true }), and after a drop its own resume,
// client.responses.stream({ response_id, starting_after }) (test-client --resume --dialect
// responses): the helper asks for the whole stream again (without starting_after) and skips
// the events up to starting_after itself. The SDK does not resume by itself: the loop is the
// caller's. OPENAI_BASE_URL and OPENAI_API_KEY from env.
import OpenAI, { APIError, OpenAIError } from "openai";

const client = new OpenAI({ maxRetries: 0 });
let text = "";
let responseId;
let seq;
let done = false;
let stream = client.responses.stream({ model: "gpt-4o-mini", input: "Say hello", background: true });
for (let attempt = 0; attempt < 10; attempt++) {
  try {
    for await (const event of stream) {
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
  stream = client.responses.stream({ response_id: responseId, starting_after: seq });
}
process.stdout.write(text);
if (!done) { console.error("the stream ended without response.completed"); process.exit(1); }
