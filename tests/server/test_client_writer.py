"""The client's side of a stream, read off a raw socket: chunked framing byte for byte, the
HTTP/1.0 fallback, and backpressure at one small event per read (the direct-write path)."""

from __future__ import annotations

import asyncio

import aiohttp
import pytest
from aiohttp import web

from tests.support.logs import LogEntries, wait_for
from tests.support.net import raw_exchange
from tests.support.stack import StartApp, StartProxy
from tests.support.upstreams import firehose_app

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


def _post(version: str) -> bytes:
    body = b'{"model":"m","stream":true}'
    return (
        f"POST /v1/chat/completions HTTP/{version}\r\nHost: 127.0.0.1\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n".encode()
        + body
    )


@pytest.mark.asyncio
@pytest.mark.parametrize("pause_every", [7, 400], ids=["small-reads", "large-reads"])
async def test_many_small_events_arrive_exact_in_strict_chunked_framing(
    start_app: StartApp, start: StartProxy, logs: LogEntries, pause_every: int
) -> None:
    """Past several drain points (64 KiB each) of one-event writes, every byte is there and
    the body ends with the terminating chunk: a real end, not a cut. Small reads are framed
    in one copy, large ones (30 KiB between the upstream's pauses) by parts."""
    frames = _events(3000)  # ~230 KiB
    url = await start(await start_app(_sse_app(frames, pause_every=pause_every)))
    raw = await raw_exchange(url, _post("1.1"), limit_s=60)  # strict chunk parsing
    assert raw.status == 200
    assert raw.header("Transfer-Encoding") == "chunked"
    assert raw.complete  # the terminating chunk came
    assert raw.body == b"".join(frames)
    if pause_every == 7:
        assert len(raw.chunks) > 100  # relayed read by read, not buffered whole
    else:
        assert max(map(len, raw.chunks)) > 2048  # the framing by parts was taken
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
    raw = await raw_exchange(url, _post("1.0"), limit_s=60)
    assert raw.status == 200
    assert raw.header("Transfer-Encoding") is None
    assert raw.body == b"".join(frames)
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
    app = firehose_app(frame, 400_000, sent, yield_each=True)  # 117 MB if nothing pushed back
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
