# mcp (Python, 1.x): ClientSession over streamable_http_client (2025-11-25 is the newest
# revision it speaks) calls SSE_PROXY_MCP_TOOL with SSE_PROXY_MCP_ARGS and a progress
# callback, and prints the result's text content.
# CONFORMANCE_TIMEOUT (seconds): call_tool's read_timeout_seconds (the whole call's wait).
from __future__ import annotations

import datetime
import json
import os
import sys

import anyio
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client

timeout = os.environ.get("CONFORMANCE_TIMEOUT")


async def main() -> int:
    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        pass

    wait = None if timeout is None else datetime.timedelta(seconds=float(timeout))
    async with (
        streamable_http_client(os.environ["SSE_PROXY_STREAM_URL"]) as (read, write, _),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        result = await session.call_tool(
            os.environ["SSE_PROXY_MCP_TOOL"],
            json.loads(os.environ["SSE_PROXY_MCP_ARGS"]),
            read_timeout_seconds=wait,
            progress_callback=on_progress,
        )
    if result.isError:
        print("the tool failed", file=sys.stderr)
        return 1
    sys.stdout.write("".join(c.text for c in result.content if c.type == "text"))
    return 0


sys.exit(anyio.run(main))
