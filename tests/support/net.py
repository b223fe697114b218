"""Loopback networking for tests: free ports, raw HTTP exchanges, servers started and stopped.

Nothing here is mocked: a raw exchange writes the request bytes verbatim to a real socket
and parses what comes back, keeping the HTTP/1.1 chunk boundaries the proxy chose.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
import os
import socket
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from sse_proxy.server.run import start_proxy, stop_proxy
from sse_proxy.settings import Config

__all__ = [
    "STREAM_ID",
    "RawResponse",
    "dead_port",
    "free_port",
    "port_of",
    "raw_exchange",
    "read_all",
    "running_app",
    "running_proxy",
]


STREAM_ID = "X-SSE-Proxy-Stream-Id"
"""The response header that names a proxied stream (the contract's spelling)."""


_OWN_PORTS_FROM, _OWN_PORTS_TO = 20000, 32000
"""Below Linux's ephemeral range (32768-60999), where the kernel never hands out a port on
its own: a port taken there from ``bind(0)`` could be given to any other socket (an
outgoing connection's source port, another worker's port-0 server) between its release
and the subprocess's bind, and CI once lost a test to exactly that."""
_SHARE = 2000
_TURNS = itertools.count(os.getpid() % _SHARE)  # where this process starts in its share


def free_port() -> int:
    """A TCP port free on 127.0.0.1 a moment ago, for a subprocess that must be told its
    port: taken from this xdist worker's own share of ports the kernel does not hand out
    by itself, so no other test's socket can be given it before the subprocess binds."""
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    shares = (_OWN_PORTS_TO - _OWN_PORTS_FROM) // _SHARE
    start = _OWN_PORTS_FROM + (int(worker) if worker.isdigit() else 0) % shares * _SHARE
    for _ in range(_SHARE):
        port = start + next(_TURNS) % _SHARE
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue  # in use, or held in TIME_WAIT by an earlier test's server
        return port
    raise RuntimeError(f"no free port in {start}-{start + _SHARE - 1}")


_HELD: list[socket.socket] = []


def dead_port() -> int:
    """A port on 127.0.0.1 that refuses connections for as long as this process runs: bound
    and never listened on, so no server started later (a proxy on port 0 among them) can be
    given it. ``free_port()`` as an unreachable upstream once came back as the proxy's own
    port, and the proxy forwarded to itself until it ran out of sockets."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    _HELD.append(sock)
    return int(sock.getsockname()[1])


def port_of(url: str) -> int:
    """The port of ``http://host:port[/path]``."""
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


@dataclass
class RawResponse:
    """An HTTP/1.x response read off a plain socket: chunk boundaries kept, chunked bodies
    decoded; ``complete`` says whether the body ended properly (last chunk or full length),
    as opposed to a connection that was closed or reset mid-body."""

    status: int
    headers: list[tuple[str, str]]
    chunks: list[bytes] = field(default_factory=list)
    complete: bool = False

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def header_all(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)

    def json(self) -> Any:
        return json.loads(self.body)


async def raw_exchange(target: str | int, request: bytes, *, limit_s: float = 10.0) -> RawResponse:
    """Send ``request`` verbatim to ``target`` (a base URL, or a port on 127.0.0.1); read one
    reply, chunk by chunk. A connection closed or reset mid-body ends the reply with
    ``complete`` false; no reply at all within ``limit_s`` raises TimeoutError."""
    if isinstance(target, int):
        host, port = "127.0.0.1", target
    else:
        host, _, port_text = target.removeprefix("http://").split("/", 1)[0].rpartition(":")
        port = int(port_text)
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(request)
        await writer.drain()
        async with asyncio.timeout(limit_s):
            return await _read_response(reader)
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()


async def _read_response(reader: asyncio.StreamReader) -> RawResponse:
    try:
        head = await reader.readuntil(b"\r\n\r\n")
    except asyncio.IncompleteReadError as exc:
        raise AssertionError(f"not an HTTP response: {exc.partial[:200]!r}") from None
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/"), f"not an HTTP response: {head[:200]!r}"
    status = int(lines[0].split(" ", 2)[1])
    headers = []
    for line in lines[1:]:
        if line:
            key, _, value = line.partition(":")
            headers.append((key.strip(), value.strip()))
    out = RawResponse(status, headers)
    with contextlib.suppress(asyncio.IncompleteReadError, ConnectionError):
        await _read_body(reader, out)
    return out


async def _read_body(reader: asyncio.StreamReader, out: RawResponse) -> None:
    if "chunked" in (out.header("Transfer-Encoding") or "").lower():
        while True:
            size_line = await reader.readuntil(b"\r\n")
            size = int(size_line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                await reader.readuntil(b"\r\n")  # no trailers from the proxy
                out.complete = True
                return
            out.chunks.append(await reader.readexactly(size))
            assert await reader.readexactly(2) == b"\r\n"
    length = out.header("Content-Length")
    if length is not None:
        if int(length):
            out.chunks.append(await reader.readexactly(int(length)))
        out.complete = True
        return
    rest = await reader.read()
    if rest:
        out.chunks.append(rest)
    out.complete = True


async def read_all(resp: aiohttp.ClientResponse) -> list[bytes]:
    """The body as the reads that delivered it."""
    return [chunk async for chunk in resp.content.iter_any()]


@contextlib.asynccontextmanager
async def running_app(app: web.Application) -> AsyncIterator[str]:
    """Serve ``app`` on an ephemeral loopback port; yield its base URL."""
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


@contextlib.asynccontextmanager
async def running_proxy(upstream: str, **overrides: Any) -> AsyncIterator[str]:
    """The real proxy in-process on an ephemeral loopback port; yield its base URL."""
    settings: dict[str, Any] = {"port": 0, "shutdown_grace": 0.5, **overrides}
    runner, url = await start_proxy(Config(upstream=upstream, **settings))
    try:
        yield url
    finally:
        await stop_proxy(runner)
