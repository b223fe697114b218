"""test-gateway's client: a correct one, that keeps every read and its time and nothing else.

It does no parsing while the stream is open (the stream is read after it ended,
:mod:`.meaning`), so the harness is never what a gateway waits for.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Mapping
from typing import Any

import aiohttp

from sse_proxy.server.aiohttp_internals import lean_body
from sse_proxy.tools.testgateway.meaning import Transport

__all__ = ["stream_once"]


def _why(exc: BaseException) -> str:
    text = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
    return f"{type(exc).__name__}: {text}" if text else type(exc).__name__


async def stream_once(
    session: aiohttp.ClientSession,
    url: str,
    body: Mapping[str, Any],
    headers: Mapping[str, str],
    seconds: float,
) -> tuple[Transport, bool]:
    """POST ``body`` to ``url`` and read the answer to its end: (what came, hung)."""
    reads: list[tuple[float, bytes]] = []
    status: int | None = None
    content_type = ""
    broken: str | None = None
    hung = False
    started = time.monotonic()
    data = json.dumps(body, ensure_ascii=False).encode("utf-8")
    try:
        async with asyncio.timeout(seconds):
            async with session.post(
                url,
                data=data,
                headers={"Content-Type": "application/json", **headers},
            ) as resp:
                status, content_type = resp.status, resp.headers.get("Content-Type", "")
                lean_body(resp.content)  # what the gateway sent before a break is read first
                try:
                    async for chunk in resp.content.iter_any():
                        reads.append((time.monotonic(), chunk))
                except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError, OSError) as exc:
                    broken = _why(exc)
    except TimeoutError:
        hung = True
    except (aiohttp.ClientError, OSError) as exc:
        broken = _why(exc)
    return Transport(status, content_type, reads, started, broken), hung
