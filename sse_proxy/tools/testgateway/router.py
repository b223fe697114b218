"""The upstream a gateway is pointed at: one port in front of every case's own upstream.

A gateway is configured with one upstream URL, and it drops or rewrites much of a request
on the way (headers it does not know, query strings, sometimes the path), so the case a
request belongs to travels in two places a gateway keeps (:data:`CASE_HEADER`, and a
suffix of the model name, :func:`model_key`); when neither arrives the router serves the
case the harness armed (cases then run one at a time). Per request it reads the request
whole, finds the case, and splices the case's own upstream (the same stack `test-client`
serves the case from) to the gateway byte for byte: a reset is passed on as a reset, a
stall as a stall. It records every read it forwards with its time: that is what the
upstream sent, to compare with what the gateway made of it.

Each request is answered on a connection of its own (``Connection: close`` both ways), so
a gateway's pooled connection never carries two cases.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import socket
import struct
import sys
import time
from dataclasses import dataclass, field
from typing import Any, Final

from sse_proxy.names import MOCK_DELAY_HEADER
from sse_proxy.tools.testgateway.wire import (
    MAX_HEAD,
    RequestHead,
    WireError,
    decode_chunked,
    parse_request_head,
    request_model,
)

__all__ = [
    "CASE_HEADER",
    "CHANNELS",
    "CaseRouter",
    "Route",
    "UpstreamCall",
    "model_key",
]

CASE_HEADER: Final = "X-Gateway-Case"
CHANNELS: Final = ("header", "model", "order")
"""How the case reached the router: its header, the model name's suffix, or the order the
harness runs the cases in (the case armed when neither came through)."""
_MODEL_SUFFIX: Final = re.compile(r"--sse-proxy-case-([a-z0-9]+)$")
_READ = 64 * 1024
_MAX_BODY = 16 * 1024 * 1024


def model_key(model: str, key: str) -> str:
    """``model`` with the case's key as a suffix that survives gateways which keep the
    model name (lowercase letters, digits and dashes only)."""
    return f"{model}--sse-proxy-case-{key}"


@dataclass(slots=True)
class UpstreamCall:
    """One request the gateway made for a case, and the response it was sent."""

    method: str
    path: str
    model: str | None
    channel: str
    arrived: float
    headers: tuple[tuple[str, str], ...]
    reads: list[tuple[float, bytes]] = field(default_factory=list)
    end: str = "open"
    """``eof`` (the upstream closed), ``reset``, ``gateway_left`` (the gateway closed
    first), ``refused`` (no case to serve), or ``open``."""
    done: asyncio.Event = field(default_factory=asyncio.Event)


@dataclass(slots=True)
class Route:
    """Where a case's requests go, and what they got."""

    key: str
    host: str
    port: int
    extra_headers: dict[str, str] = field(default_factory=dict)
    calls: list[UpstreamCall] = field(default_factory=list)
    arrived: asyncio.Event = field(default_factory=asyncio.Event)


class CaseRouter:
    """The loopback server the gateway calls ``{upstream}``; start it, then add routes."""

    def __init__(self) -> None:
        self.routes: dict[str, Route] = {}
        self.armed: str | None = None
        self.strays: list[UpstreamCall] = []
        self._server: asyncio.Server | None = None
        self._tasks: set[asyncio.Task[Any]] = set()
        self.url = ""

    async def start(self, host: str = "127.0.0.1") -> str:
        self._server = await asyncio.start_server(self._handle, host, 0, limit=MAX_HEAD)
        port = self._server.sockets[0].getsockname()[1]
        self.url = f"http://{host}:{port}"
        return self.url

    async def stop(self) -> None:
        if self._server is not None:
            self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        if self._server is not None:
            await self._server.wait_closed()

    def add(self, route: Route) -> None:
        self.routes[route.key] = route

    def remove(self, key: str) -> None:
        self.routes.pop(key, None)
        if self.armed == key:
            self.armed = None

    def _find(self, head: RequestHead, model: str | None) -> tuple[Route | None, str]:
        key = head.get(CASE_HEADER)
        if key is not None and key in self.routes:
            return self.routes[key], "header"
        found = _MODEL_SUFFIX.search(model or "")
        if found is not None and found.group(1) in self.routes:
            return self.routes[found.group(1)], "model"
        if self.armed is not None and self.armed in self.routes:
            return self.routes[self.armed], "order"
        return None, "order"

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._tasks.add(task)
            task.add_done_callback(self._tasks.discard)
        try:
            await self._serve(reader, writer)
        except (OSError, WireError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()
            with contextlib.suppress(OSError, asyncio.CancelledError):
                await writer.wait_closed()

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        head_bytes = await reader.readuntil(b"\r\n\r\n")
        arrived = time.monotonic()
        head = parse_request_head(head_bytes)
        if (head.get("expect") or "").lower() == "100-continue":
            writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        body = await _read_body(reader, head)
        model = request_model(body)
        route, channel = self._find(head, model)
        call = UpstreamCall(head.method, head.path, model, channel, arrived, head.headers)
        if route is None:
            call.end = "refused"
            self.strays.append(call)
            await _refuse(writer, head)
            call.done.set()
            return
        route.calls.append(call)
        route.arrived.set()
        try:
            await self._splice(route, call, head, body, writer, reader)
        finally:
            call.done.set()

    async def _splice(
        self,
        route: Route,
        call: UpstreamCall,
        head: RequestHead,
        body: bytes,
        writer: asyncio.StreamWriter,
        reader: asyncio.StreamReader,
    ) -> None:
        loop = asyncio.get_running_loop()
        up, pipe = await loop.create_connection(lambda: _Pipe(call, writer), route.host, route.port)
        up.write(
            head.encode(
                body,
                drop=frozenset({"host", MOCK_DELAY_HEADER.lower()}),
                extra={"Host": f"{route.host}:{route.port}", **route.extra_headers},
            )
        )
        # until the upstream ends, unless the gateway hangs up first (EOF on its side)
        left: asyncio.Future[bytes] = asyncio.ensure_future(reader.read(_READ))
        try:
            while not pipe.done.done():
                waiting: set[asyncio.Future[Any]] = {pipe.done, left}
                await asyncio.wait(waiting, return_when=asyncio.FIRST_COMPLETED)
                if left.done() and (left.exception() is not None or not left.result()):
                    break
                if left.done():
                    left = asyncio.ensure_future(reader.read(_READ))
        finally:
            left.cancel()
        if not pipe.done.done():
            call.end = "gateway_left"
            up.abort()
            return
        if isinstance(pipe.done.result(), OSError):
            call.end = "reset"
            await _reset(writer)
        else:
            call.end = "eof"


class _Pipe(asyncio.Protocol):
    """The case's upstream, read as it arrives: every read is recorded and written on to
    the gateway at once (a stream reader would drop what it holds when a reset comes)."""

    def __init__(self, call: UpstreamCall, writer: asyncio.StreamWriter) -> None:
        self.call = call
        self.writer = writer
        self.done: asyncio.Future[BaseException | None] = asyncio.get_running_loop().create_future()
        self.transport: asyncio.Transport | None = None
        self._resuming: asyncio.Future[None] | None = None

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        self.transport = transport  # type: ignore[assignment]

    def data_received(self, data: bytes) -> None:
        self.call.reads.append((time.monotonic(), data))
        self.writer.write(data)
        if self.writer.transport.get_write_buffer_size() > _READ * 16 and self.transport:
            self.transport.pause_reading()  # a slow gateway: wait until it reads
            self._resuming = asyncio.ensure_future(self._resume())

    async def _resume(self) -> None:
        with contextlib.suppress(ConnectionError, OSError):
            await self.writer.drain()
        if self.transport is not None and not self.transport.is_closing():
            self.transport.resume_reading()

    def eof_received(self) -> bool:
        return False

    def connection_lost(self, exc: Exception | None) -> None:
        if not self.done.done():
            self.done.set_result(exc)


async def _read_body(reader: asyncio.StreamReader, head: RequestHead) -> bytes:
    length = head.get("content-length")
    if length is not None:
        n = int(length)
        if n > _MAX_BODY:
            raise WireError("request body too large")
        return await reader.readexactly(n)
    if "chunked" in (head.get("transfer-encoding") or "").lower():
        data = bytearray()
        while True:
            found = decode_chunked(bytes(data))
            if found is not None:
                return found[0]
            more = await reader.read(_READ)
            if not more or len(data) > _MAX_BODY:
                raise WireError("request body incomplete or too large")
            data += more
    return b""


async def _refuse(writer: asyncio.StreamWriter, head: RequestHead) -> None:
    """A 404 that says why, in the OpenAI error shape gateways pass on."""
    message = (
        f"sse-proxy test-gateway: no case for {head.method} {head.path} (no {CASE_HEADER} "
        "header, no case in the model name, none armed)"
    )
    body = json.dumps({"error": {"message": message, "type": "invalid_request_error"}}).encode()
    writer.write(
        b"HTTP/1.1 404 Not Found\r\nContent-Type: application/json\r\n"
        b"Content-Length: %d\r\nConnection: close\r\n\r\n%s" % (len(body), body)
    )
    with contextlib.suppress(OSError):
        await writer.drain()


async def _reset(writer: asyncio.StreamWriter) -> None:
    """Pass a reset on: once the gateway has been sent every byte (a second at most), close
    with a TCP RST (``SO_LINGER`` 0), not a FIN; a reset throws away what is unsent."""
    sock = writer.get_extra_info("socket")
    for _ in range(1000):
        if not writer.transport.get_write_buffer_size() and not _unsent(sock):
            break
        await asyncio.sleep(0.001)
    if sock is not None:
        with contextlib.suppress(OSError):
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


def _unsent(sock: Any) -> int:
    """Bytes the kernel holds unacknowledged (Linux ``SIOCOUTQ``); 0 where unknown."""
    if sock is None or sys.platform == "win32":
        return 0
    import fcntl
    import termios

    try:
        out = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
    except (OSError, AttributeError, ValueError):
        return 0
    return int(struct.unpack("i", out)[0])
