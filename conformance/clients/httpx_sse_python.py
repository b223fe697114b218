# httpx-sse: EventSource over httpx, the OpenAI Chat stream, stop at [DONE].
# httpx.Client(timeout=30): a read timeout; CONFORMANCE_TIMEOUT (seconds) sets it instead.
from __future__ import annotations

import json
import os
import sys

import httpx
from httpx_sse import connect_sse

body = json.loads(os.environ["SSE_PROXY_STREAM_BODY"])
parts = []
with (
    httpx.Client(timeout=float(os.environ.get("CONFORMANCE_TIMEOUT", "30"))) as client,
    connect_sse(client, "POST", os.environ["SSE_PROXY_STREAM_URL"], json=body) as source,
):
    for event in source.iter_sse():
        if event.data == "[DONE]":
            break
        parts += [
            (c.get("delta") or {}).get("content") or ""
            for c in json.loads(event.data)["choices"]
            if c["index"] == 0
        ]
sys.stdout.write("".join(parts))
