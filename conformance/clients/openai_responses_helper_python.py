# openai (Python): the Responses API in background mode through the SDK's helper,
# client.responses.stream(..., background=True), and after a drop its own resume,
# client.responses.stream(response_id=..., starting_after=N) (test-client --resume
# --dialect responses): the helper asks for the whole stream again (without starting_after)
# and skips the events up to N itself. The SDK does not resume by itself: the loop is the
# caller's. OPENAI_BASE_URL and OPENAI_API_KEY from env.
from __future__ import annotations

import sys

import httpx2
import openai
from openai import OpenAI

client = OpenAI(max_retries=0)
text: list[str] = []
response_id: str | None = None
seq: int | None = None
done = False
manager = client.responses.stream(model="gpt-4o-mini", input="Say hello", background=True)
for _ in range(10):
    try:
        with manager as stream:
            for event in stream:
                seq = event.sequence_number
                if event.type == "response.created":
                    response_id = event.response.id
                elif event.type == "response.output_text.delta":
                    text.append(event.delta)
                elif event.type == "response.completed":
                    done = True
    except (httpx2.TransportError, openai.APIConnectionError):
        pass  # the connection dropped: resume below (an error answer is raised)
    if done or response_id is None:
        break
    manager = client.responses.stream(response_id=response_id, starting_after=seq)
sys.stdout.write("".join(text))
if not done:
    sys.exit("the stream ended without response.completed")
