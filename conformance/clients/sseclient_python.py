# sseclient-py: SSEClient over a streamed requests response, the OpenAI Chat stream.
# requests' timeout=30: connect and read; CONFORMANCE_TIMEOUT (seconds) sets it instead.
from __future__ import annotations

import json
import os
import sys

import requests
import sseclient

response = requests.post(
    os.environ["SSE_PROXY_STREAM_URL"],
    json=json.loads(os.environ["SSE_PROXY_STREAM_BODY"]),
    stream=True,
    timeout=float(os.environ.get("CONFORMANCE_TIMEOUT", "30")),
)
parts = []
for event in sseclient.SSEClient(response).events():
    if event.data == "[DONE]":
        break
    parts += [
        (c.get("delta") or {}).get("content") or ""
        for c in json.loads(event.data)["choices"]
        if c["index"] == 0
    ]
sys.stdout.write("".join(parts))
