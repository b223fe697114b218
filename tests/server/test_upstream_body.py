"""The upstream body without aiohttp's per-chunk bookkeeping (``server/aiohttp_internals.py``),
against a real loopback upstream: the same bytes as aiohttp's own reader, small events or
large, its flow control (paused past the high-water mark, resumed once drained), its end,
and its errors."""

from __future__ import annotations

import asyncio
import random
import socket
import struct

import aiohttp
import pytest
from aiohttp import web
from aiohttp.streams import StreamReader

from sse_proxy.server.aiohttp_internals import LeanBody, lean_body
from tests.support.stack import StartApp

SEED = 23


def _pieces(seed: int, n: int) -> list[bytes]:
    rnd = random.Random(seed)
    return [b"data: %d %s\n\n" % (i, "é東🙂x".encode() * rnd.randrange(0, 40)) for i in range(n)]


def _upstream(pieces: list[bytes], *, hold: asyncio.Event | None = None) -> web.Application:
    async def stream(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in pieces:  # one HTTP chunk each
            await resp.write(piece)
        if hold is not None:
            await hold.wait()
        await resp.write_eof()
        return resp

    async def dies(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(pieces[0])
        assert request.transport is not None
        request.transport.abort()  # no last chunk: a broken body
        return resp

    async def resets(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        for piece in pieces:
            await resp.write(piece)
        assert request.transport is not None
        sock = request.transport.get_extra_info("socket")
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        request.transport.abort()  # a reset right behind the last event
        return resp

    async def sized(request: web.Request) -> web.Response:
        return web.Response(body=b"".join(pieces), content_type="text/event-stream")

    app = web.Application()
    app.router.add_get("/stream", stream)
    app.router.add_get("/dies", dies)
    app.router.add_get("/resets", resets)
    app.router.add_get("/sized", sized)
    return app


async def _read_all(
    url: str, *, lean: bool, slow: asyncio.Event | None = None
) -> tuple[bytes, int, bool]:
    """(the body, its readany calls, whether the body was made lean); ``slow``: read only
    once it is set (the upstream has filled the buffer past its high-water mark), then
    slowly."""
    async with aiohttp.ClientSession(auto_decompress=False) as session, session.get(url) as r:
        made = lean_body(r.content) if lean else False
        got, reads = [], 0
        if slow is not None:
            await slow.wait()
        while chunk := await r.content.readany():
            got.append(chunk)
            reads += 1
            if slow is not None:
                await asyncio.sleep(0.002)
        assert r.content.is_eof()
        return b"".join(got), reads, made


async def _drain(content: StreamReader, into: list[bytes] | None = None) -> None:
    while chunk := await content.readany():
        if into is not None:
            into.append(chunk)


@pytest.mark.asyncio
@pytest.mark.parametrize("path", ["/stream", "/sized"])
async def test_a_lean_body_reads_the_same_bytes_as_aiohttps_own(
    start_app: StartApp, path: str
) -> None:
    pieces = _pieces(SEED, 2000)
    url = await start_app(_upstream(pieces))
    lean, _, made = await _read_all(url + path, lean=True)
    plain, _, _ = await _read_all(url + path, lean=False)
    assert made
    assert lean == plain == b"".join(pieces), f"seed={SEED}"


@pytest.mark.asyncio
async def test_a_slow_reader_pauses_the_upstream_and_resumes_it(start_app: StartApp) -> None:
    """4 MiB in small chunks to a reader that sleeps between reads: the buffer passes the
    high-water mark (aiohttp pauses the transport), each drain resumes it, and nothing is
    lost; reads then carry many chunks each."""
    pieces = [b"data: %06d %s\n\n" % (i, b"y" * 200) for i in range(20_000)]
    url = await start_app(_upstream(pieces))
    paused: list[bool] = []
    full = asyncio.Event()
    orig_pause = aiohttp.client_proto.ResponseHandler.pause_reading

    def pause_reading(self: aiohttp.client_proto.ResponseHandler) -> None:
        paused.append(True)
        full.set()
        orig_pause(self)

    aiohttp.client_proto.ResponseHandler.pause_reading = pause_reading  # type: ignore[method-assign]
    try:
        body, reads, made = await asyncio.wait_for(
            _read_all(url + "/stream", lean=True, slow=full), 60
        )
    finally:
        aiohttp.client_proto.ResponseHandler.pause_reading = orig_pause  # type: ignore[method-assign]
    assert made
    assert body == b"".join(pieces)
    assert paused, "the reader never fell behind: the test did not test flow control"
    assert reads < len(pieces) / 4


@pytest.mark.asyncio
async def test_a_lean_body_waits_for_data_and_for_its_end(start_app: StartApp) -> None:
    """readany waits while the upstream holds the body open, and returns b"" at its end."""
    hold = asyncio.Event()
    url = await start_app(_upstream([b"data: 1\n\n"], hold=hold))
    async with aiohttp.ClientSession() as session, session.get(url + "/stream") as r:
        assert lean_body(r.content)
        first = await r.content.readany()
        assert first == b"data: 1\n\n"
        waiting = asyncio.ensure_future(r.content.readany())
        await asyncio.sleep(0.05)
        assert not waiting.done()
        hold.set()
        assert await asyncio.wait_for(waiting, 10) == b""
        assert await r.content.readany() == b""


@pytest.mark.asyncio
async def test_a_broken_body_raises_as_aiohttps_own_does(start_app: StartApp) -> None:
    url = await start_app(_upstream(_pieces(SEED, 3)))
    for lean in (True, False):
        async with aiohttp.ClientSession() as session, session.get(url + "/dies") as r:
            if lean:
                assert lean_body(r.content)
            with pytest.raises(aiohttp.ClientPayloadError):
                await _drain(r.content)


@pytest.mark.asyncio
async def test_bytes_that_came_before_a_reset_are_read_before_its_error(
    start_app: StartApp,
) -> None:
    """An upstream resets right behind its last events while the relay is busy elsewhere:
    the bytes are in the reader when the error comes. aiohttp's own ``readany`` raises at
    once and they are lost (the control); the lean body returns them, then the error."""
    pieces = _pieces(SEED, 5)
    url = await start_app(_upstream(pieces))
    for lean in (True, False):
        async with aiohttp.ClientSession() as session, session.get(url + "/resets") as r:
            if lean:
                assert lean_body(r.content)
            deadline = asyncio.get_running_loop().time() + 10
            while r.content.exception() is None:  # not reading: the relay is elsewhere
                assert asyncio.get_running_loop().time() < deadline, "no error arrived"
                await asyncio.sleep(0.01)
            assert r.content.total_bytes == len(b"".join(pieces))
            got: list[bytes] = []
            with pytest.raises(aiohttp.ClientPayloadError):
                await _drain(r.content, got)
            if lean:
                assert b"".join(got) == b"".join(pieces)
                with pytest.raises(aiohttp.ClientPayloadError):  # the error stays
                    await r.content.readany()
            else:
                assert b"".join(got) != b"".join(pieces)


@pytest.mark.asyncio
async def test_only_aiohttps_plain_reader_is_made_lean(start_app: StartApp) -> None:
    """A decompressing body (or any other reader) is left as it is; a lean one stays lean."""
    url = await start_app(_upstream(_pieces(SEED, 3)))
    async with aiohttp.ClientSession() as session, session.get(url + "/stream") as r:
        assert lean_body(r.content)
        assert lean_body(r.content)
        assert type(r.content) is LeanBody

    class Other(StreamReader):
        __slots__ = ()

    other = Other.__new__(Other)
    assert not lean_body(other)
    assert type(other) is Other
