"""The monitor joins a resumed stream to its origin, and the chaos proxy drops streams.

Real streams through a real proxy in front of the real mock upstream: a reconnect with
``Last-Event-ID`` (raw SSE) or ``starting_after`` (Responses background mode) for a stream
the proxy saw is logged as its continuation (``stream.resumed``, the summary's
``resumed_from``, cursor and gap), a cursor behind or past what the origin delivered is an
alert, resumes are counted; the chaos proxy cuts its client off (``fault=drop``), counts the
cursor from what the client got, and answers a reconnect itself for ``drop_204``. One test
runs ``sse-proxy serve`` as a subprocess.
"""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from sse_proxy.core import StreamReassembler
from sse_proxy.names import CHAOS_HEADER
from sse_proxy.server.keys import METRICS
from sse_proxy.tools import fixtures
from sse_proxy.tools.mock_resume import SERVED
from sse_proxy.tools.mock_upstream import mock_upstream, start_mock_upstream
from tests.support.cli import ServeProcess, http_get
from tests.support.logs import LogEntries, metric_sum, named, summary, wait_for
from tests.support.net import STREAM_ID, free_port
from tests.support.stack import StartProxy

BACKGROUND = {"model": "m", "input": "hi", "stream": True, "background": True}


async def _read(
    url: str, headers: dict[str, str] | None = None, method: str = "GET", **kw: Any
) -> tuple[int, str, bytes, bool]:
    """(status, stream id, body, whether it ended cleanly)."""
    async with (
        aiohttp.ClientSession() as session,
        session.request(method, url, headers=headers or {}, **kw) as resp,
    ):
        body = b""
        clean = True
        try:
            async for chunk in resp.content.iter_any():
                body += chunk
        except aiohttp.ClientPayloadError:
            clean = False
        return resp.status, resp.headers.get(STREAM_ID, ""), body, clean


def _reader(body: bytes, dialect: str) -> StreamReassembler:
    r = StreamReassembler(dialect)
    r.feed(body)
    return r


def _lines(serve: ServeProcess, event: str, sid: str) -> list[dict[str, Any]]:
    return [e for e in serve.lines() if e.get("event") == event and e.get("stream_id") == sid]


@pytest.mark.asyncio
async def test_a_resumed_stream_through_serve_is_logged_as_the_continuation_of_its_origin() -> None:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    async with mock_upstream(fault="drop", seed=4) as upstream:
        with ServeProcess("--upstream", upstream, "--port", str(port)) as serve:
            await asyncio.to_thread(serve.wait_for, "proxy.started")
            status, origin, body, clean = await _read(base + "/v1/text")
            assert status == 200
            assert not clean
            last = _reader(body, "text").last_event_id
            assert last is not None
            status, resumed, body, clean = await _read(base + "/v1/text", {"Last-Event-ID": last})
            assert status == 200
            assert clean
            status, _, _, _ = await _read(base + "/v1/text", {"Last-Event-ID": "121"})
            assert status == 204
            # Responses, background mode: the resume names the response, not a path
            _, first, body, _ = await _read(base + "/v1/responses", method="POST", json=BACKGROUND)
            reader = _reader(body, "responses")
            rid, cursors = reader.stream_meta().response_id, reader.cursors
            assert rid is not None
            assert cursors is not None
            target = f"{base}/v1/responses/{rid}?stream=true&starting_after={cursors[1]}"
            _, again, _, clean = await _read(target)
            assert clean
            await asyncio.to_thread(serve.wait_for, "stream.summary", 4)
            _, metrics = await asyncio.to_thread(http_get, f"{base}/_sse-proxy/metrics")
    joined = _lines(serve, "stream.resumed", resumed)
    assert len(joined) == 1
    line = joined[0]
    assert line["resumed_from"] == origin == line["resume_origin"]
    assert line["resume_cursor"] == last
    assert line["resume_kind"] == "last_event_id"
    assert line["resume_match"] == "exact"
    assert line["resume_events"] == 0
    assert 0 <= line["resume_gap_s"] < 10
    assert line["resume_attempt"] == 1
    summed = _lines(serve, "stream.summary", resumed)[0]
    assert summed["resumed_from"] == origin
    assert summed["verdict"] == "ok"
    assert summed["answer_text_length"] == len(fixtures.MESSAGE)
    assert _lines(serve, "stream.summary", origin)[0]["ended_by"] == "upstream_error"
    responses = _lines(serve, "stream.summary", again)[0]
    assert responses["resumed_from"] == first
    assert responses["resume_kind"] == "starting_after"
    assert responses["resume_match"] == "exact"
    assert responses["verdict"] == "ok"
    assert responses["resume_cursor"] == str(cursors[1])
    text = metrics.decode()
    assert metric_sum(text, "sse_proxy_resumes_total", match="exact") == 3  # the 204 too


@pytest.mark.asyncio
async def test_a_cursor_behind_or_past_what_the_origin_delivered_is_an_alert(
    start: StartProxy, logs: LogEntries
) -> None:
    runner, upstream = await start_mock_upstream(fault="drop", seed=2)
    try:
        url = await start(upstream)
        _, origin, body, _ = await _read(url + "/v1/text")
        reader = _reader(body, "text")
        last, cut = reader.last_event_id, reader.pending_event_id
        assert last is not None
        assert cut == str(int(last) + 1)
        _, behind, _, _ = await _read(url + "/v1/text", {"Last-Event-ID": "3"})
        _, past, _, _ = await _read(url + "/v1/text", {"Last-Event-ID": cut})
        _, restart, _, _ = await _read(url + "/v1/text?resumable=1")  # no cursor: not joined
        for sid in (behind, past, restart):
            await wait_for(logs, "stream.summary", sid)
        overlap = named(logs, "sse.resume_overlap", behind)
        assert len(overlap) == 1
        assert overlap[0]["resumed_from"] == origin
        assert overlap[0]["cursor"] == "3"
        assert overlap[0]["events"] == int(last) - 3
        assert summary(logs, behind)["verdict"] == "degraded"
        gap = named(logs, "sse.resume_gap", past)
        assert len(gap) == 1
        assert gap[0]["events"] == 1
        assert gap[0]["delivered"] == last
        assert summary(logs, past)["verdict"] == "broken"
        assert summary(logs, past)["verdict_reason"] == "resume_gap"
        assert "resumed_from" not in summary(logs, restart)
    finally:
        await runner.cleanup()


@pytest.mark.asyncio
async def test_the_chaos_proxy_drops_its_client_and_the_upstream_resumes_it(
    start: StartProxy, logs: LogEntries
) -> None:
    """``fault=drop``: the proxy cuts the client off inside an event and forwards the
    reconnect; the cursor it remembers is what the client got, not what it read."""
    runner, upstream = await start_mock_upstream(resumable=True)
    try:
        url = await start(upstream, allow_chaos_header=True)
        chaos = {CHAOS_HEADER: "fault=drop; seed=5"}
        _, origin, body, clean = await _read(url + "/v1/text", chaos)
        assert not clean
        reader = _reader(body, "text")
        last = reader.last_event_id
        assert last is not None
        assert reader.pending_event_id == str(int(last) + 1)
        assert 8 <= int(last) <= 24
        await wait_for(logs, "stream.summary", origin)
        assert summary(logs, origin)["ended_by"] == "dropped"
        headers = {**chaos, "Last-Event-ID": last}
        _, resumed, body, clean = await _read(url + "/v1/text", headers)  # attempt 1: uncut
        assert clean
        assert reader.text + _reader(body, "text").text == fixtures.MESSAGE
        await wait_for(logs, "stream.summary", resumed)
        assert summary(logs, resumed)["resume_match"] == "exact"
        assert summary(logs, resumed)["resumed_from"] == origin
        # drop_204: the proxy answers the reconnect itself
        chaos = {CHAOS_HEADER: "fault=drop_204; seed=5"}
        _, second, body, _ = await _read(url + "/v1/text", chaos)
        await wait_for(logs, "stream.summary", second)
        last = _reader(body, "text").last_event_id
        assert last is not None
        status, _, body, _ = await _read(url + "/v1/text", {**chaos, "Last-Event-ID": last})
        assert (status, body) == (204, b"")
        assert named(logs, "chaos.resume_refused")
        assert runner.app[SERVED][-1].cursor is None  # the 204 never reached the upstream
    finally:
        await runner.cleanup()


@pytest.mark.asyncio
async def test_a_resume_goes_to_its_routes_upstream_with_the_held_key(
    start: StartProxy, logs: LogEntries, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A cursor chooses nothing: the resume is forwarded like any request, to the route's
    upstream, which gets the key the proxy holds (and requires it)."""
    monkeypatch.setenv("TEST_RESUME_KEY", "sk-held-for-resume")
    runner, upstream = await start_mock_upstream(fault="drop", api_key="sk-held-for-resume")
    try:
        url = await start(upstream, upstream_headers=(("x-api-key", "${TEST_RESUME_KEY}"),))
        status, origin, body, _ = await _read(url + "/v1/responses", method="POST", json=BACKGROUND)
        assert status == 200
        reader = _reader(body, "responses")
        rid, cursors = reader.stream_meta().response_id, reader.cursors
        assert cursors is not None
        target = f"{url}/v1/responses/{rid}?stream=true&starting_after={cursors[1]}"
        status, resumed, body, clean = await _read(target)
        assert status == 200
        assert clean
        await wait_for(logs, "stream.summary", resumed)
        assert summary(logs, resumed)["resumed_from"] == origin
        proxy = start.runner_for(url)
        text = proxy.app[METRICS].render().decode()
        assert metric_sum(text, "sse_proxy_resumes_total", match="exact") == 1
    finally:
        await runner.cleanup()


@pytest.mark.asyncio
async def test_a_gemini_interaction_resumed_by_last_event_id_is_joined_and_dropped_once(
    start: StartProxy, logs: LogEntries
) -> None:
    """An interaction resumed with ``last_event_id`` is the continuation of the stream that
    was cut (kind ``event_id``, the cursor the last whole event's), one from an older
    event overlaps; through the chaos proxy, the resume is attempt 1 and is not cut again."""
    runner, upstream = await start_mock_upstream(fault="drop", seed=4)
    try:
        url = await start(upstream, allow_chaos_header=True)
        create = {"model": "gemini-2.5-flash", "input": "hi", "stream": True}
        _, origin, body, clean = await _read(
            url + "/v1beta/interactions", method="POST", json=create
        )
        assert not clean
        reader = _reader(body, "gemini")
        iid, last = reader.stream_meta().response_id, reader.event_cursor
        assert iid is not None
        assert last is not None
        target = f"{url}/v1beta/interactions/{iid}?stream=true&last_event_id={last}"
        _, resumed, body, clean = await _read(target)
        assert clean
        assert reader.text + _reader(body, "gemini").text == fixtures.MESSAGE
        older = f"{url}/v1beta/interactions/{iid}?stream=true&last_event_id=evt_000003"
        _, again, _, _ = await _read(older)
        for sid in (origin, resumed, again):
            await wait_for(logs, "stream.summary", sid)
        line = summary(logs, resumed)
        assert line["resumed_from"] == origin == line["resume_origin"]
        assert (line["resume_kind"], line["resume_cursor"]) == ("event_id", last)
        assert (line["resume_match"], line["resume_attempt"]) == ("exact", 1)
        assert line["answer_text_length"] == len(fixtures.MESSAGE)
        assert line["verdict"] == "ok"
        assert summary(logs, again)["resume_match"] == "unknown"  # opaque ids: not ordered
        assert summary(logs, again)["resumed_from"] == resumed
        # the chaos proxy cuts the first stream only: the resume is attempt 1
        chaos = {CHAOS_HEADER: "fault=drop; seed=5"}
        await runner.cleanup()
        runner, upstream = await start_mock_upstream()
        url = await start(upstream, allow_chaos_header=True)
        _, first, body, clean = await _read(
            url + "/v1/interactions", chaos, method="POST", json=create
        )
        assert not clean
        reader = _reader(body, "gemini")
        iid, last = reader.stream_meta().response_id, reader.event_cursor
        target = f"{url}/v1/interactions/{iid}?stream=true&last_event_id={last}"
        _, second, body, clean = await _read(target, chaos)
        assert clean
        assert reader.text + _reader(body, "gemini").text == fixtures.MESSAGE
        await wait_for(logs, "stream.summary", second)
        assert summary(logs, first)["ended_by"] == "dropped"
        assert summary(logs, second)["resume_match"] == "exact"
        assert summary(logs, second)["resumed_from"] == first
    finally:
        await runner.cleanup()
