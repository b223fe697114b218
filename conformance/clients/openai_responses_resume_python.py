# openai (Python): the Responses API in background mode, resumed with the raw
# client.responses.retrieve(id, stream=True, starting_after=N) after a drop (test-client
# --resume --dialect responses); OPENAI_BASE_URL and OPENAI_API_KEY from env. Events it had
# (by sequence_number) are skipped; an error answer (a resume refused) is raised.
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
stream = client.responses.create(
    model="gpt-4o-mini", input="Say hello", stream=True, background=True
)
for _ in range(10):
    try:
        for event in stream:
            if seq is not None and event.sequence_number <= seq:
                continue
            seq = event.sequence_number
            if event.type == "response.created":
                response_id = event.response.id
            elif event.type == "response.output_text.delta":
                text.append(event.delta)
            elif event.type == "response.completed":
                done = True
    except (httpx2.TransportError, openai.APIConnectionError):
        pass  # the connection dropped: resume below
    if done or response_id is None:
        break
    stream = client.responses.retrieve(response_id, stream=True, starting_after=seq)
sys.stdout.write("".join(text))
if not done:
    sys.exit("the stream ended without response.completed")
