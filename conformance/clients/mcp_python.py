# mcp (Python, 2.x): the official SDK's Client calls SSE_PROXY_MCP_TOOL with
# SSE_PROXY_MCP_ARGS, a progress callback asking for progress, and prints the result's text
# content. argv[1]: the revision, 2025-11-25 (the default Client: it probes with
# server/discover, then falls back to initialize; the mock is told to be a handshake-era
# server, ?mcp=era=legacy, as it is dual-era otherwise and the probe would find 2026-07-28)
# or 2026-07-28 (stateless, pinned).
# CONFORMANCE_TIMEOUT (seconds): call_tool's read_timeout_seconds (the whole call's wait).
from __future__ import annotations

import json
import os
import sys

import anyio
from mcp import Client

revision = sys.argv[1] if len(sys.argv) > 1 else "2025-11-25"
timeout = os.environ.get("CONFORMANCE_TIMEOUT")


async def main() -> int:
    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        pass

    url = os.environ["SSE_PROXY_STREAM_URL"]
    pinned = {"mode": revision} if revision >= "2026-07-28" else {}  # default: "auto"
    if not pinned:
        url += ("&" if "?" in url else "?") + "mcp=era%3Dlegacy"
    async with Client(url, **pinned) as client:
        result = await client.call_tool(
            os.environ["SSE_PROXY_MCP_TOOL"],
            json.loads(os.environ["SSE_PROXY_MCP_ARGS"]),
            read_timeout_seconds=None if timeout is None else float(timeout),
            progress_callback=on_progress,
        )
    if result.is_error:
        print("the tool failed", file=sys.stderr)
        return 1
    sys.stdout.write("".join(c.text for c in result.content if c.type == "text"))
    return 0


sys.exit(anyio.run(main))
