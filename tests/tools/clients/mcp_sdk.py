"""The reference MCP client: the official Python SDK (``mcp`` 2.x) calling a tool, as an
agent does.

``sse-proxy test-client --dialect mcp -- python -m tests.tools.clients.mcp_sdk``: it
connects to SSE_PROXY_STREAM_URL (the probing client: ``server/discover``, which the mock
told ``era=legacy`` answers as a handshake-era server does, then the initialize
handshake), calls SSE_PROXY_MCP_TOOL with the JSON arguments in SSE_PROXY_MCP_ARGS, asking
for progress, and prints the result's text content, nothing else. A failed call (an
error, a broken stream, a tool error) exits 1.
"""

from __future__ import annotations

import json
import os
import sys

import anyio
from mcp import Client


async def main() -> int:
    seen: list[float] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append(progress)

    url = os.environ["SSE_PROXY_STREAM_URL"]
    # the mock as a handshake-era server: the probe gets a 400 and the client falls back
    url += ("&" if "?" in url else "?") + "mcp=era%3Dlegacy"
    async with Client(url) as client:
        result = await client.call_tool(
            os.environ["SSE_PROXY_MCP_TOOL"],
            json.loads(os.environ["SSE_PROXY_MCP_ARGS"]),
            progress_callback=on_progress,
        )
    text = "".join(c.text for c in result.content if c.type == "text")
    if result.is_error:
        print(f"the tool failed: {text[:200]}", file=sys.stderr)
        return 1
    print(f"progress: {seen}", file=sys.stderr)
    sys.stdout.buffer.write(text.encode("utf-8", "surrogatepass"))
    return 0


if __name__ == "__main__":
    try:
        sys.exit(anyio.run(main))
    except Exception as exc:
        print(f"the call failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        sys.exit(1)
