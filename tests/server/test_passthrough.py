"""Passthrough mode: bytes reach the client exactly as upstream sent them, and at once."""

from __future__ import annotations

import asyncio
import hashlib
import io

import aiohttp
import pytest
from aiohttp import web

from sse_proxy.tools import fixtures
from tests.support.logs import LogEntries, alert_names, summary, warnings
from tests.support.net import STREAM_ID, read_all
from tests.support.stack import StartApp, StartProxy

# Invalid UTF-8 (lone continuation, truncated 4-byte sequence, 0xFF), NUL, a BOM, CRLF,
# bare CR and a frame left open at the end: the proxy must not touch any of it.
ODD_SSE = (
    b"\xef\xbb\xbfdata: caf\xc3\r\n\r\n"
    b"data: \x80\xf0\x9f\xa6\xff\x00 ok\r\rdata: mixed\n\r\n"
    b": comment \xe2\x82\r\n"
    b"event: x\ndata: " + bytes(range(256)) + b"\n\n"
    b"data: open frame, no blank line"
)


@pytest.mark.asyncio
async def test_large_binary_body_is_byte_identical(
    proxy_url: str, session: aiohttp.ClientSession, logs: LogEntries
) -> None:
    """A 5 MB octet-stream response arrives byte for byte with its Content-Length."""
    n = 5 * 1024 * 1024
    async with session.get(f"{proxy_url}/bytes/{n}") as resp:
        body = await resp.read()
        assert resp.status == 200
        assert resp.headers["Content-Type"] == "application/octet-stream"
        assert resp.headers["Content-Length"] == str(n)
        assert resp.headers[STREAM_ID]
        assert "X-Accel-Buffering" not in resp.headers
    assert hashlib.sha256(body).digest() == hashlib.sha256(fixtures.pattern_bytes(n)).digest()
    (line,) = [e for e in logs if e["event"] == "proxy.request"]
    assert line["bytes"] == n
    assert line["ended_by"] == "upstream_eof"
    assert line["stream_id"] == resp.headers[STREAM_ID]
    assert not [e for e in logs if e["event"] == "stream.summary"]


@pytest.mark.asyncio
@pytest.mark.parametrize("query", ["", "?chunk=1", "?chunk=7", "?seed=3"])
async def test_arbitrary_sse_bytes_are_byte_identical(
    proxy_url: str, session: aiohttp.ClientSession, query: str
) -> None:
    """Invalid UTF-8, NULs, a BOM, CRLF and CR in an SSE body are forwarded unchanged."""
    async with session.post(f"{proxy_url}/sse/raw{query}", data=ODD_SSE) as resp:
        body = await resp.read()
        assert resp.status == 200
        assert resp.headers["Content-Type"].startswith("text/event-stream")
    assert body == ODD_SSE


@pytest.mark.asyncio
async def test_large_sse_body_is_byte_identical(
    proxy_url: str, session: aiohttp.ClientSession
) -> None:
    """A 3 MB SSE body in odd-sized pieces comes through byte for byte."""
    frame = b"data: " + "日本語 🙂 café ".encode() * 40 + b"\n\n"
    data = frame * (3 * 1024 * 1024 // len(frame))
    url = f"{proxy_url}/sse/raw?chunk=65521"
    async with session.post(url, data=io.BytesIO(data)) as resp:
        assert await resp.read() == data


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("path", "dialect"),
    [
        ("/v1/chat/completions", "openai"),
        ("/v1/responses", "responses"),
        ("/v1/messages", "anthropic"),
        ("/v1/text", "text"),
    ],
)
async def test_llm_streams_identical_and_clean(
    proxy_url: str, session: aiohttp.ClientSession, logs: LogEntries, path: str, dialect: str
) -> None:
    """Each dialect's clean stream arrives unchanged, with SSE headers and a clean summary."""
    async with session.post(proxy_url + path, json={"stream": True}) as resp:
        body = await resp.read()
        headers = resp.headers
    assert body == fixtures.clean_stream(dialect)
    assert headers["X-Accel-Buffering"] == "no"
    assert headers["Cache-Control"] == "no-cache"
    assert headers["x-request-id"].startswith("req_mock_")
    sid = headers[STREAM_ID]
    assert len(sid) >= 8
    assert warnings(logs) == []
    line = summary(logs, sid)
    assert line["ended_by"] == "upstream_eof"
    assert line["dialect"] == dialect
    assert line["text_length"] == len(fixtures.MESSAGE)
    assert line["bytes"] == len(body)
    assert line["alerts"] == {}
    assert line["events"] > 10
    assert line["upstream_request_id"] == headers["x-request-id"]
    assert line["method"] == "POST"
    assert line["path"] == path
    assert line["mode"] == "passthrough"
    assert "text" not in line  # message text only with log_text


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("dialect", "tokens"),
    [
        ("openai", fixtures.TOKENS),
        ("anthropic", fixtures.TOKENS),
        ("responses", fixtures.SHORT_TOKENS),
        ("text", fixtures.TOKENS),
    ],
)
async def test_clean_stream_cut_at_every_byte_raises_no_warning(
    proxy_url: str,
    session: aiohttp.ClientSession,
    logs: LogEntries,
    dialect: str,
    tokens: tuple[str, ...],
) -> None:
    """A clean multilingual stream written one byte at a time gives exact text, no warning."""
    data = fixtures.clean_stream(dialect, tokens)
    async with session.post(f"{proxy_url}/sse/raw?chunk=1", data=data) as resp:
        reads = await read_all(resp)
        sid = resp.headers[STREAM_ID]
    assert b"".join(reads) == data
    assert warnings(logs) == []
    assert alert_names(logs) == set()
    line = summary(logs, sid)
    assert line["dialect"] == dialect
    assert line["text_length"] == len("".join(tokens))
    assert line["alerts"] == {}


@pytest.mark.asyncio
async def test_log_text_puts_the_reassembled_text_in_the_summary(
    mock_url: str, start: StartProxy, session: aiohttp.ClientSession, logs: LogEntries
) -> None:
    """With log_text the summary carries the exact reassembled message (multilingual)."""
    url = await start(mock_url, log_text=True)
    data = fixtures.clean_stream("openai")
    async with session.post(f"{url}/sse/raw?chunk=3", data=data) as resp:
        await resp.read()
        sid = resp.headers[STREAM_ID]
    assert summary(logs, sid)["text"] == fixtures.MESSAGE


@pytest.mark.asyncio
async def test_first_event_is_forwarded_without_waiting(
    start_app: StartApp, start: StartProxy, session: aiohttp.ClientSession
) -> None:
    """The first event reaches the client while the upstream still holds the rest: the
    upstream sends the rest only once the client has the first event (a proxy that waited
    for more would deadlock here, and the guard would fail the test)."""
    frames = [f"data: event {i}\n\n".encode() for i in range(3)]
    gate = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(frames[0])
        await gate.wait()
        for frame in frames[1:]:
            await resp.write(frame)
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/s", handler)
    url = await start(await start_app(app))
    async with session.get(f"{url}/s") as resp:
        async with asyncio.timeout(10):  # a hang guard, not a latency bound
            first = await resp.content.readany()
        gate.set()
        rest = await resp.read()
    assert first == frames[0]
    assert first + rest == b"".join(frames)


@pytest.mark.asyncio
async def test_upstream_bytes_forwarded_as_they_arrive(
    start_app: StartApp, start: StartProxy, session: aiohttp.ClientSession
) -> None:
    """Even half a frame (half a character) is forwarded at once, never held for more."""
    gate = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"data: caf" + "é".encode()[:1])
        await gate.wait()
        await resp.write("é".encode()[1:] + b"\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/s", handler)
    url = await start(await start_app(app))
    async with session.get(f"{url}/s") as resp:
        async with asyncio.timeout(2):
            first = await resp.content.readany()
        gate.set()
        rest = await resp.read()
    assert first == b"data: caf\xc3"
    assert first + rest == "data: café\n\n".encode()
