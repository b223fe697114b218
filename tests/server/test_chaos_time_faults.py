"""The chaos proxy performs the faults in time on a clean upstream: the real proxy in front
of the real mock, selected by the chaos header or the server's settings, durations short.

The bytes the client gets are the upstream's (plus the keep-alives of a kept-alive stall),
cut as the spec says; only when they arrive changes. A bad duration is a one-line 400 or a
startup error; a client that leaves ends the fault at once.
"""

from __future__ import annotations

import itertools
import json
import time

import aiohttp
import pytest

from sse_proxy.core import StreamReassembler
from sse_proxy.errors import ConfigError
from sse_proxy.names import CHAOS_HEADER
from sse_proxy.rechunk.timefaults import COMMENT_KEEPALIVE, TEXT_BEFORE
from sse_proxy.settings import Config
from sse_proxy.tools import fixtures
from tests.support.cli import run_cli
from tests.support.logs import LogEntries, wait_for
from tests.support.stack import StartProxy

PATHS = {"openai": "/v1/chat/completions", "anthropic": "/v1/messages"}
PING = b'event: ping\ndata: {"type": "ping"}\n\n'


async def _reads(url: str, dialect: str, chaos: str) -> list[tuple[float, bytes]]:
    started = time.monotonic()
    reads: list[tuple[float, bytes]] = []
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url + PATHS[dialect], json={"stream": True}, headers={CHAOS_HEADER: chaos}
        ) as resp,
    ):
        assert resp.status == 200, await resp.text()
        async for chunk in resp.content.iter_any():
            reads.append((time.monotonic() - started, chunk))
    return reads


def _text(body: bytes, dialect: str) -> str:
    r = StreamReassembler(dialect)
    r.feed(body)
    r.close()
    return r.text


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("dialect", "chaos", "keepalive"),
    [
        ("openai", "fault=stall_keepalive; stall=0.4; keepalive_every=0.1", COMMENT_KEEPALIVE),
        ("anthropic", "fault=stall_keepalive; stall=0.4; keepalive_every=0.1", PING),
        ("openai", "strategy=utf8; seed=3; fault=stall_silent; stall=0.4", None),
    ],
)
async def test_a_stall_by_the_chaos_header(
    mock_url: str, start: StartProxy, dialect: str, chaos: str, keepalive: bytes | None
) -> None:
    url = await start(mock_url, allow_chaos_header=True)
    reads = await _reads(url, dialect, chaos)
    body = b"".join(c for _, c in reads)
    clean = fixtures.clean_stream(dialect)
    assert _text(body, dialect) == fixtures.MESSAGE
    if keepalive is None:
        assert body == clean
    else:
        assert 2 <= body.count(keepalive) - clean.count(keepalive) <= 4
    gaps = [b[0] - a[0] for a, b in itertools.pairwise(reads)]
    assert max(gaps) >= 0.09  # the stall, or the keep-alives that fill it
    assert reads[-1][0] >= 0.4
    stalled_at = next(i for i, g in enumerate(gaps) if g >= 0.09)
    before = b"".join(c for _, c in reads[: stalled_at + 1])
    assert TEXT_BEFORE <= len(_text(before, dialect)) < len(fixtures.MESSAGE)


@pytest.mark.asyncio
async def test_a_linger_by_the_servers_settings(mock_url: str, start: StartProxy) -> None:
    url = await start(mock_url, mode="chaos", chaos_fault="linger", chaos_linger=0.4)
    reads = await _reads(url, "openai", "fault=linger")
    assert b"".join(c for _, c in reads) == fixtures.clean_stream("openai")
    started = time.monotonic()
    async with (
        aiohttp.ClientSession() as session,
        session.post(url + PATHS["openai"], json={"stream": True}) as resp,
    ):
        body = b""
        while not body.endswith(b"data: [DONE]\n\n"):
            body += await resp.content.readany()
        got_all = time.monotonic() - started
        assert await resp.content.read() == b""  # the end of the body, later
        closed = time.monotonic() - started
    assert closed - got_all >= 0.3


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "chaos",
    [
        "fault=bogus",
        "fault=stall_silent; stall=-1",
        "fault=linger; linger=nan",
        "fault=stall_keepalive; keepalive_every=inf",
        "fault=drip; drip_rate=0",
        "fault=linger; linger=90000",
    ],
)
async def test_a_bad_fault_or_duration_is_a_one_line_400(
    mock_url: str, start: StartProxy, chaos: str
) -> None:
    url = await start(mock_url, allow_chaos_header=True)
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url + PATHS["openai"], json={"stream": True}, headers={CHAOS_HEADER: chaos}
        ) as resp,
    ):
        assert resp.status == 400
        body = json.loads(await resp.read())
    message = json.dumps(body)
    assert "\\n" not in message
    key = chaos.rsplit(";", 1)[-1].split("=", maxsplit=1)[0].strip()
    assert key in message


def test_bad_chaos_settings_are_startup_errors() -> None:
    for bad in (
        {"chaos_stall": -1.0},
        {"chaos_linger": float("nan")},
        {"chaos_keepalive_every": 0.0},
        {"chaos_drip_rate": 0.0},
        {"chaos_stall": 86_401.0},
        {"chaos_fault": "bogus"},
        {"linger_threshold": -1.0},
    ):
        with pytest.raises(ConfigError, match=next(iter(bad))):
            Config(**bad)
    for args in (["--chaos-stall", "-1"], ["--chaos-fault", "bogus"], ["--chaos-linger", "inf"]):
        proc = run_cli("serve", "--upstream", "http://127.0.0.1:9", "--mode", "chaos", *args)
        assert proc.returncode == 2, proc.stderr
        assert len(proc.stderr.decode().strip().splitlines()) == 1
        assert b"Traceback" not in proc.stderr


@pytest.mark.asyncio
async def test_a_client_that_leaves_ends_the_stall_at_once(
    mock_url: str, start: StartProxy, logs: LogEntries
) -> None:
    """A minute's silent stall: the client reads some text and leaves; the stream is
    summed up as the client's leaving right away, not after the minute."""
    url = await start(mock_url, allow_chaos_header=True)
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url + PATHS["openai"],
            json={"stream": True},
            headers={CHAOS_HEADER: "fault=stall_silent; stall=60"},
        ) as resp,
    ):
        got = b""
        while len(_text(got, "openai")) < TEXT_BEFORE:
            got += await resp.content.readany()
    line = await wait_for(logs, "stream.summary", within=20)
    assert line["ended_by"] == "client_disconnect"
    assert "fault=stall_silent" in line["chaos"]
