"""Decompression probe: compressed SSE through the proxy, and a neighbour on the same loop.

An in-process upstream serves gzip / br / identity bodies in 64 KiB writes to an
in-process proxy (defaults, or ``--slice`` bytes per observer step); a neighbour coroutine
on the same event loop sleeps 2 ms at a time and records its worst overshoot, which is the
longest the loop was held while that body went through. Per body it prints the compressed
and plain sizes, whether the client got the bytes exactly, whether the observer read the
body whole (or the ``stream.not_observed`` reason), and the worst stall.

Hand-run, not a test (figures depend on the machine's load)::

    .venv/bin/python -m bench.probes.probe_decompression
    .venv/bin/python -m bench.probes.probe_decompression --slice 262144     # compare step sizes
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import time
from collections.abc import Callable
from typing import Any

import aiohttp
import brotli
import structlog
from aiohttp import web

from sse_proxy.server import decompress
from sse_proxy.server.run import start_proxy, stop_proxy
from sse_proxy.settings import Config

MIB = 1 << 20


def _event(text: bytes) -> bytes:
    return b'data: {"choices":[{"index":0,"delta":{"content":"' + text + b'"}}]}\n\n'


def _bodies() -> dict[str, tuple[str, bytes, int]]:
    """name -> (coding, bytes sent, plain size)."""
    legit = _event(b"Hello, world! ") * (6 * MIB // 60) + b"data: [DONE]\n\n"
    zeros = _event(b"hi") + b"\0" * (256 * MIB)
    lines = b"\n" * (8 * MIB)
    br: Callable[[bytes], bytes] = lambda d: brotli.compress(d, quality=1)  # noqa: E731
    return {
        "identity 7 MB answer": ("identity", legit, len(legit)),
        "gzip 7 MB answer": ("gzip", gzip.compress(legit), len(legit)),
        "br 7 MB answer": ("br", br(legit), len(legit)),
        "gzip 256 MiB zeros": ("gzip", gzip.compress(zeros, 1), len(zeros)),
        "br 256 MiB zeros": ("br", br(zeros), len(zeros)),
        "identity 8 MiB newlines": ("identity", lines, len(lines)),
        "gzip 8 MiB newlines": ("gzip", gzip.compress(lines, 9), len(lines)),
    }


async def _probe(slice_bytes: int | None) -> None:
    bodies = _bodies()
    if slice_bytes is not None:
        kwdefaults = decompress.make_observer_decoder.__kwdefaults__
        assert kwdefaults is not None
        kwdefaults["slice_bytes"] = slice_bytes

    async def handler(request: web.Request) -> web.StreamResponse:
        coding, data, _ = bodies[request.query["b"]]
        headers = {"Content-Type": "text/event-stream", "Content-Encoding": coding}
        resp = web.StreamResponse(headers=headers)
        await resp.prepare(request)
        for i in range(0, len(data), 64 << 10):
            await resp.write(data[i : i + (64 << 10)])
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/v1/chat/completions", handler)
    upstream = web.AppRunner(app, access_log=None)
    await upstream.setup()
    site = web.TCPSite(upstream, "127.0.0.1", 0)
    await site.start()
    runner, url = await start_proxy(
        Config(upstream=f"http://127.0.0.1:{upstream.addresses[0][1]}", port=0)
    )
    step = slice_bytes or decompress.DEFAULT_SLICE
    print(f"observer step: {step} bytes")
    print(f"{'body':<26}{'sent':>12}{'plain':>12}  {'bytes':<7}{'observed':<28}{'stall':>9}")
    try:
        async with aiohttp.ClientSession(auto_decompress=False) as session:
            for name, (_, data, plain) in bodies.items():
                await _one(session, url, name, data, plain)
    finally:
        await stop_proxy(runner)
        await upstream.cleanup()


async def _one(
    session: aiohttp.ClientSession, url: str, name: str, data: bytes, plain: int
) -> None:
    worst = 0.0
    done = asyncio.Event()

    async def neighbour() -> None:
        nonlocal worst
        while not done.is_set():
            began = time.monotonic()
            await asyncio.sleep(0.002)
            worst = max(worst, time.monotonic() - began - 0.002)

    with structlog.testing.capture_logs() as logs:
        ticker = asyncio.create_task(neighbour())
        async with session.get(f"{url}/v1/chat/completions", params={"b": name}) as resp:
            body = await resp.read()
            sid = resp.headers["X-SSE-Proxy-Stream-Id"]
        summary = await _summary(logs, sid)
        done.set()
        await ticker
    stopped = [e for e in logs if e["event"] == "stream.not_observed"]
    if stopped:
        seen = f"no: {stopped[0]['reason']} ({stopped[0].get('limit')})"
    else:
        seen = "whole" if summary["bytes_observed"] == plain else "PARTIAL"
    same = "same" if body == data else "DIFFER"
    print(f"{name:<26}{len(data):>12,}{plain:>12,}  {same:<7}{seen:<28}{worst * 1000:>7.1f}ms")


async def _summary(logs: list[Any], sid: str) -> Any:
    for _ in range(30_000):
        found = [e for e in logs if e["event"] == "stream.summary" and e["stream_id"] == sid]
        if found:
            return found[0]
        await asyncio.sleep(0.001)
    raise SystemExit(f"no stream.summary for {sid}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slice", type=int, default=None, help="observer step, bytes")
    args = parser.parse_args(argv)
    asyncio.run(_probe(args.slice))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
