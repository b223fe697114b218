"""The backlog: a stream's bookkeeping waits while another request owes its first byte,
never longer than its bound, never lost, and in order.

The unit tests drive a real event loop; the last one runs a real proxy: a stream ends
while another request is still waiting for its upstream's head, and its summary line and
its count in the metrics must still be there (the metrics scrape runs the queue first).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from sse_proxy.server.backlog import Backlog
from tests.support.logs import LogEntries, wait_for
from tests.support.stack import StartApp, StartProxy


@pytest.mark.asyncio
async def test_jobs_wait_for_the_first_byte_owed_and_run_in_order() -> None:
    backlog = Backlog(max_wait=30.0, quiet_s=0.0)
    ran: list[int] = []
    backlog.request_started()
    assert backlog.busy
    for i in range(3):
        backlog.defer(functools.partial(ran.append, i))
    for _ in range(5):
        await asyncio.sleep(0)
    assert ran == []  # a first byte is still owed, and the bound is far
    backlog.first_byte_sent()
    for _ in range(5):
        await asyncio.sleep(0)
    assert ran == [0, 1, 2]
    assert not backlog.busy


async def _starts_every(
    backlog: Backlog, gap: float, until: asyncio.Event, at: dict[int, asyncio.Event] | None = None
) -> list[float]:
    """Requests that start (and get their first byte at once) every ``gap`` seconds (the
    scenario's pace); ``at``: events set once that many requests have started."""
    loop = asyncio.get_running_loop()
    starts: list[float] = []
    while not until.is_set():
        backlog.request_started()
        starts.append(loop.time())
        backlog.first_byte_sent()
        if at is not None and (reached := at.get(len(starts))) is not None:
            reached.set()
        await asyncio.sleep(gap)
    return starts


@pytest.mark.asyncio
async def test_jobs_wait_while_requests_keep_starting_then_run() -> None:
    # a burst spread over time: between two starts no first byte is owed, and the queue
    # still waits for the starts to stop
    loop = asyncio.get_running_loop()
    quiet = 0.2
    backlog = Backlog(max_wait=30.0, quiet_s=quiet)
    ran_at: list[float] = []
    all_ran = asyncio.Event()

    def job() -> None:
        ran_at.append(loop.time())
        if len(ran_at) == 3:
            all_ran.set()

    stop, under_way, thirty_more = asyncio.Event(), asyncio.Event(), asyncio.Event()
    at = {5: under_way, 35: thirty_more}
    burst = asyncio.create_task(_starts_every(backlog, 0.01, stop, at))
    async with asyncio.timeout(10):
        await under_way.wait()
    for _ in range(3):
        backlog.defer(job)
    async with asyncio.timeout(10):
        await thirty_more.wait()  # more starts, each within the quiet time of the last
    stop.set()
    starts = await burst
    async with asyncio.timeout(10):
        await all_ran.wait()
    for when in ran_at:
        last = max(t for t in starts if t <= when)
        assert when - last >= quiet - 0.005, (when - last, "ran before the starts stopped")


@pytest.mark.asyncio
async def test_starts_that_never_stop_hold_a_job_no_longer_than_max_wait() -> None:
    loop = asyncio.get_running_loop()
    backlog = Backlog(max_wait=0.1, quiet_s=30.0)
    stop = asyncio.Event()
    burst = asyncio.create_task(_starts_every(backlog, 0.005, stop))
    done = asyncio.Event()
    queued = loop.time()
    backlog.defer(done.set)
    try:
        async with asyncio.timeout(10):
            await done.wait()
    finally:
        stop.set()
        await burst
    assert loop.time() - queued >= 0.1 - 0.005  # it waited, and then did not wait for ever


@pytest.mark.asyncio
async def test_a_quiet_backlog_runs_a_job_on_the_next_turn() -> None:
    backlog = Backlog()
    done = asyncio.Event()
    assert not backlog.busy
    backlog.defer(done.set)
    async with asyncio.timeout(10):
        await done.wait()


@pytest.mark.asyncio
async def test_no_job_waits_past_max_wait_even_with_a_first_byte_owed() -> None:
    loop = asyncio.get_running_loop()
    backlog = Backlog(max_wait=0.05)
    backlog.request_started()  # and never sent: an upstream that takes seconds to answer
    done = asyncio.Event()
    queued = loop.time()
    backlog.defer(done.set)
    async with asyncio.timeout(10):
        await done.wait()
    assert loop.time() - queued >= 0.05 - 0.002  # it did wait for the first byte


@pytest.mark.asyncio
async def test_a_long_queue_runs_in_slices_and_lets_the_loop_in() -> None:
    backlog = Backlog(max_wait=30.0, slice_s=0.001)
    ran: list[int] = []
    turns: list[int] = []

    def slow(i: int) -> None:
        ran.append(i)
        deadline = asyncio.get_running_loop().time() + 0.0005
        while asyncio.get_running_loop().time() < deadline:
            pass

    async def other() -> None:
        while len(ran) < 40:
            turns.append(len(ran))
            await asyncio.sleep(0)

    for i in range(40):
        backlog.defer(functools.partial(slow, i))
    async with asyncio.timeout(30):
        await other()
    assert ran == list(range(40))
    assert len(set(turns)) > 3  # the other task ran between slices, not after all 40


@pytest.mark.asyncio
async def test_flush_runs_everything_now_and_a_failing_job_costs_no_other() -> None:
    backlog = Backlog(max_wait=30.0)
    backlog.request_started()
    ran: list[str] = []

    def broken() -> None:
        raise RuntimeError("a bug in one stream's summary")

    backlog.defer(lambda: ran.append("a"))
    backlog.defer(broken)
    backlog.defer(lambda: ran.append("b"))
    backlog.flush()
    assert ran == ["a", "b"]
    assert len(backlog) == 0


def test_streams_that_end_together_are_queued_a_lone_end_is_not() -> None:
    """The first of a bunch of ends is summed up at once (a lone stream: before its client
    sees the end), the ends that follow it within BUNCH are queued, and an end with a first
    byte owed is queued whenever it comes."""
    from sse_proxy.server.backlog import BUNCH

    backlog = Backlog()
    t = 100.0
    assert not backlog.ending(t)
    assert backlog.ending(t + BUNCH / 2)
    assert backlog.ending(t + BUNCH)  # (within BUNCH of the last end, not of the first)
    assert not backlog.ending(t + 3 * BUNCH)
    backlog.request_started()
    assert backlog.ending(t + 10 * BUNCH)
    backlog.first_byte_sent()
    assert not backlog.ending(t + 20 * BUNCH)


def _slow_and_fast_upstream(release: asyncio.Event) -> web.Application:
    async def chat(request: web.Request) -> web.StreamResponse:
        body = await request.json()
        if body.get("model") == "slow":
            await release.wait()  # its head comes only when the test says
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        delta = {"choices": [{"index": 0, "delta": {"content": "hi"}}]}
        await resp.write(b"data: " + json.dumps(delta).encode() + b"\n\ndata: [DONE]\n\n")
        await resp.write_eof()
        return resp

    async def models(_request: web.Request) -> web.Response:
        return web.json_response({"data": []})

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    app.router.add_get("/v1/models", models)
    return app


def _route_requests(metrics: str) -> float:
    return sum(
        float(line.rpartition(" ")[2])
        for line in metrics.splitlines()
        if line.startswith("sse_proxy_route_requests_total{")
    )


@contextlib.asynccontextmanager
async def _one_waiting_for_its_head(
    session: aiohttp.ClientSession, url: str, release: asyncio.Event
) -> AsyncIterator[None]:
    """A request whose upstream holds its head until ``release``: it owes its client a
    first byte meanwhile. On the way out it is released, and its stream must end whole."""
    slow = asyncio.create_task(
        session.post(url + "/v1/chat/completions", json={"model": "slow", "stream": True})
    )
    try:
        yield
    finally:
        release.set()
        resp = await slow
        assert b"[DONE]" in await resp.read()
        resp.release()


async def _fast_stream(session: aiohttp.ClientSession, url: str) -> None:
    async with session.post(
        url + "/v1/chat/completions", json={"model": "fast", "stream": True}
    ) as resp:
        assert b"[DONE]" in await resp.read()


@pytest.mark.asyncio
async def test_a_stream_that_ends_while_another_waits_is_summed_up_and_counted(
    start_app: StartApp, start: StartProxy, logs: LogEntries
) -> None:
    release = asyncio.Event()
    url = await start(await start_app(_slow_and_fast_upstream(release)))
    async with (
        aiohttp.ClientSession() as session,
        _one_waiting_for_its_head(session, url, release),
    ):
        await _fast_stream(session, url)
        # the slow request still owes its first byte: the fast one's summary may wait,
        # but a scrape counts it, and its line comes within the bound
        async with session.get(url + "/_sse-proxy/metrics") as resp:
            metrics = await resp.text()
        assert any(
            line.startswith("sse_proxy_streams_total{") and 'verdict="ok"' in line
            for line in metrics.splitlines()
        ), metrics
        summary = await wait_for(logs, "stream.summary")
        assert summary["request_model"] == "fast"
        assert summary["verdict"] == "ok"


@pytest.mark.asyncio
async def test_every_request_counts_once_in_its_route_whenever_its_count_is_put_off(
    start_app: StartApp, start: StartProxy
) -> None:
    # A stream's route count waits with its observers while another request owes its
    # first byte; a scrape runs it first. A request still waiting for its head is counted
    # once it is answered, and nothing twice.
    release = asyncio.Event()
    url = await start(await start_app(_slow_and_fast_upstream(release)))
    async with aiohttp.ClientSession() as session:
        async with _one_waiting_for_its_head(session, url, release):
            await _fast_stream(session, url)
            await _fast_stream(session, url)
            async with session.get(url + "/v1/models") as resp:
                assert resp.status == 200
            async with session.get(url + "/_sse-proxy/metrics") as resp:
                assert _route_requests(await resp.text()) == 3.0
        async with session.get(url + "/_sse-proxy/metrics") as resp:
            assert _route_requests(await resp.text()) == 4.0


def _released_together(release: asyncio.Event, arrived: list[asyncio.Event]) -> web.Application:
    async def chat(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        delta = {"choices": [{"index": 0, "delta": {"content": "hi"}}]}
        await resp.write(b"data: " + json.dumps(delta).encode() + b"\n\n")
        arrived.pop().set()
        await release.wait()  # every stream's end comes in the same moment
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", chat)
    return app


@pytest.mark.asyncio
async def test_streams_that_end_together_are_each_summed_up_once_and_counted(
    start_app: StartApp, start: StartProxy, logs: LogEntries
) -> None:
    """Forty streams whose ends come in one moment (the ends bunch: most summaries are
    queued): none is lost or doubled, every body is whole, and a scrape counts them all."""
    n = 40
    release = asyncio.Event()
    arrived = [asyncio.Event() for _ in range(n)]
    waits = [e.wait() for e in arrived]
    url = await start(await start_app(_released_together(release, arrived)))

    async def one(session: aiohttp.ClientSession) -> str:
        async with session.post(url + "/v1/chat/completions", json={"stream": True}) as resp:
            assert b"data: [DONE]" in await resp.read()
            return resp.headers["X-SSE-Proxy-Stream-Id"]

    async with aiohttp.ClientSession(connector=aiohttp.TCPConnector(limit=0)) as session:
        streams = [asyncio.create_task(one(session)) for _ in range(n)]
        async with asyncio.timeout(30):
            await asyncio.gather(*waits)  # every stream open, its end held
        release.set()
        ids = await asyncio.gather(*streams)
        async with session.get(url + "/_sse-proxy/metrics") as resp:
            metrics = await resp.text()
    counted = sum(
        float(line.rpartition(" ")[2])
        for line in metrics.splitlines()
        if line.startswith("sse_proxy_streams_total{")
    )
    assert counted == n, metrics
    for sid in ids:
        await wait_for(logs, "stream.summary", sid)
    summaries = [e["stream_id"] for e in logs if e["event"] == "stream.summary"]
    assert sorted(summaries) == sorted(ids)
