"""Request heads at the front: bounded in memory as they arrive, with a deadline, and idle
connections closed, against a real `sse-proxy serve` process whose memory (RSS) is read
from /proc while hostile clients hold their connections.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from pathlib import Path

import pytest

from tests.support.cli import ServeProcess
from tests.support.net import free_port, raw_exchange, running_app
from tests.support.upstreams import Seen, recording_app

_HEAD_START = b"GET /v1/models HTTP/1.1\r\nHost: 127.0.0.1\r\n"


def _rss_mib(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


async def _oversized_head(port: int, lines: int, sending: list[int], done: asyncio.Event) -> str:
    """Send a head of ``lines`` header lines of 60 KB each (each under aiohttp's line
    limit, all together megabytes), never ending it; how the proxy answered."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    line = b"X-Pad: " + b"p" * 60_000 + b"\r\n"
    try:
        writer.write(_HEAD_START)
        try:
            for _ in range(lines):
                writer.write(line)
                await writer.drain()
        finally:
            sending[0] -= 1
        await done.wait()  # hold the connection (if the proxy still has it) while RSS is read
        answer = await asyncio.wait_for(reader.read(200), 10)
        return answer.split(b"\r\n", 1)[0].decode("latin-1") or "closed"
    except (ConnectionError, asyncio.IncompleteReadError):
        return "closed"
    except TimeoutError:
        return "no answer"
    finally:
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()


@pytest.mark.asyncio
async def test_a_flood_of_oversized_heads_holds_no_memory() -> None:
    """24 connections each sending 7 MB of header lines: each is refused (431, closed) once
    its head passes 64 KiB, so the proxy's RSS stays flat (+0.4 MiB measured); unbounded, the
    heads held +331 MiB (aiohttp parsed them whole before any check)."""
    seen: list[Seen] = []
    async with running_app(recording_app(seen)) as upstream:
        port = free_port()
        with ServeProcess("--upstream", upstream, "--port", str(port)) as serve:
            await asyncio.to_thread(serve.wait_for, "proxy.started")
            assert serve.proc is not None
            before = _rss_mib(serve.proc.pid)
            done = asyncio.Event()
            sending = [24]
            tasks = [
                asyncio.create_task(_oversized_head(port, 120, sending, done)) for _ in range(24)
            ]
            peak = before
            deadline = time.monotonic() + 60
            while sending[0] and time.monotonic() < deadline:
                peak = max(peak, _rss_mib(serve.proc.pid))
                await asyncio.sleep(0.05)
            for _ in range(10):  # a little longer, with every connection still held
                peak = max(peak, _rss_mib(serve.proc.pid))
                await asyncio.sleep(0.05)
            done.set()
            answers = await asyncio.gather(*tasks)
            # the proxy still serves a real request afterwards
            ok = await raw_exchange(port, _HEAD_START + b"Connection: close\r\n\r\n")
            text = serve.stop()
    grew = peak - before
    print(f"RSS {before:.1f} MiB before, {peak:.1f} MiB at peak: +{grew:.1f} MiB")
    assert grew < 64, f"the heads held {grew:.1f} MiB"
    assert ok.status == 200
    assert all(a == "closed" or " 431 " in a for a in answers), answers
    assert text.count('"kind":"request_headers_too_large"') >= 1
    assert len(seen) == 1  # only the real request reached the upstream


@pytest.mark.asyncio
async def test_a_slowloris_head_is_cut_at_the_deadline_and_idle_connections_close() -> None:
    """A head sent a byte at a time gets 408 and is closed at --request-head-timeout (it
    would stay open for an hour); a connection silent after a request is closed at
    --keepalive-timeout; a client that sends its request at once is unaffected."""
    seen: list[Seen] = []
    async with running_app(recording_app(seen)) as upstream:
        port = free_port()
        with ServeProcess(
            "--upstream",
            upstream,
            "--port",
            str(port),
            "--request-head-timeout",
            "1",
            "--keepalive-timeout",
            "1.5",
        ) as serve:
            await asyncio.to_thread(serve.wait_for, "proxy.started")
            normal = await raw_exchange(port, _HEAD_START + b"Connection: close\r\n\r\n")
            slow_answer, slow_after = await _slowloris(port)
            idle_after = await _idle(port, after_a_request=True)
            text = serve.stop()
    assert normal.status == 200
    assert slow_answer.startswith((b"HTTP/1.0 408", b"HTTP/1.1 408")), slow_answer[:100]
    assert b'"request_head_timeout"' in slow_answer
    assert 0.9 < slow_after < 10, slow_after
    assert 1.4 < idle_after < 10, idle_after
    assert '"kind":"request_head_timeout"' in text
    assert len(seen) == 2


@pytest.mark.asyncio
async def test_a_connection_that_sends_nothing_is_closed_at_the_head_deadline() -> None:
    """Nothing at all after the accept: closed at --request-head-timeout (nginx's
    client_header_timeout), without an answer, not held for the keep-alive timeout (75 s
    by default)."""
    port = free_port()
    with ServeProcess(
        "--upstream", "http://127.0.0.1:9", "--port", str(port), "--request-head-timeout", "1"
    ) as serve:
        await asyncio.to_thread(serve.wait_for, "proxy.started")
        silent_after = await _idle(port)  # (fails at 30 s: far from 75)
        ok = await raw_exchange(
            port, b"GET /_sse-proxy/health HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        )
        serve.stop()
    assert 0.9 < silent_after < 30, silent_after
    assert ok.status == 200  # a client that speaks at once is unaffected


async def _slowloris(port: int) -> tuple[bytes, float]:
    """One header byte every 0.1 s, never finishing; (what came back, when it closed)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    started = time.monotonic()
    writer.write(_HEAD_START + b"X-Slow: ")
    received = b""

    async def trickle() -> None:
        with contextlib.suppress(ConnectionError):
            while True:
                await asyncio.sleep(0.1)
                writer.write(b"s")
                await writer.drain()

    dripping = asyncio.create_task(trickle())
    try:
        async with asyncio.timeout(30):
            while chunk := await reader.read(4096):
                received += chunk
    except ConnectionError:
        pass
    finally:
        dripping.cancel()
        writer.close()
        with contextlib.suppress(Exception):
            await writer.wait_closed()
    return received, time.monotonic() - started


async def _idle(port: int, *, after_a_request: bool = False) -> float:
    """Seconds until the proxy closes a connection that sends nothing (after one whole
    request and its answer, with ``after_a_request``)."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    if after_a_request:
        writer.write(_HEAD_START + b"\r\n")
        head = await reader.readuntil(b"\r\n\r\n")
        length = next(
            int(line.split(b":", 1)[1])
            for line in head.split(b"\r\n")
            if line.lower().startswith(b"content-length:")
        )
        await reader.readexactly(length)
    started = time.monotonic()
    try:
        async with asyncio.timeout(30):
            assert await reader.read(100) == b""
    except ConnectionError:
        pass
    finally:
        writer.close()
    return time.monotonic() - started
