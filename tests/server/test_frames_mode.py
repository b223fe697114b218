"""Frames mode: every write the client receives is whole SSE frames, bytes unchanged.

The response is read off a plain socket so that each HTTP/1.1 chunk (one proxy write) is
seen as it was sent, not as a client library reassembles it.
"""

from __future__ import annotations

import asyncio
import itertools

import aiohttp
import pytest
from aiohttp import web

from sse_proxy.core import StreamReassembler
from sse_proxy.tools import fixtures
from tests.support.logs import LogEntries, alert_names, named, summary
from tests.support.net import STREAM_ID, RawResponse, raw_exchange
from tests.support.stack import StartApp, StartProxy

BLANK_LINE_ENDINGS = (b"\n\n", b"\r\n\r\n", b"\r\r", b"\n\r\n", b"\r\n\n", b"\n\r", b"\r\r\n")


def _frame_ends(data: bytes) -> set[int]:
    """Where the core says frames end (offsets just after each blank line)."""
    r = StreamReassembler("none")
    ends = set(r.feed(data).frame_ends)
    ends.update(r.close().frame_ends)
    return ends


async def _post_raw(url: str, path: str, body: bytes) -> RawResponse:
    head = (
        f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: text/plain\r\n"
        f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    ).encode()
    return await raw_exchange(url, head + body)


def _assert_whole_frames(reply: RawResponse, data: bytes, *, partial_tail: bool = False) -> None:
    assert reply.status == 200
    assert reply.complete
    assert reply.body == data
    assert reply.header("Transfer-Encoding") == "chunked"
    ends = _frame_ends(data)
    offsets = list(itertools.accumulate(len(c) for c in reply.chunks))
    whole = reply.chunks[:-1] if partial_tail else reply.chunks
    for chunk, offset in zip(whole, offsets, strict=False):
        assert chunk.endswith(BLANK_LINE_ENDINGS), chunk[-20:]
        assert offset in ends, (offset, chunk[-20:])
    # One write per frame: as many chunks as frames (plus the partial tail, if any).
    assert len(reply.chunks) == len(ends) + (1 if partial_tail else 0)


STREAMS = {
    "openai_lf": fixtures.clean_stream("openai"),
    "openai_crlf": fixtures.clean_stream("openai", newline="\r\n"),
    "anthropic_cr": fixtures.clean_stream("anthropic", newline="\r"),
    "responses_mixed": fixtures.faulty_stream("mixed_newlines", "responses"),
    "text_invalid_utf8": fixtures.faulty_stream("invalid_utf8", "text"),
    "comments_and_ids": (
        b": keep-alive\n\nid: 1\nevent: a\ndata: x\ndata: y\n\nretry: 10\n\n"
        b"data: \xf0\x9f\xa6\x8a\r\n\r\n:\r\rdata: last\n\n"
    ),
}


@pytest.mark.asyncio
@pytest.mark.parametrize("name", sorted(STREAMS))
@pytest.mark.parametrize("chunk", [7, 1000])
async def test_every_write_ends_at_a_frame_boundary(
    mock_url: str, start: StartProxy, logs: LogEntries, name: str, chunk: int
) -> None:
    """Upstream cuts frames anywhere; each HTTP chunk the client gets is exactly one frame."""
    url = await start(mock_url, mode="frames")
    data = STREAMS[name]
    reply = await _post_raw(url, f"/sse/raw?chunk={chunk}", data)
    _assert_whole_frames(reply, data)
    sid = reply.header(STREAM_ID)
    line = summary(logs, sid)  # type: ignore[arg-type]
    assert line["mode"] == "frames"
    assert line["ended_by"] == "upstream_eof"


@pytest.mark.asyncio
async def test_passthrough_does_cut_frames(mock_url: str, start: StartProxy) -> None:
    """Control: in passthrough the same upstream yields writes that end mid-frame."""
    url = await start(mock_url)
    data = STREAMS["openai_lf"]
    reply = await _post_raw(url, "/sse/raw?chunk=7&delay=0.0005", data[:700])
    assert reply.body == data[:700]
    assert any(not c.endswith(BLANK_LINE_ENDINGS) for c in reply.chunks)


@pytest.mark.asyncio
@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
async def test_partial_frame_at_end_is_delivered_with_its_alert(
    mock_url: str, start: StartProxy, logs: LogEntries, dialect: str
) -> None:
    """An unterminated last frame still reaches the client (as the last write) and alerts."""
    url = await start(mock_url, mode="frames")
    data = fixtures.faulty_stream("unterminated", dialect)
    reply = await _post_raw(url, "/sse/raw?chunk=7", data)
    _assert_whole_frames(reply, data, partial_tail=True)
    assert not reply.chunks[-1].endswith(BLANK_LINE_ENDINGS)
    sid = reply.header(STREAM_ID)
    assert alert_names(logs, sid) == {"sse.unterminated_frame", "sse.truncated"}


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("path", "dialect"),
    [("/v1/chat/completions", "openai"), ("/v1/responses", "responses")],
)
async def test_llm_streams_identical_in_frames_mode(
    mock_url: str,
    start: StartProxy,
    session: aiohttp.ClientSession,
    logs: LogEntries,
    path: str,
    dialect: str,
) -> None:
    """The mock's realistic streams arrive byte-identical in frames mode, with no warning."""
    url = await start(mock_url, mode="frames")
    async with session.post(url + path, json={"stream": True}) as resp:
        assert await resp.read() == fixtures.clean_stream(dialect)
        assert resp.headers["X-Accel-Buffering"] == "no"
    assert not [e for e in logs if e.get("log_level") == "warning"]


@pytest.mark.asyncio
async def test_oversized_frame_is_not_held_without_bound(
    mock_url: str, start: StartProxy, logs: LogEntries
) -> None:
    """A frame past max_frame_bytes goes out in pieces rather than being held whole."""
    url = await start(mock_url, mode="frames", max_frame_bytes=4096, max_line_bytes=4096)
    big = b"data: " + b"x" * 20_000 + b"\n\n"
    data = b"data: hello\n\n" + big + b"data: world\n\n"
    reply = await _post_raw(url, "/sse/raw?chunk=999&delay=0.002", data)
    assert reply.body == data
    assert reply.chunks[0] == b"data: hello\n\n"
    assert max(len(c) for c in reply.chunks) < len(big)
    assert named(logs, "sse.oversized_frame", reply.header(STREAM_ID))


@pytest.mark.asyncio
async def test_complete_frame_forwarded_at_once(
    start_app: StartApp, start: StartProxy, session: aiohttp.ClientSession
) -> None:
    """A frame goes out as soon as its blank line arrives, not held for the next one: the
    upstream finishes the second frame only once the client has the first (a proxy that
    held it would deadlock, and the guard would fail the test); half a frame is held."""
    gate = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"data: fi")
        await asyncio.sleep(0.2)  # pacing, so that half a frame is a read of its own
        await resp.write(b"rst\n\ndata: sec")
        await gate.wait()
        await resp.write(b"ond\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/s", handler)
    url = await start(await start_app(app), mode="frames")
    async with session.get(f"{url}/s") as resp:
        async with asyncio.timeout(10):  # a hang guard, not a latency bound
            first = await resp.content.readany()
        gate.set()
        rest = await resp.read()
    assert first == b"data: first\n\n"
    assert rest == b"data: second\n\n"
