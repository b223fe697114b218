"""The client's side of a stream, read off a raw socket: chunked framing byte for byte, the
HTTP/1.0 fallback, and backpressure at one small event per read (the direct-write path)."""

from __future__ import annotations

import asyncio
import contextlib

import aiohttp
import pytest
from aiohttp import web

from tests.server.conftest import LogEntries, StartApp, StartProxy, wait_for

EVENT = b'data: {"choices":[{"index":0,"delta":{"content":" tok\xc3\xa9n %d"}}]}\n\n'


def _events(n: int) -> list[bytes]:
    return [EVENT % i for i in range(n)] + [b"data: [DONE]\n\n"]


def _sse_app(frames: list[bytes], pause_every: int = 0) -> web.Application:
    async def stream(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for i, frame in enumerate(frames):
            await resp.write(frame)  # one write per event: the proxy reads them one by one
            if pause_every and i % pause_every == 0:
                await asyncio.sleep(0)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", stream)
    return app


async def _raw_request(url: str, version: str) -> tuple[bytes, bytes]:
    """POST over a raw socket; (head, body as sent on the wire) once the server is done."""
    host, port = url.removeprefix("http://").split(":")
    reader, writer = await asyncio.open_connection(host, int(port))
    body = b'{"model":"m","stream":true}'
    writer.write(
        f"POST /v1/chat/completions HTTP/{version}\r\nHost: {host}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n".encode()
        + body
    )
    await writer.drain()
    async with asyncio.timeout(60):
        raw = await reader.read(-1)
    writer.close()
    with contextlib.suppress(ConnectionError):
        await writer.wait_closed()
    head, _, rest = raw.partition(b"\r\n\r\n")
    return head, rest


def _dechunk(wire: bytes) -> tuple[bytes, int]:
    """Strict HTTP/1.1 chunked decoding; (body, chunks). Raises on any framing error."""
    body = bytearray()
    pos = chunks = 0
    while True:
        eol = wire.index(b"\r\n", pos)
        size = int(wire[pos:eol], 16)
        start = eol + 2
        if size == 0:
            assert wire[start:] == b"\r\n", wire[start - 8 :]
            return bytes(body), chunks
        assert wire[start + size : start + size + 2] == b"\r\n", (pos, size)
        body += wire[start : start + size]
        chunks += 1
        pos = start + size + 2


@pytest.mark.asyncio
async def test_many_small_events_arrive_exact_in_strict_chunked_framing(
    start_app: StartApp, start: StartProxy, logs: LogEntries
) -> None:
    """Past several drain points (64 KiB each) of one-event writes, every byte is there and
    the body ends with the terminating chunk: a real end, not a cut."""
    frames = _events(3000)  # ~230 KiB
    url = await start(await start_app(_sse_app(frames, pause_every=7)))
    head, wire = await _raw_request(url, "1.1")
    assert head.startswith(b"HTTP/1.1 200")
    assert b"transfer-encoding: chunked" in head.lower()
    body, chunks = _dechunk(wire)
    assert body == b"".join(frames)
    assert chunks > 100  # relayed read by read, not buffered whole
    summary = await wait_for(logs, "stream.summary")
    assert summary["ended_by"] == "upstream_eof"
    assert summary["verdict"] == "ok"
    assert summary["events"] == len(frames)


@pytest.mark.asyncio
async def test_an_http10_client_gets_the_body_unframed(
    start_app: StartApp, start: StartProxy, logs: LogEntries
) -> None:
    """HTTP/1.0 has no chunked encoding: aiohttp writes those bytes as they are, and the
    end of the body is the end of the connection."""
    frames = _events(500)
    url = await start(await start_app(_sse_app(frames, pause_every=3)))
    head, body = await _raw_request(url, "1.0")
    assert head.startswith(b"HTTP/1.")
    assert b"transfer-encoding" not in head.lower()
    assert body == b"".join(frames)
    summary = await wait_for(logs, "stream.summary")
    assert summary["verdict"] == "ok"


@pytest.mark.asyncio
async def test_a_client_that_stops_reading_small_events_stalls_the_upstream(
    start_app: StartApp, start: StartProxy, logs: LogEntries
) -> None:
    """Token-sized writes honour backpressure too: the proxy does not buffer what the
    client does not read (the upstream is held back instead)."""
    frame = b"data: " + b"y" * 290 + b"\n\n"
    sent = [0]
    stalled = asyncio.Event()

    async def firehose(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        with contextlib.suppress(ConnectionError):
            for _ in range(400_000):  # 117 MB if nothing pushed back
                await resp.write(frame)
                sent[0] += len(frame)
                await asyncio.sleep(0)
        return resp

    app = web.Application()
    app.router.add_get("/v1/text", firehose)
    url = await start(await start_app(app))
    async with aiohttp.ClientSession() as client:
        resp = await client.get(f"{url}/v1/text")
        await resp.content.readany()
        # read nothing more; wait until the upstream stops making progress
        last = -1
        async with asyncio.timeout(60):
            while sent[0] != last:
                last = sent[0]
                await asyncio.sleep(0.5)
            stalled.set()
        resp.close()
    assert stalled.is_set()
    assert sent[0] < 48 * 1024 * 1024, sent[0]  # bounded by socket buffers, not the stream
    await wait_for(logs, "stream.summary")
