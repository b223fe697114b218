"""Fixtures for the fault, load and shutdown tests: real loopback sockets, scripted upstreams.

A :class:`RawUpstream` is a plain asyncio TCP server whose behaviour per connection is a
small coroutine (answer slowly, stall, close mid-stream, reset, never answer), and which
records, server-side, the moment the proxy closed each connection. Everything started
here is stopped after the test.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, MutableMapping
from dataclasses import dataclass, field
from typing import Any

import pytest
import pytest_asyncio
import structlog
from aiohttp import web

from sse_proxy.config import Config
from sse_proxy.server.run import start_proxy, stop_proxy

LogEntries = list[MutableMapping[str, Any]]
Behaviour = Callable[["UpstreamConn"], Awaitable[None]]
StartProxy = Callable[..., Awaitable[tuple[web.AppRunner, str]]]

STREAM_ID = "X-SSE-Proxy-Stream-Id"
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\n"
    b"Content-Type: text/event-stream\r\n"
    b"Cache-Control: no-cache\r\n"
    b"Transfer-Encoding: chunked\r\n"
    b"\r\n"
)


def chunk(data: bytes) -> bytes:
    """``data`` as one HTTP/1.1 chunk."""
    return b"%x\r\n%s\r\n" % (len(data), data)


def event(i: int) -> bytes:
    """One small OpenAI-shaped SSE frame."""
    return b'data: {"choices":[{"index":0,"delta":{"content":"t%d"}}]}\n\n' % i


def free_port() -> int:
    """A loopback port that nothing listens on (bound, then released)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


@dataclass
class UpstreamConn:
    """One accepted upstream connection, as the scripted behaviour sees it."""

    reader: asyncio.StreamReader
    writer: asyncio.StreamWriter
    head: bytes = b""
    headers_sent: asyncio.Event = field(default_factory=asyncio.Event)
    first_byte_sent: asyncio.Event = field(default_factory=asyncio.Event)
    closed: asyncio.Event = field(default_factory=asyncio.Event)
    closed_at: float | None = None
    close_kind: str = ""

    async def send(self, data: bytes) -> None:
        self.writer.write(data)
        await self.writer.drain()

    async def send_head(self) -> None:
        await self.send(SSE_HEAD)
        self.headers_sent.set()

    async def send_event(self, i: int) -> None:
        await self.send(chunk(event(i)))
        self.first_byte_sent.set()

    async def until_closed(self) -> None:
        """Wait (reading) until the proxy closes this connection; note when and how."""
        try:
            while await self.reader.read(65536):
                pass
            kind = "eof"
        except (ConnectionResetError, BrokenPipeError):
            kind = "reset"
        self.mark_closed(kind)

    def mark_closed(self, kind: str) -> None:
        if self.closed_at is None:
            self.closed_at = time.monotonic()
            self.close_kind = kind
            self.closed.set()

    def reset(self) -> None:
        """Drop the connection with a TCP RST (SO_LINGER 0, then abort)."""
        sock = self.writer.get_extra_info("socket")
        if sock is not None:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        self.writer.transport.abort()


class RawUpstream:
    """A loopback TCP server that reads each request head, then runs ``behaviour``."""

    def __init__(self, behaviour: Behaviour) -> None:
        self.behaviour = behaviour
        self.conns: list[UpstreamConn] = []
        self.accepted = asyncio.Event()
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[None]] = set()
        self.url = ""

    async def start(self) -> str:
        self._server = await asyncio.start_server(self._handle, "127.0.0.1", 0)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://127.0.0.1:{port}"
        return self.url

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self._tasks.add(task)
        conn = UpstreamConn(reader, writer)
        self.conns.append(conn)
        try:
            conn.head = await reader.readuntil(b"\r\n\r\n")
            self.accepted.set()
            await self.behaviour(conn)
        except (ConnectionError, asyncio.IncompleteReadError):
            conn.mark_closed("reset")
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self._tasks.discard(task)

    @property
    def conn(self) -> UpstreamConn:
        assert self.conns, "the proxy never connected"
        return self.conns[-1]

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
            await self._server.wait_closed()
        if self._tasks:  # behaviours end when the proxy hangs up; cancel the stragglers
            _done, pending = await asyncio.wait(set(self._tasks), timeout=0.5)
            for task in pending:
                task.cancel()
            if pending:
                await asyncio.wait(pending)


@pytest_asyncio.fixture
async def raw_upstream() -> AsyncIterator[Callable[[Behaviour], Awaitable[RawUpstream]]]:
    """``await raw_upstream(behaviour)`` starts a scripted upstream; all stop after."""
    servers: list[RawUpstream] = []

    async def _start(behaviour: Behaviour) -> RawUpstream:
        server = RawUpstream(behaviour)
        await server.start()
        servers.append(server)
        return server

    try:
        yield _start
    finally:
        for server in servers:
            await server.stop()


@pytest_asyncio.fixture
async def proxy() -> AsyncIterator[StartProxy]:
    """``runner, url = await proxy(upstream, **config)`` runs a proxy; all stop after."""
    runners: list[web.AppRunner] = []

    async def _start(upstream: str, **overrides: Any) -> tuple[web.AppRunner, str]:
        settings: dict[str, Any] = {"port": 0, "shutdown_grace": 0.5, **overrides}
        runner, url = await start_proxy(Config(upstream=upstream, **settings))
        runners.append(runner)
        return runner, url

    try:
        yield _start
    finally:
        for runner in reversed(runners):
            await stop_proxy(runner)


@pytest.fixture
def logs() -> Iterator[LogEntries]:
    """Every structlog event emitted during the test, as dicts."""
    with structlog.testing.capture_logs() as entries:
        yield entries


def named(entries: LogEntries, name: str, stream_id: str | None = None) -> LogEntries:
    return [
        e
        for e in entries
        if e["event"] == name and (stream_id is None or e.get("stream_id") == stream_id)
    ]


async def wait_logged(
    entries: LogEntries, name: str, stream_id: str | None = None, within: float = 3.0
) -> MutableMapping[str, Any]:
    """The last ``name`` event (of ``stream_id``), waiting for it up to ``within`` seconds."""
    if not await eventually(lambda: bool(named(entries, name, stream_id)), within):
        seen = [e["event"] for e in entries]
        raise AssertionError(f"{name} not logged within {within}s; saw {seen}")
    return named(entries, name, stream_id)[-1]


async def eventually(predicate: Callable[[], bool], within: float = 3.0) -> bool:
    """Poll ``predicate`` (state owned by the proxy, which has no event for it) until true."""
    deadline = time.monotonic() + within
    while not predicate():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True
