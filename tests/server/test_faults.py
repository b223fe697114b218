"""Upstream and client failures: clear errors before headers, honest cut-offs after them."""

from __future__ import annotations

import asyncio
import contextlib
import json
import socket
import struct
import time
from collections.abc import AsyncIterator, Callable, Coroutine
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web
from aiohttp.base_protocol import BaseProtocol

from sse_proxy.server.run import start_proxy, stop_proxy
from sse_proxy.settings import Config
from sse_proxy.tools import fixtures
from tests.support.logs import LogEntries, named, summary, wait_for
from tests.support.net import STREAM_ID, dead_port
from tests.support.stack import StartApp, StartProxy
from tests.support.timing import assert_fired_on_time
from tests.support.upstreams import firehose_app

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Coroutine[Any, Any, None]]
SSE_HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
)


@pytest_asyncio.fixture
async def raw_upstream() -> AsyncIterator[Callable[[Handler], Coroutine[Any, Any, str]]]:
    """``await raw_upstream(handler)`` serves a plain asyncio socket handler on loopback."""
    servers: list[asyncio.Server] = []
    tasks: set[asyncio.Task[None]] = set()

    async def _start(handler: Handler) -> str:
        async def wrapped(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            tasks.add(task)
            try:
                await handler(reader, writer)
            except (ConnectionError, asyncio.CancelledError):
                pass
            finally:
                writer.close()

        server = await asyncio.start_server(wrapped, "127.0.0.1", 0)
        servers.append(server)
        return f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"

    try:
        yield _start
    finally:
        for task in list(tasks):
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for server in servers:
            server.close()
            await server.wait_closed()


def _chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def _no_tracebacks(entries: LogEntries) -> None:
    for entry in entries:
        assert "exc_info" not in entry, entry
        assert "Traceback" not in repr(entry), entry


@pytest.mark.asyncio
async def test_upstream_down_gives_502_json(
    start: StartProxy, session: aiohttp.ClientSession, logs: LogEntries
) -> None:
    """A refused connection gives 502 with a JSON error naming the cause, one log line."""
    url = await start(f"http://127.0.0.1:{dead_port()}")
    async with session.post(f"{url}/v1/chat/completions", json={"stream": True}) as resp:
        assert resp.status == 502
        assert resp.content_type == "application/json"
        body = json.loads(await resp.read())
        sid = resp.headers[STREAM_ID]
    error = body["error"]
    assert error["type"] == "upstream_unreachable"
    assert error["stream_id"] == sid
    assert error["message"]
    (line,) = named(logs, "upstream.error")
    assert line["stream_id"] == sid
    assert line["kind"] == "upstream_unreachable"
    assert line["log_level"] == "warning"
    assert line["status"] == 502
    _no_tracebacks(logs)
    assert not named(logs, "stream.summary")


@pytest.mark.asyncio
async def test_upstream_silent_before_headers_gives_504(
    raw_upstream: Callable[[Handler], Coroutine[Any, Any, str]],
    start: StartProxy,
    session: aiohttp.ClientSession,
    logs: LogEntries,
) -> None:
    """An upstream that accepts but never answers gives 504 after the idle timeout."""

    async def hang(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await asyncio.Event().wait()  # never answers (cancelled when the upstream stops)

    url = await start(await raw_upstream(hang), idle_timeout=0.4)
    began = time.monotonic()
    async with session.get(f"{url}/v1/text") as resp:
        body = json.loads(await resp.read())
        assert resp.status == 504
    assert_fired_on_time(time.monotonic() - began, 0.4, "idle timeout before headers")
    assert body["error"]["type"] == "upstream_timeout"
    (line,) = named(logs, "upstream.error")
    assert line["kind"] == "upstream_timeout"
    _no_tracebacks(logs)


@pytest.mark.asyncio
async def test_connect_timeout_gives_504(
    start: StartProxy, session: aiohttp.ClientSession, logs: LogEntries
) -> None:
    """A listener whose accept queue is full never completes the handshake: 504 on time."""
    listener = socket.socket()
    fillers: list[socket.socket] = []
    try:
        listener.bind(("127.0.0.1", 0))
        listener.listen(0)
        port = listener.getsockname()[1]
        # Fill the accept queue so that the kernel drops further SYNs: the first connection
        # completes (the queue of a backlog of 0 holds one), the next ones are never accepted.
        loop = asyncio.get_running_loop()
        for i in range(4):
            filler = socket.socket()
            filler.setblocking(False)
            fillers.append(filler)
            if i == 0:
                async with asyncio.timeout(10):
                    await loop.sock_connect(filler, ("127.0.0.1", port))
            else:
                with contextlib.suppress(BlockingIOError):
                    filler.connect(("127.0.0.1", port))
        url = await start(f"http://127.0.0.1:{port}", connect_timeout=0.5, idle_timeout=30)
        began = time.monotonic()
        async with session.get(f"{url}/v1/text") as resp:
            body = json.loads(await resp.read())
            status = resp.status
        elapsed = time.monotonic() - began
    finally:
        for filler in fillers:
            filler.close()
        listener.close()
    assert status == 504, body
    assert body["error"]["type"] == "upstream_timeout"
    assert_fired_on_time(elapsed, 0.5, "connect timeout")
    _no_tracebacks(logs)


@pytest.mark.asyncio
async def test_garbage_from_upstream_gives_502(
    raw_upstream: Callable[[Handler], Coroutine[Any, Any, str]],
    start: StartProxy,
    session: aiohttp.ClientSession,
    logs: LogEntries,
) -> None:
    """An upstream that answers with something other than HTTP gives 502 upstream_failed."""

    async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"SSH-2.0-OpenSSH_9.6\r\n\r\n")
        await writer.drain()

    url = await start(await raw_upstream(garbage))
    async with session.get(f"{url}/x") as resp:
        body = json.loads(await resp.read())
        assert resp.status == 502
    assert body["error"]["type"] == "upstream_failed"
    _no_tracebacks(logs)


async def _read_until_error(resp: aiohttp.ClientResponse) -> tuple[bytes, BaseException | None]:
    got = bytearray()
    try:
        async for chunk in resp.content.iter_any():
            got += chunk
    except aiohttp.ClientPayloadError as exc:
        return bytes(got), exc
    return bytes(got), None


@pytest.mark.asyncio
async def test_upstream_closing_mid_stream_cuts_the_client_off(
    proxy_url: str, session: aiohttp.ClientSession, logs: LogEntries
) -> None:
    """Upstream dying mid-stream gives sse.truncated and a client error, never a clean end."""
    data = fixtures.clean_stream("openai")
    async with session.post(f"{proxy_url}/sse/raw?close_early=1&chunk=500", data=data) as resp:
        assert resp.status == 200
        got, error = await _read_until_error(resp)
        sid = resp.headers[STREAM_ID]
    assert isinstance(error, aiohttp.ClientPayloadError)
    assert got == data[: len(got)]
    assert 0 < len(got) <= len(data) // 2
    line = await wait_for(logs, "stream.summary", sid)
    assert line["ended_by"] == "upstream_error"
    (truncated,) = named(logs, "sse.truncated", sid)
    assert truncated["reason"] == "upstream_closed"
    assert truncated["log_level"] == "warning"
    _no_tracebacks(logs)


@pytest.mark.asyncio
async def test_upstream_reset_mid_stream_cuts_the_client_off(
    raw_upstream: Callable[[Handler], Coroutine[Any, Any, str]],
    start: StartProxy,
    session: aiohttp.ClientSession,
    logs: LogEntries,
) -> None:
    """A TCP reset after the first frame gives sse.truncated and a client payload error."""
    first_seen = asyncio.Event()

    async def reset(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(SSE_HEAD + _chunk(b'data: {"choices":[{"delta":{"content":"Hi"}}]}\n\n'))
        await writer.drain()
        await first_seen.wait()  # the client has the frame: the reset comes after it
        sock = writer.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        writer.transport.abort()

    url = await start(await raw_upstream(reset))
    async with session.post(f"{url}/v1/chat/completions", json={"stream": True}) as resp:
        async with asyncio.timeout(10):
            first = await resp.content.readuntil(b"\n\n")
        first_seen.set()
        rest, error = await _read_until_error(resp)
        sid = resp.headers[STREAM_ID]
    got = first + rest
    assert got.startswith(b"data: ")
    assert isinstance(error, aiohttp.ClientPayloadError)
    line = await wait_for(logs, "stream.summary", sid)
    assert line["ended_by"] == "upstream_error"
    assert [e["reason"] for e in named(logs, "sse.truncated", sid)] == ["upstream_closed"]
    _no_tracebacks(logs)


@pytest.mark.asyncio
async def test_non_sse_body_cut_short_is_not_completed(
    raw_upstream: Callable[[Handler], Coroutine[Any, Any, str]],
    start: StartProxy,
    session: aiohttp.ClientSession,
    logs: LogEntries,
) -> None:
    """A plain body shorter than its Content-Length ends the client's response in error."""

    async def short(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        await reader.readuntil(b"\r\n\r\n")
        writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 1000\r\n\r\n" + b"x" * 300)
        await writer.drain()

    url = await start(await raw_upstream(short))
    async with session.get(f"{url}/file") as resp:
        got, error = await _read_until_error(resp)
    assert isinstance(error, aiohttp.ClientPayloadError)
    assert got == b"x" * len(got)
    line = await wait_for(logs, "proxy.request")
    assert line["ended_by"] == "upstream_error"


@pytest.mark.asyncio
async def test_idle_timeout_mid_stream(
    start_app: StartApp, start: StartProxy, session: aiohttp.ClientSession, logs: LogEntries
) -> None:
    """A gap longer than idle_timeout ends the stream: ended_by timeout, client cut off."""

    async def stall(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"data: one\n\n")
        await asyncio.Event().wait()  # then nothing (cancelled when the upstream stops)
        return resp

    app = web.Application()
    app.router.add_get("/v1/text", stall)
    url = await start(await start_app(app), idle_timeout=0.4)
    began = time.monotonic()
    async with session.get(f"{url}/v1/text") as resp:
        got, error = await _read_until_error(resp)
        sid = resp.headers[STREAM_ID]
    assert_fired_on_time(time.monotonic() - began, 0.4, "idle timeout mid-stream")
    assert got == b"data: one\n\n"
    assert isinstance(error, aiohttp.ClientPayloadError)
    line = await wait_for(logs, "stream.summary", sid)
    assert line["ended_by"] == "timeout"
    assert line["events"] == 1
    assert named(logs, "sse.truncated", sid)


@pytest.mark.asyncio
async def test_total_timeout(
    start_app: StartApp, start: StartProxy, session: aiohttp.ClientSession, logs: LogEntries
) -> None:
    """A stream that keeps trickling past total_timeout is ended: ended_by timeout."""

    async def trickle(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i in range(100):
            await resp.write(b"data: %d\n\n" % i)
            await asyncio.sleep(0.05)
        return resp

    app = web.Application()
    app.router.add_get("/v1/text", trickle)
    url = await start(await start_app(app), total_timeout=0.5, idle_timeout=5)
    async with session.get(f"{url}/v1/text") as resp:
        got, error = await _read_until_error(resp)
        sid = resp.headers[STREAM_ID]
    assert isinstance(error, aiohttp.ClientPayloadError)
    assert got.startswith(b"data: 0\n\n")
    line = await wait_for(logs, "stream.summary", sid)
    assert line["ended_by"] == "timeout"
    assert_fired_on_time(line["duration_ms"] / 1000, 0.5, "total timeout")


@pytest.mark.asyncio
async def test_client_disconnect_cancels_upstream(
    start_app: StartApp, start: StartProxy, logs: LogEntries
) -> None:
    """A client that hangs up after the first chunk gets the upstream request closed at once."""
    upstream_gone = asyncio.Event()
    written: list[int] = []

    async def slow(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        try:
            for i in range(1000):  # 50 s: only a closed connection ends it in the test's time
                await resp.write(b"data: tick %d\n\n" % i)
                written.append(i)
                await asyncio.sleep(0.05)
        except (ConnectionError, asyncio.CancelledError):
            upstream_gone.set()
            raise
        return resp

    app = web.Application()
    app.router.add_get("/v1/text", slow)
    url = await start(await start_app(app))
    async with aiohttp.ClientSession() as client:
        resp = await client.get(f"{url}/v1/text")
        first = await resp.content.readany()
        sid = resp.headers[STREAM_ID]
        resp.close()  # drop the connection mid-stream
    assert first.startswith(b"data: tick 0")
    async with asyncio.timeout(10):  # a hang guard: the upstream would write for 50 s
        await upstream_gone.wait()
    assert len(written) < 1000
    line = await wait_for(logs, "stream.summary", sid)
    assert line["ended_by"] == "client_disconnect"


@pytest.mark.asyncio
async def test_slow_client_slows_the_upstream(
    start_app: StartApp, start: StartProxy, logs: LogEntries, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A client that stops reading stalls the upstream (bounded buffers), not the proxy's RAM:
    the upstream's own connection is paused for writing (its socket buffers full, since the
    proxy stopped reading it) before it has written 48 MiB; a proxy that kept reading would
    never pause it and the upstream would finish."""
    frame = b"data: " + b"z" * (64 * 1024 - 8) + b"\n\n"
    total_frames = 2048  # 128 MiB if nothing pushed back
    sent = [0]
    done = asyncio.Event()
    upstream = await start_app(firehose_app(frame, total_frames, sent, done=done))
    upstream_port = int(upstream.rsplit(":", 1)[1])
    stalled = asyncio.Event()
    at_stall: list[int] = []
    pause_writing = BaseProtocol.pause_writing

    def pausing(self: BaseProtocol) -> None:
        pause_writing(self)
        sockname = self.transport.get_extra_info("sockname") if self.transport else None
        if sockname and sockname[1] == upstream_port and not stalled.is_set():
            at_stall.append(sent[0])
            stalled.set()

    monkeypatch.setattr(BaseProtocol, "pause_writing", pausing)
    url = await start(upstream)
    async with aiohttp.ClientSession() as client:
        resp = await client.get(f"{url}/v1/text")
        await resp.content.readany()  # then nothing more: the buffers on the way fill up
        waits = [asyncio.ensure_future(stalled.wait()), asyncio.ensure_future(done.wait())]
        try:
            async with asyncio.timeout(30):
                await asyncio.wait(waits, return_when=asyncio.FIRST_COMPLETED)
        finally:
            for waiting in waits:
                waiting.cancel()
        resp.close()
    assert not done.is_set(), "the upstream wrote everything: nothing pushed back"
    assert stalled.is_set()
    assert at_stall[0] < 48 * 1024 * 1024, at_stall
    await wait_for(logs, "stream.summary")


@pytest.mark.asyncio
async def test_shutdown_ends_open_streams(mock_url: str, logs: LogEntries) -> None:
    """Stopping the proxy lets a stream run for the grace period, then ends it: shutdown."""
    runner, url = await start_proxy(Config(upstream=mock_url, port=0, shutdown_grace=0.3))
    data = b"".join(b"data: %d\n\n" % i for i in range(40))
    try:
        async with aiohttp.ClientSession() as client:
            resp = await client.post(f"{url}/sse/raw?chunk=9&delay=0.1", data=data)
            sid = resp.headers[STREAM_ID]
            await resp.content.readany()
            stopping = asyncio.create_task(stop_proxy(runner))
            got, error = await _read_until_error(resp)
            resp.release()
            await stopping
    finally:
        await stop_proxy(runner)
    assert error is not None
    assert len(got) < len(data)
    line = summary(logs, sid)
    assert line["ended_by"] == "shutdown"


@pytest.mark.asyncio
async def test_client_leaving_mid_stream_is_no_truncation_alarm(
    start: StartProxy, logs: LogEntries
) -> None:
    """A user pressing stop is not an upstream fault: no sse.truncated, no unterminated frame."""
    from sse_proxy.tools.mock_upstream import start_mock_upstream

    runner, upstream = await start_mock_upstream(port=0, chunk_delay=0.01)
    try:
        url = await start(upstream)
        async with aiohttp.ClientSession() as client:
            resp = await client.post(f"{url}/v1/chat/completions", json={"stream": True})
            await resp.content.readany()
            sid = resp.headers[STREAM_ID]
            resp.close()  # mid-stream, mid-frame most likely
        line = await wait_for(logs, "stream.summary", sid)
        assert line["ended_by"] == "client_disconnect"
        alerts = [e["event"] for e in logs if e.get("stream_id") == sid]
        assert "sse.truncated" not in alerts
        assert "sse.unterminated_frame" not in alerts
    finally:
        await runner.cleanup()
