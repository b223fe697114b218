"""httpx + httpx-sse as a test subject: stream any dialect, print the text."""

from __future__ import annotations

import json
import os
import sys

import httpx
from httpx_sse import connect_sse

from tests.tools.clients._sse import delta_text


def main() -> None:
    dialect = os.environ.get("SSE_PROXY_DIALECT", "openai")
    body = json.loads(os.environ.get("SSE_PROXY_STREAM_BODY", "{}"))
    parts: list[str] = []
    with (
        httpx.Client(timeout=30) as client,
        connect_sse(client, "POST", os.environ["SSE_PROXY_STREAM_URL"], json=body) as source,
    ):
        source.response.raise_for_status()
        for sse in source.iter_sse():
            parts.append(delta_text(dialect, sse.event, sse.data))
    sys.stdout.buffer.write("".join(parts).encode("utf-8"))


if __name__ == "__main__":
    main()
