"""The mock upstream's faults in time, over real loopback sockets, in every dialect.

Short durations (tenths of a second) as per-request headers; what arrived when is read
off the stream itself. A stall comes after some text and before the terminal marker, a
linger after it; the bytes are the clean fixture, plus the keep-alives of
``stall_keepalive`` (comments, or the dialect's own ping events).
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
import pytest

from sse_proxy.core import StreamReassembler
from sse_proxy.core.dialects.registry import DIALECTS, TEXT_DIALECTS
from sse_proxy.errors import UsageError
from sse_proxy.names import DIALECT_BODIES, DIALECT_PATHS
from sse_proxy.rechunk.timefaults import COMMENT_KEEPALIVE, TEXT_BEFORE
from sse_proxy.tools import fixtures
from sse_proxy.tools.mock_upstream import mock_upstream, run_mock_upstream

FAST = {"X-Mock-Stall": "0.4", "X-Mock-Keepalive-Every": "0.1", "X-Mock-Linger": "0.4"}
Reads = list[tuple[float, bytes]]


async def _timed(url: str, dialect: str, fault: str, **headers: str) -> Reads:
    """The stream's reads with the time each arrived (seconds from the request)."""
    reads: Reads = []
    started = time.monotonic()
    method = DIALECTS[dialect].example_method
    async with (
        aiohttp.ClientSession() as session,
        session.request(
            method,
            url + DIALECT_PATHS[dialect],
            json=DIALECT_BODIES[dialect],
            headers={"X-Mock-Fault": fault, **FAST, **headers},
        ) as resp,
    ):
        assert resp.status == 200, await resp.text()
        async for chunk in resp.content.iter_any():
            reads.append((time.monotonic() - started, chunk))
    return reads


def _at(reads: Reads, needle: bytes) -> float:
    """When the read that completes the first ``needle`` arrived."""
    body = b""
    for at, chunk in reads:
        body += chunk
        if needle in body:
            return at
    raise AssertionError(f"{needle!r} never arrived")


def _text(body: bytes, dialect: str) -> str:
    r = StreamReassembler(dialect)
    r.feed(body)
    r.close()
    return r.text


def _marker(dialect: str) -> bytes:
    marker = DIALECTS[dialect].terminal_frame
    return marker if marker is not None else fixtures.clean_stream(dialect)[-40:]


# MCP's text comes whole in its response: its faults in time fall among the progress
# notifications, tested with the MCP server (tests/tools/test_mcp_*).
_STREAMED_TEXT = tuple(d for d in TEXT_DIALECTS if d != "mcp")


@pytest.mark.asyncio
@pytest.mark.parametrize("dialect", _STREAMED_TEXT)
async def test_stalls_come_after_some_text_and_before_the_end(dialect: str) -> None:
    clean = fixtures.clean_stream(dialect)
    async with mock_upstream() as url:
        silent, kept = await asyncio.gather(
            _timed(url, dialect, "stall_silent"), _timed(url, dialect, "stall_keepalive")
        )
    body = b"".join(c for _, c in silent)
    assert body == clean  # nothing at all during the stall
    assert _at(silent, _marker(dialect)) >= 0.4
    body = b"".join(c for _, c in kept)
    ping = DIALECTS[dialect].ping_frame or COMMENT_KEEPALIVE
    added = body.count(ping) - clean.count(ping)
    assert 2 <= added <= 4  # one every 0.1 s of the 0.4 s stall, none at its very end
    assert _text(body, dialect) == fixtures.MESSAGE
    stalled = body.index(ping, body.index(ping) + 1 if clean.count(ping) else 0)
    before = body[:stalled]
    assert TEXT_BEFORE <= len(_text(before, dialect)) < len(fixtures.MESSAGE)  # some text
    assert _marker(dialect) not in before
    first_ping = next(at for at, c in kept if ping in c and at > 0.05)
    assert first_ping < _at(kept, _marker(dialect)) - 0.2  # kept alive during the stall


@pytest.mark.asyncio
@pytest.mark.parametrize("dialect", ["openai", "anthropic", "responses", "gemini"])
async def test_linger_keeps_the_body_open_after_the_terminal_marker(dialect: str) -> None:
    async with mock_upstream() as url:
        reads = await _timed(url, dialect, "linger")
    assert b"".join(c for _, c in reads) == fixtures.clean_stream(dialect)
    done = _at(reads, _marker(dialect))
    assert done < 0.4  # the whole answer at once, and nothing after it
    assert reads[-1][0] == done


@pytest.mark.asyncio
async def test_linger_ends_the_body_only_after_the_linger() -> None:
    async with mock_upstream() as url, aiohttp.ClientSession() as session:
        started = time.monotonic()
        async with session.post(
            url + "/v1/chat/completions",
            json={"stream": True},
            headers={"X-Mock-Fault": "linger", **FAST},
        ) as resp:
            body = await resp.read()  # to the body's end
        took = time.monotonic() - started
    assert body.endswith(b"data: [DONE]\n\n")
    assert took >= 0.4


@pytest.mark.asyncio
async def test_drip_sends_the_rest_a_few_bytes_at_a_time() -> None:
    async with mock_upstream() as url:
        reads = await _timed(url, "text", "drip", **{"X-Mock-Drip-Rate": "1000"})
    body = b"".join(c for _, c in reads)
    assert body == fixtures.clean_stream("text")
    # 1000 B/s: 50-byte pieces 0.05 s apart, once TEXT_BEFORE events went out whole
    head = _at(reads, b"\n\n".join(body.split(b"\n\n")[:TEXT_BEFORE]))
    late = [c for at, c in reads if at > head + 0.01]
    assert len(late) > 10
    assert max(map(len, late)) <= 100  # (two pieces, if a read fell behind)
    rest = len(body) - sum(len(c) for at, c in reads if at <= head + 0.01)
    assert reads[-1][0] - head >= rest / 1000 * 0.8


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("header", "value"),
    [
        ("X-Mock-Stall", "-1"),
        ("X-Mock-Stall", "nan"),
        ("X-Mock-Linger", "inf"),
        ("X-Mock-Linger", "86401"),
        ("X-Mock-Keepalive-Every", "0"),
        ("X-Mock-Drip-Rate", "0"),
        ("X-Mock-Stall", "soon"),
    ],
)
async def test_a_bad_duration_is_a_one_line_400(header: str, value: str) -> None:
    async with (
        mock_upstream() as url,
        aiohttp.ClientSession() as session,
        session.post(
            url + "/v1/chat/completions",
            json={"stream": True},
            headers={"X-Mock-Fault": "stall_silent", header: value},
        ) as resp,
    ):
        assert resp.status == 400
        message = (await resp.json())["error"]["message"]
    assert "\n" not in message
    assert header.removeprefix("X-Mock-").lower().replace("-", "_") in message


@pytest.mark.asyncio
async def test_the_query_names_durations_too() -> None:
    async with mock_upstream() as url, aiohttp.ClientSession() as session:
        async with session.post(
            url + "/v1/chat/completions?fault=stall_silent&stall=-2", json={"stream": True}
        ) as resp:
            assert resp.status == 400
        async with session.post(
            url + "/v1/chat/completions?fault=stall_silent&stall=0.05", json={"stream": True}
        ) as resp:
            assert (await resp.read()).endswith(b"[DONE]\n\n")


def test_bad_durations_from_flags_are_usage_errors() -> None:
    for bad in ({"stall": "-1"}, {"linger": "nan"}, {"drip_rate": "0"}, {"stall": "1e9"}):
        with pytest.raises(UsageError):
            run_mock_upstream(port=0, fault="stall_silent", timing=bad)


@pytest.mark.asyncio
async def test_a_client_that_leaves_ends_its_stall() -> None:
    """A stall of a minute is not waited out for a client that is gone: the mock's stream
    ends with the client, and the mock stops at once."""
    async with mock_upstream() as url:
        async with (
            aiohttp.ClientSession() as session,
            session.post(
                url + "/v1/chat/completions",
                json={"stream": True},
                headers={"X-Mock-Fault": "stall_silent", "X-Mock-Stall": "60"},
            ) as resp,
        ):
            got = b""
            while len(_text(got, "openai")) < TEXT_BEFORE:
                got += await resp.content.readany()
        started = time.monotonic()
    assert time.monotonic() - started < 20  # not the minute
