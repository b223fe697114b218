"""Upstreams for tests, each a real loopback server: a scripted raw TCP upstream (answer
slowly, stall, close mid-stream, reset), a recording upstream (what reached it, header by
header), a decoy that must never be contacted, and a firehose.

The built-in mock LLM upstream (:mod:`sse_proxy.tools.mock_upstream`) is the fourth kind;
the ``mock_url`` fixture starts it.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field

from aiohttp import web

__all__ = [
    "SSE_HEAD",
    "Behaviour",
    "Decoy",
    "RawUpstream",
    "Seen",
    "UpstreamConn",
    "chunk",
    "compressed_sse_app",
    "decoy_server",
    "event",
    "firehose_app",
    "recording_app",
]

Behaviour = Callable[["UpstreamConn"], Awaitable[None]]

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


@dataclass
class Decoy:
    """A TCP server that must never be contacted: it records every connection and byte."""

    port: int = 0
    connections: int = 0
    received: bytearray = field(default_factory=bytearray)

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        with contextlib.suppress(ConnectionError, TimeoutError):
            async with asyncio.timeout(2):
                self.received += await reader.read(65536)
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\nConnection: close\r\n\r\nDECOY")
        with contextlib.suppress(ConnectionError):
            await writer.drain()
        writer.close()


@contextlib.asynccontextmanager
async def decoy_server() -> AsyncIterator[Decoy]:
    decoy = Decoy()
    server = await asyncio.start_server(decoy._handle, "127.0.0.1", 0)
    decoy.port = int(server.sockets[0].getsockname()[1])
    try:
        yield decoy
    finally:
        server.close()
        await server.wait_closed()


@dataclass
class Seen:
    """One request as a recording upstream received it."""

    method: str
    raw_path: str
    host: str | None
    headers: list[tuple[str, str]]
    body: bytes
    body_complete: bool


def recording_app(seen: list[Seen]) -> web.Application:
    """An upstream that records every request (raw target, headers, body) and echoes it."""

    async def handler(request: web.Request) -> web.Response:
        body = bytearray()
        complete = True
        try:
            async for block in request.content.iter_any():
                body += block
        except Exception:  # the proxy aborted the upload: that is what some tests want
            complete = False
        seen.append(
            Seen(
                request.method,
                request.raw_path,
                request.headers.get("Host"),
                list(request.headers.items()),
                bytes(body),
                complete,
            )
        )
        return web.json_response(
            {"method": request.method, "path": request.raw_path, "body_len": len(body)}
        )

    # Generous limits of its own, so that every limit a test meets is the proxy's.
    app = web.Application(
        client_max_size=1 << 30,
        handler_args={"max_field_size": 1 << 20, "max_line_size": 1 << 20},
    )
    app.router.add_route("*", "/{tail:.*}", handler)
    return app


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


def compressed_sse_app(
    path: str, packed: bytes, coding: str, *, seed: int, max_size: int
) -> web.Application:
    """An upstream answering POST ``path`` with ``packed`` (an SSE body compressed with
    ``coding``) in seeded reads of at most ``max_size`` bytes."""
    from sse_proxy.tools import fixtures

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "Content-Encoding": coding}
        )
        await resp.prepare(request)
        for piece in fixtures.split_reads(packed, seed=seed, max_size=max_size):
            await resp.write(piece)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post(path, handler)
    return app
