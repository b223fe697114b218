# aiohttp-sse-client: its EventSource (POST), the OpenAI Chat stream, stop at [DONE].
# CONFORMANCE_TIMEOUT (seconds): aiohttp's ClientTimeout(sock_read=...), passed through.
from __future__ import annotations

import asyncio
import json
import os
import sys
from datetime import timedelta

import aiohttp
from aiohttp_sse_client import client as sse_client

timeout = os.environ.get("CONFORMANCE_TIMEOUT")
options = {} if timeout is None else {"timeout": aiohttp.ClientTimeout(sock_read=float(timeout))}


async def main() -> None:
    parts = []
    async with sse_client.EventSource(
        os.environ["SSE_PROXY_STREAM_URL"],
        option={"method": "POST"},
        json=json.loads(os.environ["SSE_PROXY_STREAM_BODY"]),
        reconnection_time=timedelta(0),
        max_connect_retry=0,
        **options,
    ) as source:
        async for event in source:
            if event.data == "[DONE]":
                break
            parts += [
                (c.get("delta") or {}).get("content") or ""
                for c in json.loads(event.data)["choices"]
                if c["index"] == 0
            ]
    sys.stdout.write("".join(parts))


asyncio.run(main())
