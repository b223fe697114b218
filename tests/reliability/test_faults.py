"""Faults: client disconnects, upstreams that die, stall, never answer or are not there.

Each upstream is a scripted raw TCP server (see ``conftest.RawUpstream``) that notes,
server-side, when the proxy closed its connection; every test runs under a hard timeout
so that a hang fails the test instead of stalling the suite.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import time

import aiohttp
import pytest

from sse_proxy.rechunk.timefaults import TEXT_BEFORE
from sse_proxy.server.keys import STATE
from tests.support.logs import eventually, named, wait_for
from tests.support.net import STREAM_ID, dead_port
from tests.support.timing import assert_fired_on_time
from tests.support.upstreams import Behaviour, UpstreamConn, event

pytestmark = pytest.mark.asyncio

PATH = "/v1/chat/completions"
HARD_TIMEOUT = 10.0


async def _silent(conn: UpstreamConn) -> None:
    """Read the request, never answer."""
    await conn.until_closed()


async def _head_then_silent(conn: UpstreamConn) -> None:
    """Send the response headers, then nothing (a slow first body byte, or a stall)."""
    await conn.send_head()
    await conn.until_closed()


async def _forever_slowly(conn: UpstreamConn, interval: float = 0.05) -> None:
    """Headers, then one event every ``interval`` seconds until the proxy hangs up."""
    await conn.send_head()
    watcher = asyncio.create_task(conn.until_closed())
    try:
        i = 0
        while not conn.closed.is_set():
            await conn.send_event(i)
            i += 1
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(interval):
                    await conn.closed.wait()
    finally:
        with contextlib.suppress(ConnectionError):
            await watcher


async def _raw_get(url: str, path: str = PATH) -> tuple[asyncio.StreamReader, asyncio.StreamWriter]:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAccept: text/event-stream\r\n\r\n".encode()
    )
    await writer.drain()
    return reader, writer


async def _read_until(reader: asyncio.StreamReader, marker: bytes) -> bytes:
    seen = b""
    while marker not in seen:
        more = await reader.read(4096)
        assert more, f"connection closed before {marker!r}; got {seen!r}"
        seen += more
    return seen


@pytest.mark.parametrize("phase", ["before_headers", "before_first_byte", "after_first_byte"])
async def test_client_disconnect_closes_upstream(phase, raw_upstream, start, logs):
    """A client that hangs up makes the proxy close its upstream connection at once: well
    before the 30 s idle timeout could (the hard timeout guards the wait)."""
    behaviour = {
        "before_headers": _silent,
        "before_first_byte": _head_then_silent,
        "after_first_byte": _forever_slowly,
    }[phase]
    upstream = await raw_upstream(behaviour)
    url = await start(upstream.url, idle_timeout=30.0)
    runner = start.runner_for(url)
    async with asyncio.timeout(HARD_TIMEOUT):
        reader, writer = await _raw_get(url)
        if phase == "before_headers":
            await upstream.accepted.wait()  # the request is upstream; the proxy waits
            head = b""
        else:
            head = await _read_until(reader, b"\r\n\r\n")
            if phase == "after_first_byte":
                head += await _read_until(reader, b"data:")
        writer.close()
        await upstream.conn.closed.wait()
        if phase != "before_headers":
            stream_id = next(
                line.split(b":", 1)[1].strip().decode()
                for line in head.split(b"\r\n")
                if line.lower().startswith(STREAM_ID.lower().encode())
            )
            summary = await wait_for(logs, "stream.summary", stream_id)
            assert summary["ended_by"] == "client_disconnect"
            assert (summary["ttfb_ms"] is None) == (phase == "before_first_byte")
        assert await eventually(lambda: not runner.app[STATE].active)


def _dies_mid_stream(how: str, delivered: asyncio.Event) -> Behaviour:
    """Two events, then (once the client has both) a FIN without the chunked body's last
    chunk, or a TCP RST."""

    async def behaviour(conn: UpstreamConn) -> None:
        await conn.send_head()
        await conn.send_event(0)
        await conn.send_event(1)
        await delivered.wait()
        if how == "clean_close":
            conn.mark_closed("upstream_closed")
            conn.writer.close()
        else:
            conn.mark_closed("upstream_reset")
            conn.reset()

    return behaviour


async def _collect(
    resp: aiohttp.ClientResponse, into: list[bytes], delivered: asyncio.Event
) -> None:
    async for piece in resp.content.iter_any():
        into.append(piece)
        if b"".join(into).count(b"data:") == 2:
            delivered.set()


@pytest.mark.parametrize("how", ["clean_close", "tcp_reset"])
async def test_upstream_dies_mid_stream(how, raw_upstream, start, logs):
    """An upstream that dies mid-stream ends the client's stream with an error (not at the
    30 s idle timeout: the hard timeout guards the wait)."""
    delivered = asyncio.Event()
    upstream = await raw_upstream(_dies_mid_stream(how, delivered))
    url = await start(upstream.url, idle_timeout=30.0)
    runner = start.runner_for(url)
    received: list[bytes] = []
    async with asyncio.timeout(HARD_TIMEOUT), aiohttp.ClientSession() as client:
        async with client.get(url + PATH) as resp:
            assert resp.status == 200
            stream_id = resp.headers[STREAM_ID]
            with pytest.raises(aiohttp.ClientPayloadError):
                await _collect(resp, received, delivered)
        assert upstream.conn.closed_at is not None
        assert b"".join(received).count(b"data:") == 2
        summary = await wait_for(logs, "stream.summary", stream_id)
    assert summary["ended_by"] == "upstream_error"
    assert summary["events"] == 2
    assert named(logs, "sse.truncated", stream_id), "no sse.truncated alert"
    [error] = named(logs, "upstream.error", stream_id)
    assert error["kind"] == "stream_read_failed"
    assert not runner.app[STATE].active


async def _collect_until(
    resp: aiohttp.ClientResponse, into: list[bytes], frames: int, reached: asyncio.Event
) -> None:
    async for piece in resp.content.iter_any():
        into.append(piece)
        if b"".join(into).count(b"\n\n") >= frames:
            reached.set()


async def test_events_just_before_an_upstream_reset_reach_the_client(raw_upstream, start, logs):
    """The upstream sends its last events and resets right behind them while the relay is
    away (holding a chaos stall): they sit in the proxy's reader with the reset's error, and
    reach the client before it is cut off, not dropped with the error."""
    stalled = asyncio.Event()
    total = TEXT_BEFORE + 6

    async def behaviour(conn: UpstreamConn) -> None:
        await conn.send_head()
        for i in range(TEXT_BEFORE + 2):
            await conn.send_event(i)
        await stalled.wait()  # the relay holds the next frame now, for a second
        for i in range(TEXT_BEFORE + 2, total):
            await conn.send_event(i)
        conn.mark_closed("upstream_reset")
        conn.reset()

    upstream = await raw_upstream(behaviour)
    url = await start(
        upstream.url, mode="chaos", chaos="boundaries", chaos_fault="stall_silent", chaos_stall=1.0
    )
    received: list[bytes] = []
    async with asyncio.timeout(HARD_TIMEOUT), aiohttp.ClientSession() as client:
        async with client.get(url + PATH) as resp:
            stream_id = resp.headers[STREAM_ID]
            with pytest.raises(aiohttp.ClientPayloadError):
                await _collect_until(resp, received, TEXT_BEFORE, stalled)
        assert upstream.conn.closed_at is not None
        summary = await wait_for(logs, "stream.summary", stream_id)
    assert b"".join(received) == b"".join(event(i) for i in range(total))
    assert summary["ended_by"] == "upstream_error"
    assert summary["events"] == total


async def test_upstream_stalls_after_headers(raw_upstream, start, logs):
    """An upstream silent after its headers is cut off at idle_timeout, ended_by=timeout."""
    upstream = await raw_upstream(_head_then_silent)
    url = await start(upstream.url, idle_timeout=0.5)
    async with asyncio.timeout(HARD_TIMEOUT), aiohttp.ClientSession() as client:
        started = time.monotonic()
        async with client.get(url + PATH) as resp:
            assert resp.status == 200
            stream_id = resp.headers[STREAM_ID]
            with pytest.raises(aiohttp.ClientPayloadError):
                await resp.read()
        assert_fired_on_time(time.monotonic() - started, 0.5, "idle timeout after headers")
        summary = await wait_for(logs, "stream.summary", stream_id)
        await upstream.conn.closed.wait()  # and the stalled upstream is let go
    assert summary["ended_by"] == "timeout"
    assert summary["ttfb_ms"] is None
    assert named(logs, "sse.truncated", stream_id)


async def _slow_head_then_slow_events(conn: UpstreamConn) -> None:
    """The head late (but within the idle timeout), then three events as late, then the end."""
    for i in range(4):
        await asyncio.sleep(_SLOW)
        if i == 0:
            await conn.send_head()
        else:
            await conn.send_event(i)
    await conn.send(b"0\r\n\r\n")
    await conn.until_closed()


_IDLE = 1.5
_SLOW = 0.8  # each wait under the idle timeout; head and body together well past it


async def test_a_slow_head_then_slow_reads_are_never_cut(raw_upstream, start, logs):
    """The wait for the head and the reads after it have one idle deadline between them,
    moving with each: a head late by most of it, then reads as late, is never a timeout."""
    upstream = await raw_upstream(_slow_head_then_slow_events)
    url = await start(upstream.url, idle_timeout=_IDLE)
    async with asyncio.timeout(HARD_TIMEOUT), aiohttp.ClientSession() as client:
        async with client.get(url + PATH) as resp:
            assert resp.status == 200
            stream_id = resp.headers[STREAM_ID]
            body = await resp.read()
        summary = await wait_for(logs, "stream.summary", stream_id)
    assert body.count(b"data:") == 3
    assert summary["ended_by"] == "upstream_eof"
    assert summary["events"] == 3


async def test_total_timeout_cuts_an_endless_stream(raw_upstream, start, logs):
    """A stream that never ends is closed at total_timeout with ended_by=timeout."""
    upstream = await raw_upstream(_forever_slowly)
    url = await start(upstream.url, idle_timeout=30.0, total_timeout=1.0)
    async with asyncio.timeout(HARD_TIMEOUT), aiohttp.ClientSession() as client:
        started = time.monotonic()
        async with client.get(url + PATH) as resp:
            stream_id = resp.headers[STREAM_ID]
            with pytest.raises(aiohttp.ClientPayloadError):
                await resp.read()
        assert_fired_on_time(time.monotonic() - started, 1.0, "total timeout")
        summary = await wait_for(logs, "stream.summary", stream_id)
        await upstream.conn.closed.wait()
    assert summary["ended_by"] == "timeout"
    assert summary["events"] > 5


@pytest.mark.parametrize("where", ["reads_request_never_answers", "never_accepts"])
async def test_upstream_never_answers_is_504(where, raw_upstream, start, logs):
    """An upstream that takes the connection but never sends headers gives a prompt 504."""
    listener: socket.socket | None = None
    if where == "never_accepts":
        # The kernel completes the handshake from the backlog; nobody ever reads.
        listener = socket.socket()
        listener.bind(("127.0.0.1", 0))
        listener.listen(8)
        upstream_url = f"http://127.0.0.1:{listener.getsockname()[1]}"
    else:
        upstream = await raw_upstream(_silent)
        upstream_url = upstream.url
    try:
        url = await start(upstream_url, idle_timeout=0.5, connect_timeout=0.5)
        async with asyncio.timeout(HARD_TIMEOUT), aiohttp.ClientSession() as client:
            started = time.monotonic()
            async with client.get(url + PATH) as resp:
                body = await resp.json()
            assert_fired_on_time(time.monotonic() - started, 0.5, "504 on an upstream timeout")
            assert resp.status == 504
            assert body["error"]["type"] == "upstream_timeout"
            if where == "reads_request_never_answers":
                await upstream.conn.closed.wait()  # the proxy let the connection go
        [error] = named(logs, "upstream.error", resp.headers[STREAM_ID])
        assert error["kind"] == "upstream_timeout"
    finally:
        if listener is not None:
            listener.close()


async def test_upstream_port_closed_is_502(start, logs):
    """An upstream port with nothing listening gives a 502 at once: a refused connection,
    not a 504 after the connect timeout."""
    url = await start(f"http://127.0.0.1:{dead_port()}", connect_timeout=2.0)
    async with (
        asyncio.timeout(HARD_TIMEOUT),
        aiohttp.ClientSession() as client,
        client.get(url + PATH) as resp,
    ):
        body = await resp.json()
    assert resp.status == 502
    assert body["error"]["type"] == "upstream_unreachable"
    [error] = named(logs, "upstream.error", resp.headers[STREAM_ID])
    assert error["kind"] == "upstream_unreachable"
