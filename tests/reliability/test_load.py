"""Load: hundreds of concurrent streams complete byte-identical and leave nothing behind."""

from __future__ import annotations

import asyncio
import gc
import hashlib
import os
import re
from dataclasses import dataclass, field

import aiohttp
import pytest
import structlog

from sse_proxy.server.keys import STATE
from sse_proxy.server.run import start_proxy, stop_proxy
from sse_proxy.settings import Config
from sse_proxy.tools import fixtures
from sse_proxy.tools.mock_upstream import start_mock_upstream
from tests.support.logs import LogEntries, eventually, metric_sum

pytestmark = pytest.mark.asyncio

STREAMS = 300
CHAT_BODY = fixtures.openai_chat_stream()  # what the mock serves for {"stream": true}
# A per-stream fd or task leak shows up as hundreds; a handful of fds covers one-off lazy
# state (e.g. a resolver's first use) that the warm-up round might not have created.
FD_TOLERANCE = 3
TASK_TOLERANCE = 0


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


def _raw_body(i: int) -> bytes:
    """A distinct SSE body per stream, so that any crosstalk between streams shows."""
    return b"".join(
        b"id: %d-%d\ndata: stream %d event %d caf\xc3\xa9 \xf0\x9f\x99\x82\n\n" % (i, j, i, j)
        for j in range(40)
    )


async def _one(client: aiohttp.ClientSession, url: str, i: int) -> tuple[int, bool]:
    """Stream ``i``: the chat fixture (every tenth), else a unique raw echo; (status, same).

    The mock writes the chat fixture in ~460 small pieces, so most streams use the echo
    endpoint with fewer, larger pieces to keep 300 streams within a few seconds.
    """
    if i % 10 == 0:
        want = CHAT_BODY
        request = client.post(
            url + "/v1/chat/completions", json={"stream": True}, headers={"X-Mock-Seed": str(i)}
        )
    else:
        want = _raw_body(i)
        request = client.post(url + "/sse/raw?chunk=97&delay=0.002", data=want)
    async with request as resp:
        got = await resp.read()
    return resp.status, hashlib.sha256(got).digest() == hashlib.sha256(want).digest()


@dataclass
class RoundResult:
    statuses: list[int] = field(default_factory=list)
    mismatched: list[int] = field(default_factory=list)
    peak_active: int = 0
    active_after: int = -1
    metrics: str = ""
    logs: LogEntries = field(default_factory=list)


async def _round(mode: str, streams: int) -> RoundResult:
    """Run ``streams`` concurrent streams through a fresh mock + proxy; stop both after."""
    out = RoundResult()
    upstream_runner, upstream_url = await start_mock_upstream(port=0, seed=0, chunk_delay=0.0)
    runner, url = await start_proxy(
        Config(upstream=upstream_url, port=0, mode=mode, shutdown_grace=1.0)
    )
    state = runner.app[STATE]

    async def watch() -> None:
        while True:
            out.peak_active = max(out.peak_active, len(state.active))
            await asyncio.sleep(0.005)

    # Rendering 300 summaries to the console would cost seconds; capture them instead.
    with structlog.testing.capture_logs() as out.logs:
        try:
            async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as client:
                watcher = asyncio.create_task(watch())
                try:
                    results = await asyncio.gather(*(_one(client, url, i) for i in range(streams)))
                finally:
                    watcher.cancel()
                    await asyncio.gather(watcher, return_exceptions=True)
                out.statuses = [status for status, _ in results]
                out.mismatched = [i for i, (_, same) in enumerate(results) if not same]
                await eventually(lambda: not state.active, 2.0)
                out.active_after = len(state.active)
                async with client.get(url + "/_sse-proxy/metrics") as resp:
                    out.metrics = await resp.text()
        finally:
            await stop_proxy(runner)
            await upstream_runner.cleanup()
    return out


def _metric(text: str, name: str) -> float:
    found = re.search(rf"^{re.escape(name)} (\S+)$", text, re.MULTILINE)
    assert found is not None, f"{name} not in metrics"
    return float(found.group(1))


@pytest.mark.parametrize("mode", ["passthrough", "frames"])
async def test_hundreds_of_streams_byte_identical_and_no_leaks(mode):
    """300 concurrent streams arrive byte-identical, and no fd or task outlives the servers."""
    async with asyncio.timeout(40):
        await _round(mode, 4)  # warm-up: one-off lazy state is created here, not counted
        gc.collect()
        fds_before, tasks_before = _open_fds(), len(asyncio.all_tasks())
        result = await _round(mode, STREAMS)
        # Closed transports give their sockets back within a few loop iterations.
        await eventually(
            lambda: _open_fds() <= fds_before and len(asyncio.all_tasks()) <= tasks_before, 1.0
        )
        fds_after, tasks_after = _open_fds(), len(asyncio.all_tasks())

    assert result.statuses == [200] * STREAMS
    assert not result.mismatched, f"{len(result.mismatched)} differ, e.g. {result.mismatched[:5]}"
    assert result.peak_active >= STREAMS // 2, f"only {result.peak_active} ever ran at once"
    assert result.active_after == 0, "relay tasks still registered after every stream ended"
    assert _metric(result.metrics, "sse_proxy_streams_active") == 0.0
    streams = metric_sum(result.metrics, "sse_proxy_streams_total", ended_by="upstream_eof")
    assert streams == STREAMS
    ended = [e["ended_by"] for e in result.logs if e["event"] == "stream.summary"]
    assert ended == ["upstream_eof"] * STREAMS
    assert fds_after - fds_before <= FD_TOLERANCE, (fds_before, fds_after)
    leftover = [t.get_coro() for t in asyncio.all_tasks()]
    assert tasks_after - tasks_before <= TASK_TOLERANCE, leftover
