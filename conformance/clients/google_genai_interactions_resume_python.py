# google-genai (Python): a Gemini interaction streamed with client.interactions.create(...,
# stream=True) and, after a drop, resumed by hand with client.interactions.get(id,
# stream=True, last_event_id=E), E the event_id of the last event it had (test-client
# --resume --dialect gemini); GOOGLE_GEMINI_BASE_URL from env. The SDK does not resume by
# itself: a drop ends the stream's iterator with its APIConnectionError (named only in
# google.genai._interactions in 3.6.1). An error answer (a resume refused) is raised.
from __future__ import annotations

import sys

from google import genai
from google.genai._interactions import APIConnectionError

client = genai.Client(api_key="sse-proxy-test-not-a-real-key")
text: list[str] = []
interaction_id: str | None = None
last_event_id: str | None = None
done = False
stream = client.interactions.create(model="gemini-2.5-flash", input="Say hello", stream=True)
for _ in range(10):
    try:
        for event in stream:
            last_event_id = event.event_id or last_event_id
            if event.event_type == "interaction.created":
                interaction_id = event.interaction.id
            elif event.event_type == "step.delta" and event.delta.type == "text":
                text.append(event.delta.text)
            elif event.event_type == "interaction.completed":
                done = True
    except APIConnectionError:
        pass  # the connection dropped: resume below
    if done or interaction_id is None:
        break
    stream = client.interactions.get(interaction_id, stream=True, last_event_id=last_event_id)
sys.stdout.write("".join(text))
if not done:
    sys.exit("the stream ended without interaction.completed")
