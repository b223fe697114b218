"""Helpers for the security tests: real servers on loopback ports, raw sockets, subprocesses.

Nothing here is mocked: the proxy runs in-process (``start_proxy``) or as a real
``sse-proxy serve`` subprocess, upstreams are real aiohttp apps or raw asyncio servers, and
a "decoy" server stands for any host an attacker would like the proxy to reach: the tests
assert that it is never contacted.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import web

from sse_proxy.config import Config
from sse_proxy.server.run import start_proxy, stop_proxy

SSE_PROXY = str(Path(sys.executable).with_name("sse-proxy"))
ROOT = Path(__file__).resolve().parents[2]


def free_port() -> int:
    """A TCP port that was free on 127.0.0.1 a moment ago."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def port_of(url: str) -> int:
    return int(url.rsplit(":", 1)[1].split("/", 1)[0])


# ------------------------------------------------------------------------ raw HTTP


@dataclass
class RawReply:
    """An HTTP/1.x response read off a plain socket (chunked bodies decoded)."""

    status: int
    headers: list[tuple[str, str]]
    body: bytes

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name.lower()), None)

    def header_all(self, name: str) -> list[str]:
        return [v for k, v in self.headers if k.lower() == name.lower()]

    def json(self) -> Any:
        return json.loads(self.body)


def _dechunk(data: bytes) -> bytes:
    out = bytearray()
    while data:
        size_line, _, rest = data.partition(b"\r\n")
        size = int(size_line.split(b";", 1)[0].strip() or b"0", 16)
        if size == 0:
            break
        out += rest[:size]
        data = rest[size + 2 :]
    return bytes(out)


def _complete(data: bytes) -> bool:
    """Whether ``data`` holds a whole response (by Content-Length or the last chunk)."""
    head, sep, body = data.partition(b"\r\n\r\n")
    if not sep:
        return False
    fields = {}
    for line in head.split(b"\r\n")[1:]:
        key, _, value = line.partition(b":")
        fields[key.strip().lower()] = value.strip().lower()
    if b"chunked" in fields.get(b"transfer-encoding", b""):
        return body.endswith(b"0\r\n\r\n")
    if b"content-length" in fields:
        return len(body) >= int(fields[b"content-length"])
    return False


async def raw_request(port: int, request: bytes, *, wait: float = 5.0) -> RawReply:
    """Send ``request`` verbatim to 127.0.0.1:``port``; read one whole reply (or until EOF)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(request)
        await writer.drain()
        data = b""
        async with asyncio.timeout(wait):
            while not _complete(data):
                try:
                    block = await reader.read(65536)
                except ConnectionResetError:
                    break
                if not block:
                    break
                data += block
    finally:
        writer.close()
        with contextlib.suppress(ConnectionError):
            await writer.wait_closed()
    head, _, body = data.partition(b"\r\n\r\n")
    lines = head.decode("latin-1").split("\r\n")
    assert lines[0].startswith("HTTP/"), f"not an HTTP response: {data[:200]!r}"
    status = int(lines[0].split(" ", 2)[1])
    headers = []
    for line in lines[1:]:
        key, _, value = line.partition(":")
        headers.append((key.strip(), value.strip()))
    reply = RawReply(status, headers, body)
    if "chunked" in (reply.header("Transfer-Encoding") or "").lower():
        reply.body = _dechunk(body)
    return reply


# ------------------------------------------------------------------------- servers


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


# ---------------------------------------------------------------------- subprocess


class ServeProcess:
    """``sse-proxy serve`` as a real subprocess, its stderr (the JSON log) in a file.

    Use as a context manager; ``stop()`` sends SIGTERM and returns the whole log text.
    """

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.args = [SSE_PROXY, "serve", *args]
        self.env = {**os.environ, **(env or {})}
        for name in list(self.env):
            if name.startswith("SSE_PROXY_") and name not in (env or {}):
                del self.env[name]
        self._log = tempfile.TemporaryFile(mode="w+b")  # noqa: SIM115 - closed in stop()
        self.proc: subprocess.Popen[bytes] | None = None
        self.text = ""

    def __enter__(self) -> ServeProcess:
        self.proc = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            env=self.env,
            cwd=ROOT,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_text(self) -> str:
        if self._log.closed:
            return self.text
        self._log.seek(0)
        return self._log.read().decode("utf-8", "replace")

    def lines(self) -> list[dict[str, Any]]:
        """The JSON log lines so far (asserting that every line is JSON)."""
        out = []
        for line in self.log_text().splitlines():
            if line.strip():
                out.append(json.loads(line))
        return out

    def wait_for(self, event: str, count: int = 1, timeout: float = 20.0) -> list[dict[str, Any]]:
        """Wait until ``event`` was logged ``count`` times; the process must stay alive."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            found = [e for e in self.lines() if e.get("event") == event]
            if len(found) >= count:
                return found
            code = self.proc.poll()
            if code is not None:
                raise AssertionError(f"serve exited {code} early:\n{self.log_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{event} x{count} not logged:\n{self.log_text()[-3000:]}")
            time.sleep(0.05)

    def stop(self, timeout: float = 20.0) -> str:
        """SIGTERM, wait, and return the full log text (idempotent)."""
        if self.proc is not None and self.proc.returncode is None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                raise
        if not self._log.closed:
            self.text = self.log_text()
            self._log.close()
        return self.text


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """A blocking GET (for code that runs next to a subprocess, outside an event loop)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()
