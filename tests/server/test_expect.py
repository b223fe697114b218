"""``Expect: 100-continue`` end to end, with curl as the real client.

The proxy meets the expectation itself: ``100 Continue`` once the request is admitted and
its upstream request is under way, never before a refusal; the expectation is not
forwarded, so an upstream that never sends its own 100 (most do not) still gets the body at
once. Before, the proxy answered 100, forwarded the expectation and held the body until
the upstream's 100: the client got a 504 at the idle timeout.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Awaitable, Callable
from pathlib import Path

import pytest

from tests.support.net import port_of, raw_exchange
from tests.support.stack import StartProxy
from tests.support.upstreams import Behaviour, RawUpstream, UpstreamConn

StartUpstream = Callable[[Behaviour], Awaitable[RawUpstream]]

BODY = b'{"model":"m","input":"' + b"x" * 200_000 + b'"}'

IDLE = 60.0
"""The proxy's idle timeout here: a deadlocked expectation would last this long."""


async def _read_body_then_answer(conn: UpstreamConn) -> None:
    """An upstream that ignores Expect (sends no 100): reads the body, then answers."""
    length = next(
        int(line.split(b":", 1)[1])
        for line in conn.head.split(b"\r\n")
        if line.lower().startswith(b"content-length:")
    )
    body = await conn.reader.readexactly(length)
    text = b'{"got":%d}' % len(body)
    await conn.send(
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (len(text), text)
    )


def _curl(url: str, body: Path) -> tuple[subprocess.CompletedProcess[str], float]:
    started = time.monotonic()
    done = subprocess.run(
        [
            "curl",
            "-sS",
            "-v",
            "--expect100-timeout",
            "30",
            "-H",
            "Expect: 100-continue",
            "-H",
            "Content-Type: application/json",
            "--data-binary",
            f"@{body}",
            url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={"PATH": "/usr/bin:/bin", "NO_PROXY": "*"},
    )
    return done, time.monotonic() - started


@pytest.mark.asyncio
async def test_expect_100_continue_with_curl_through_an_upstream_that_sends_no_100(
    start: StartProxy,
    raw_upstream: StartUpstream,
    tmp_path: Path,
) -> None:
    upstream = await raw_upstream(_read_body_then_answer)
    proxy = await start(upstream.url, idle_timeout=IDLE)
    body = tmp_path / "body.json"
    body.write_bytes(BODY)
    done, took = await asyncio.to_thread(_curl, f"{proxy}/v1/responses", body)
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout == f'{{"got":{len(BODY)}}}'
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("< HTTP/")]
    assert lines[0].startswith("< HTTP/1.1 100"), lines
    assert lines[1].startswith("< HTTP/1.1 200"), lines
    assert took < IDLE, took  # the deadlock ended only at the idle timeout (a 504)
    assert b"expect:" not in upstream.conn.head.lower()  # the proxy met it


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("extra", "status"),
    [
        ("Content-Length: 99999999999\r\n", 413),  # over max_request_body_bytes
        ("Content-Length: 10\r\nOrigin: https://attacker.invalid\r\n", 403),
    ],
)
async def test_a_refusal_comes_instead_of_100_continue(
    start: StartProxy, raw_upstream: StartUpstream, extra: str, status: int
) -> None:
    """A request refused from its head alone gets the refusal as its first answer: the
    client never sends the body."""
    upstream = await raw_upstream(_read_body_then_answer)
    proxy = await start(upstream.url)
    head = (
        "POST /v1/responses HTTP/1.1\r\nHost: 127.0.0.1\r\nExpect: 100-continue\r\n"
        f"{extra}Connection: close\r\n\r\n"
    )
    reply = await raw_exchange(port_of(proxy), head.encode())
    assert reply.status == status
    assert upstream.conns == []
