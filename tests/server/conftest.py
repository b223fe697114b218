"""Fixtures for the proxy's integration tests: real loopback sockets, real servers, no mocks.

A mock LLM upstream (:mod:`sse_proxy.tools.mock_upstream`) or a small custom aiohttp app plays the
upstream, ``start_proxy`` runs the real proxy in front of it on an ephemeral port, and
``structlog.testing.capture_logs`` collects what the proxy logs.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
import structlog
from aiohttp import web

from sse_proxy.config import Config
from sse_proxy.server.run import start_proxy, stop_proxy
from sse_proxy.tools.mock_upstream import start_mock_upstream

LogEntries = list[MutableMapping[str, Any]]
StartProxy = Callable[..., Awaitable[str]]
StartApp = Callable[[web.Application], Awaitable[str]]

ALERT_EVENTS = frozenset(
    {
        "sse.replacement_char",
        "sse.unterminated_frame",
        "sse.crlf_framing",
        "sse.invalid_json",
        "sse.truncated",
        "sse.oversized_frame",
    }
)
STREAM_ID = "X-SSE-Proxy-Stream-Id"


@pytest_asyncio.fixture
async def mock_url() -> AsyncIterator[str]:
    """The built-in mock LLM upstream on an ephemeral loopback port."""
    runner, url = await start_mock_upstream()
    try:
        yield url
    finally:
        await runner.cleanup()


@pytest_asyncio.fixture
async def start() -> AsyncIterator[StartProxy]:
    """``await start(upstream, **config)`` runs a proxy and returns its URL; all stop after."""
    runners: list[web.AppRunner] = []

    async def _start(upstream: str, **overrides: Any) -> str:
        settings: dict[str, Any] = {"port": 0, "shutdown_grace": 0.5, **overrides}
        runner, url = await start_proxy(Config(upstream=upstream, **settings))
        runners.append(runner)
        return url

    try:
        yield _start
    finally:
        for runner in reversed(runners):
            await stop_proxy(runner)


@pytest_asyncio.fixture
async def proxy_url(mock_url: str, start: StartProxy) -> str:
    """A passthrough proxy in front of the mock upstream."""
    return await start(mock_url)


@pytest_asyncio.fixture
async def start_app() -> AsyncIterator[StartApp]:
    """``await start_app(app)`` serves a custom upstream app on loopback; all stop after."""
    runners: list[web.AppRunner] = []

    async def _start(app: web.Application) -> str:
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        runners.append(runner)
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    try:
        yield _start
    finally:
        for runner in reversed(runners):
            await runner.cleanup()


@pytest_asyncio.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    """A client that leaves bodies as they come (no decompression)."""
    async with aiohttp.ClientSession(auto_decompress=False) as client:
        yield client


@pytest.fixture
def logs() -> Iterator[LogEntries]:
    """Every structlog event the proxy emits during the test, as dicts."""
    with structlog.testing.capture_logs() as entries:
        yield entries


# ----------------------------------------------------------------------------- helpers


def named(entries: LogEntries, event: str, stream_id: str | None = None) -> LogEntries:
    """The captured events called ``event`` (of one stream, when ``stream_id`` is given)."""
    return [
        e
        for e in entries
        if e["event"] == event and (stream_id is None or e.get("stream_id") == stream_id)
    ]


def alert_names(entries: LogEntries, stream_id: str | None = None) -> set[str]:
    """The names of the alert events logged (for one stream, when given)."""
    return {
        e["event"]
        for e in entries
        if e["event"] in ALERT_EVENTS and (stream_id is None or e.get("stream_id") == stream_id)
    }


def warnings(entries: LogEntries) -> LogEntries:
    """The captured warning-level (and worse) events."""
    return [e for e in entries if e.get("log_level") in ("warning", "error", "critical")]


async def wait_for(
    entries: LogEntries, event: str, stream_id: str | None = None, within: float = 3.0
) -> MutableMapping[str, Any]:
    """Wait until ``event`` is logged (the proxy may log it after the client is done)."""
    deadline = time.monotonic() + within
    while True:
        found = named(entries, event, stream_id)
        if found:
            return found[-1]
        if time.monotonic() > deadline:
            seen = [e["event"] for e in entries]
            raise AssertionError(f"{event} not logged within {within}s; saw {seen}")
        await asyncio.sleep(0.01)


def summary(entries: LogEntries, stream_id: str) -> MutableMapping[str, Any]:
    """The one ``stream.summary`` line of a stream."""
    found = named(entries, "stream.summary", stream_id)
    assert len(found) == 1, found
    return found[0]


async def read_all(resp: aiohttp.ClientResponse) -> list[bytes]:
    """The body as the reads that delivered it."""
    return [chunk async for chunk in resp.content.iter_any()]


@dataclass
class RawResponse:
    """An HTTP/1.1 response read off a plain socket, chunk boundaries kept."""

    status: int
    headers: list[tuple[str, str]]
    chunks: list[bytes] = field(default_factory=list)
    complete: bool = False

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)


def firehose_app(
    frame: bytes,
    count: int,
    sent: list[int],
    *,
    done: asyncio.Event | None = None,
    yield_each: bool = False,
) -> web.Application:
    """An upstream at ``GET /v1/text`` writing ``frame`` ``count`` times as fast as
    backpressure lets it; ``sent[0]`` counts the bytes written, ``done`` is set at the end.
    ``yield_each``: let the loop run after every write (small frames rarely wait)."""

    async def firehose(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        with contextlib.suppress(ConnectionError):
            for _ in range(count):
                await resp.write(frame)
                sent[0] += len(frame)
                if yield_each:
                    await asyncio.sleep(0)
            await resp.write_eof()
            if done is not None:
                done.set()
        return resp

    app = web.Application()
    app.router.add_get("/v1/text", firehose)
    return app


async def raw_exchange(url: str, request: bytes, limit_s: float = 10.0) -> RawResponse:
    """Send ``request`` verbatim to ``url``'s host:port; parse the reply, chunk by chunk."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(request)
        await writer.drain()
        async with asyncio.timeout(limit_s):
            return await _read_response(reader)
    finally:
        writer.close()
        await writer.wait_closed()


async def _read_response(reader: asyncio.StreamReader) -> RawResponse:
    head = await reader.readuntil(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ", 2)[1])
    headers = []
    for line in lines[1:]:
        if line:
            key, _, value = line.partition(":")
            headers.append((key.strip(), value.strip()))
    out = RawResponse(status, headers)
    encoding = (out.header("Transfer-Encoding") or "").lower()
    if "chunked" in encoding:
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")  # no trailers from the proxy
                out.complete = True
                return out
            out.chunks.append(await reader.readexactly(size))
            assert await reader.readexactly(2) == b"\r\n"
    length = out.header("Content-Length")
    if length is not None:
        if int(length):
            out.chunks.append(await reader.readexactly(int(length)))
        out.complete = True
        return out
    rest = await reader.read()
    if rest:
        out.chunks.append(rest)
    out.complete = True
    return out
