"""Production monitoring: which request, which model, what the user saw.

Real proxy, real upstream apps on loopback, a real aiohttp client; timing is driven by
events the test controls, never by sleeping to synchronise.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from sse_proxy.core.streammeta import META_FIELDS
from sse_proxy.server.context import RequestContext
from tests.core.test_streammeta import ANTHROPIC, EXPECTED, GEMINI, OPENAI, RESPONSES
from tests.support.logs import LogEntries, metric_sum, named, wait_for
from tests.support.net import STREAM_ID
from tests.support.stack import StartApp, StartProxy

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
PATHS = {
    "openai": "/v1/chat/completions",
    "responses": "/v1/responses",
    "anthropic": "/v1/messages",
    "gemini": "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
}
BODIES = {"openai": OPENAI, "responses": RESPONSES, "anthropic": ANTHROPIC, "gemini": GEMINI}
CONTEXT = ("client_request_id", "trace_id", "traceparent", "route", "model", "response_model")


def _with_broken_frame(body: bytes) -> bytes:
    """The stream with an invalid JSON frame after its first frame (one alert mid-stream)."""
    head, rest = body.split(b"\n\n", 1)
    return head + b"\n\ndata: {broken\n\n" + rest


def _sse_app(path: str, body: bytes, seen: list[dict[str, str]]) -> web.Application:
    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(dict(request.headers))
        await request.read()
        resp = web.StreamResponse(
            headers={"Content-Type": "text/event-stream", "x-request-id": "req_upstream_42"}
        )
        await resp.prepare(request)
        for i in range(0, len(body), 97):
            await resp.write(body[i : i + 97])
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_post(path, handler)
    return app


@pytest.mark.asyncio
@pytest.mark.parametrize("dialect", sorted(BODIES))
async def test_context_in_every_alert_and_the_summary(
    dialect: str,
    start_app: StartApp,
    start: StartProxy,
    session: aiohttp.ClientSession,
    logs: LogEntries,
) -> None:
    """Request id, trace, route and model on every alert; usage and verdict in the summary."""
    seen: list[dict[str, str]] = []
    upstream = await start_app(_sse_app(PATHS[dialect], _with_broken_frame(BODIES[dialect]), seen))
    url = await start(upstream)
    headers = {"X-Request-ID": f"app-{dialect}-7", "traceparent": TRACEPARENT}
    async with session.post(
        url + PATHS[dialect], json={"model": "my-model", "stream": True}, headers=headers
    ) as resp:
        await resp.read()
        sid = resp.headers[STREAM_ID]
    line = await wait_for(logs, "stream.summary", sid)
    # passed upstream unchanged
    assert seen[0]["X-Request-ID"] == f"app-{dialect}-7"
    assert seen[0]["traceparent"] == TRACEPARENT
    alerts = named(logs, "sse.invalid_json", sid)
    assert len(alerts) == 1
    route = "default"  # the plain --upstream is the route named "default"
    for entry in (*alerts, line):
        assert entry["client_request_id"] == f"app-{dialect}-7", entry
        assert entry["trace_id"] == "4bf92f3577b34da6a3ce929d0e0e4736"
        assert entry["traceparent"] == TRACEPARENT
        assert entry["route"] == route
        assert entry["model"] == "my-model"
        assert entry["upstream_request_id"] == "req_upstream_42"
    _, expected = EXPECTED[dialect]
    assert alerts[0]["response_model"] == expected.response_model
    assert {k: line[k] for k in META_FIELDS} == expected.fields()
    assert line["request_model"] == "my-model"
    assert line["verdict"] == "degraded"
    assert line["verdict_reason"] == "sse.invalid_json"
    assert line["log_level"] == "warning"
    assert line["ttft_ms"] is not None
    assert line["ttft_ms"] >= line["ttfb_ms"]
    if line["gap_max_ms"] is not None:  # None when every event came in one read
        assert line["gap_max_ms"] >= line["gap_p99_ms"] >= line["gap_p50_ms"] >= 0
    assert line["output_tokens_per_s"] is None or line["output_tokens_per_s"] > 0


@pytest.mark.asyncio
async def test_clean_stream_is_ok_at_info_and_model_from_first_event(
    start_app: StartApp, start: StartProxy, session: aiohttp.ClientSession, logs: LogEntries
) -> None:
    """No alerts: verdict ok, summary at info; a body without ``model`` uses the stream's."""
    url = await start(await start_app(_sse_app("/v1/chat/completions", OPENAI, [])))
    async with session.post(url + "/v1/chat/completions", data=b"not json") as resp:
        await resp.read()
        sid = resp.headers[STREAM_ID]
    line = await wait_for(logs, "stream.summary", sid)
    assert line["verdict"] == "ok"
    assert line["verdict_reason"] is None
    assert line["log_level"] == "info"
    assert line["model"] == "gpt-4o-2024-08-06"
    assert line["request_model"] is None
    assert line["client_request_id"] is None
    assert line["trace_id"] is None


async def _read_until_error(resp: aiohttp.ClientResponse) -> BaseException | None:
    try:
        await resp.read()
    except aiohttp.ClientPayloadError as exc:
        return exc
    return None


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["idle_timeout", "total_timeout"])
async def test_timeouts_are_the_proxys_not_the_upstreams(
    kind: str,
    start_app: StartApp,
    start: StartProxy,
    session: aiohttp.ClientSession,
    logs: LogEntries,
) -> None:
    """The proxy's own cut is sse.truncated reason idle/total_timeout, verdict broken."""
    release = asyncio.Event()

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        head, _ = OPENAI.split(b"\n\n", 1)
        await resp.write(head + b"\n\n")
        if kind == "idle_timeout":
            await release.wait()
        else:
            while not release.is_set():
                await resp.write(b": keepalive\n\n")
                await asyncio.sleep(0.05)
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    timeouts = (
        {"idle_timeout": 0.4}
        if kind == "idle_timeout"
        else {"total_timeout": 0.5, "idle_timeout": 5}
    )
    url = await start(await start_app(app), stall_threshold=0, **timeouts)
    try:
        async with session.post(url + "/v1/chat/completions", json={}) as resp:
            assert isinstance(await _read_until_error(resp), aiohttp.ClientPayloadError)
            sid = resp.headers[STREAM_ID]
    finally:
        release.set()
    line = await wait_for(logs, "stream.summary", sid)
    (truncated,) = named(logs, "sse.truncated", sid)
    assert truncated["reason"] == kind
    assert line["ended_by"] == "timeout"
    assert line["verdict"] == "broken"
    assert line["verdict_reason"] == kind
    assert line["log_level"] == "warning"


@pytest.mark.asyncio
async def test_stall_is_logged_while_it_happens_and_when_it_ends(
    start_app: StartApp, start: StartProxy, session: aiohttp.ClientSession, logs: LogEntries
) -> None:
    """sse.stall comes while the upstream is silent (the client still waits), then its end."""
    resume = asyncio.Event()
    frames = OPENAI.split(b"\n\n")

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(frames[0] + b"\n\n" + frames[1] + b"\n\n")
        await resume.wait()
        await resp.write(b"\n\n".join(frames[2:]))
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    url = await start(await start_app(app), stall_threshold=0.2)

    async def client() -> tuple[bytes, str]:
        async with session.post(url + "/v1/chat/completions", json={"model": "m"}) as resp:
            return await resp.read(), resp.headers[STREAM_ID]

    task = asyncio.create_task(client())
    try:
        stall = await wait_for(logs, "sse.stall", within=10)
        assert not task.done(), "the stall is logged while the stream is open"
        assert not named(logs, "stream.summary")
    finally:
        resume.set()
    body, sid = await task
    assert body.endswith(b"[DONE]\n\n")
    assert stall["stream_id"] == sid
    assert stall["log_level"] == "warning"
    assert stall["gap_ms"] >= stall["threshold_ms"] == 200
    assert stall["after_event"] == 2
    assert stall["model"] == "m"
    end = await wait_for(logs, "sse.stall_end", sid)
    assert end["gap_ms"] >= stall["gap_ms"]
    line = await wait_for(logs, "stream.summary", sid)
    assert line["stalls"] == 1
    assert line["alerts"]["sse.stall"] == 1
    assert line["verdict"] == "degraded"
    assert line["gap_max_ms"] >= end["gap_ms"] * 0.999


@pytest.mark.asyncio
async def test_ttft_is_the_first_text_not_the_first_byte(
    start_app: StartApp, start: StartProxy, session: aiohttp.ClientSession, logs: LogEntries
) -> None:
    """A role-only first chunk is the first byte; the first text comes after the client got it."""
    got_first = asyncio.Event()
    frames = OPENAI.split(b"\n\n")

    async def handler(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(frames[0] + b"\n\n")  # role and empty content: no text yet
        await got_first.wait()
        await resp.write(b"\n\n".join(frames[1:]))
        return resp

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    url = await start(await start_app(app))
    async with session.post(url + "/v1/chat/completions", json={}) as resp:
        first = await resp.content.readuntil(b"\n\n")
        assert b'"role"' in first
        got_first.set()
        await resp.read()
        sid = resp.headers[STREAM_ID]
    line = await wait_for(logs, "stream.summary", sid)
    assert line["ttft_ms"] > line["ttfb_ms"]


@pytest.mark.asyncio
async def test_metrics_verdicts_models_bounded_exemplars_no_created(
    start_app: StartApp, start: StartProxy, session: aiohttp.ClientSession, logs: LogEntries
) -> None:
    """Streams by verdict/dialect/model (model bounded), TTFT, gaps, tokens, exemplars."""
    url = await start(
        await start_app(_sse_app("/v1/chat/completions", _with_broken_frame(OPENAI), [])),
        metrics_max_models=1,
    )
    for i, model in enumerate(("first-model", "second-model", "first-model")):
        async with session.post(
            url + "/v1/chat/completions",
            json={"model": model},
            headers={"X-Request-ID": f"app-req-{i}"},
        ) as resp:
            await resp.read()
            await wait_for(logs, "stream.summary", resp.headers[STREAM_ID])
    async with session.get(url + "/_sse-proxy/metrics") as resp:
        text = await resp.text()
    assert "_created" not in text
    streams = "sse_proxy_streams_total"
    assert metric_sum(text, streams, verdict="degraded", dialect="openai") == 3
    assert metric_sum(text, streams, model="first-model") == 2
    assert metric_sum(text, streams, model="other") == 1
    assert metric_sum(text, streams, model="second-model") == 0
    ttft = "sse_proxy_time_to_first_token_seconds_count"
    assert metric_sum(text, ttft, model="first-model", dialect="openai") == 2
    gaps = sum(len(OPENAI.split(b"\n\n")) for _ in range(3))
    # one gap per read that completed events after the first such read: fewer than events
    gap_count = metric_sum(text, "sse_proxy_inter_event_gap_seconds_count")  # a count
    assert gap_count < gaps
    inf = metric_sum(text, "sse_proxy_inter_event_gap_seconds_bucket", le="+Inf")
    assert inf == gap_count
    assert metric_sum(text, "sse_proxy_output_tokens_total", model="first-model") == 14
    assert metric_sum(text, "sse_proxy_alerts_total", event="sse.invalid_json") == 3
    async with session.get(
        url + "/_sse-proxy/metrics", headers={"Accept": "application/openmetrics-text"}
    ) as resp:
        assert resp.headers["Content-Type"].startswith("application/openmetrics-text")
        om = await resp.text()
    exemplars = [ln for ln in om.splitlines() if ln.startswith(streams) and " # " in ln]
    assert any('request_id="app-req-2"' in ln for ln in exemplars), exemplars


def test_metric_names_list_is_complete() -> None:
    """METRIC_NAMES (used by the deploy/ checks) is what a registry really exposes."""
    from prometheus_client import generate_latest

    from sse_proxy.obs.metrics import METRIC_NAMES, Metrics
    from sse_proxy.server.timing import _GapHistogram

    m = Metrics()
    gaps = _GapHistogram()
    gaps.add(0.01)
    fields: dict[str, Any] = {
        "dialect": "openai",
        "model": "x",
        "verdict": "ok",
        "ended_by": "upstream_eof",
        "ttft_ms": 5.0,
        "output_tokens": 3,
        "input_tokens": 2,
        "alerts": {},
    }
    m.record_stream(fields, gaps, duration=0.5, alerts={"sse.stall": 2})
    m.requests.labels(kind="sse").inc()
    m.alerts.labels(event="sse.stall").inc()
    m.upstream_errors.labels(kind="upstream_timeout").inc()
    m.ttfb.observe(0.1)
    m.bytes.inc(1)
    m.events.inc(1)
    exported = {
        line.split("{")[0].split(" ")[0]
        for line in generate_latest(m.registry).decode().splitlines()
        if line and not line.startswith("#")
    }
    assert exported == set(METRIC_NAMES)
    assert json.dumps(sorted(exported))


@pytest.mark.parametrize("seed", range(5))
def test_gap_histogram_matches_exact_figures(seed: int) -> None:
    """Percentiles within one 12% bucket of the exact ones; bulk export equals observe()."""
    import math
    import random

    from prometheus_client import CollectorRegistry, Histogram, generate_latest

    from sse_proxy.obs.metrics import _observe_many
    from sse_proxy.server.timing import PROM_GAP_BUCKETS, _GapHistogram

    rng = random.Random(seed)
    values = [rng.lognormvariate(-4, 2) for _ in range(rng.randint(1, 3000))]
    hist = _GapHistogram()
    for v in values:
        hist.add(v)
    exact = sorted(values)
    assert hist.max == exact[-1]
    for q in (0.5, 0.99):
        want = exact[max(0, math.ceil(q * len(exact)) - 1)]  # the q-quantile, nearest rank
        got = hist.quantile(q)
        assert got is not None
        assert want <= got * 1.0001, (seed, q, want, got)
        assert got <= max(want * 1.13, 1e-4), (seed, q, want, got)
    regs = [CollectorRegistry(), CollectorRegistry()]
    one, bulk = (Histogram("g", "g", buckets=PROM_GAP_BUCKETS, registry=r) for r in regs)
    for v in values:
        one.observe(v)
    _observe_many(bulk, hist.prometheus_buckets(), hist.sum)

    def samples(reg: CollectorRegistry) -> list[str]:
        return [ln for ln in generate_latest(reg).decode().splitlines() if "_sum" not in ln]

    assert samples(regs[0]) == samples(regs[1]), f"seed {seed}"


@pytest.mark.asyncio
async def test_real_openai_sdk_stream_is_found_by_its_request_id(
    mock_url: str, start: StartProxy, logs: LogEntries
) -> None:
    """The official openai SDK (its own headers and body) through the proxy: n=2 with usage."""
    from openai import AsyncOpenAI

    from sse_proxy.tools import fixtures

    url = await start(mock_url)
    client = AsyncOpenAI(base_url=url + "/v1", api_key="sk-test", max_retries=0)
    try:
        stream = await client.chat.completions.create(
            model="gpt-4o-mini",
            messages=[{"role": "user", "content": "hi"}],
            stream=True,
            n=2,
            stream_options={"include_usage": True},
            extra_headers={"X-Request-ID": "sdk-req-1", "traceparent": TRACEPARENT},
        )
        text = [""] * 2
        async for chunk in stream:
            for choice in chunk.choices:
                text[choice.index] += choice.delta.content or ""
    finally:
        await client.close()
    assert text == [fixtures.expected_text("openai")] * 2
    line = next(e for e in await _summaries(logs) if e.get("client_request_id") == "sdk-req-1")
    assert line["model"] == "gpt-4o-mini"
    assert line["response_model"] == "gpt-4o-mini-2024-07-18"
    assert line["finish_reasons"] == ["stop", "stop"]
    assert line["input_tokens"] == 12
    assert line["output_tokens"] == 2 * len(fixtures.TOKENS)
    assert line["trace_id"] == TRACEPARENT[3:35]
    assert line["verdict"] == "ok"


async def _summaries(logs: LogEntries) -> list[Any]:
    await wait_for(logs, "stream.summary")
    return named(logs, "stream.summary")


def test_gap_histogram_counts_every_gap_of_a_long_stream_exactly() -> None:
    """Gaps are bucketed in batches: across several batches and a partial one, every gap
    is counted once, the max and the quantiles are those of the gaps themselves."""
    import itertools
    import random

    import structlog

    from sse_proxy.core import StreamReassembler
    from sse_proxy.obs.sink import AlertSink
    from sse_proxy.server.timing import GAP_BOUNDS, StreamObserver

    seed = 20261201
    rng = random.Random(seed)
    r = StreamReassembler("openai", emit_events=False, frame_ends=False, keep_text=False)
    sink = AlertSink(structlog.get_logger())
    obs = StreamObserver(r, sink, RequestContext(route="t"), stall_threshold=0, now=lambda: 0.0)
    frame = b'data: {"choices":[{"index":0,"delta":{"content":"x"}}]}\n\n'
    now, times = 1.0, []
    for i in range(700):  # 699 gaps: two full batches of 256 and a partial one
        if i:
            now += rng.choice((0.0005, 0.02, 0.02, 0.3, 2.5))
        times.append(now)
        r.feed(frame)
        obs.tick(now)
    gaps = [b - a for a, b in itertools.pairwise(times)]  # as the observer sees them
    fields = obs.summary_fields("upstream_eof", 0.0, now)
    assert obs.gaps.count == len(gaps) == 699, seed
    assert fields["gap_max_ms"] == pytest.approx(max(gaps) * 1000), seed
    by_bucket = [0] * (len(GAP_BOUNDS) + 1)
    for gap in gaps:
        by_bucket[next((k for k, b in enumerate(GAP_BOUNDS) if gap <= b), len(GAP_BOUNDS))] += 1
    assert obs.gaps.counts == by_bucket, seed
    p50_bound = min(b for b in GAP_BOUNDS if b >= sorted(gaps)[349])  # its bucket's top
    assert fields["gap_p50_ms"] == pytest.approx(1000 * p50_bound, abs=1e-3), seed


def test_a_request_body_is_parsed_once_and_only_when_its_model_is_asked_for(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The body's JSON is read after the upstream request went out, by whoever first needs
    it (the stream's logger, its observers), not on the way up."""
    import msgspec

    from sse_proxy.server.context import MODEL_BODY_LIMIT

    parsed: list[bytes] = []
    real = msgspec.json.decode

    def counting(data: bytes) -> Any:
        parsed.append(data)
        return real(data)

    monkeypatch.setattr(msgspec.json, "decode", counting)  # what the context parses with
    body = (
        b'{"model": "gpt-4o", "tools": [{"type": "function", "function": '
        b'{"name": "f", "parameters": {"type": "object"}}}]}'
    )
    ctx = RequestContext(route="t")
    ctx.read_body(body)
    assert parsed == []
    assert ctx.fields()["request_model"] == "gpt-4o"
    assert ctx.tool_schemas is not None
    assert ctx.request_model == "gpt-4o"
    assert parsed == [body]
    broken = RequestContext(route="t")
    broken.read_body(b'{"model": ')
    assert (broken.request_model, broken.tool_schemas) == (None, None)
    big = RequestContext(route="t")
    big.read_body(b'{"model": "m", "x": "' + b"y" * MODEL_BODY_LIMIT + b'"}')
    assert big.request_model is None  # over the limit: never kept


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_gaps_on_and_beside_every_bucket_bound_land_where_bisect_puts_them(seed: int) -> None:
    """The batch bucketing (sorted, a bucket's share found by searching) against the plain
    rule, one search per gap, for gaps exactly on each bound, a step either side of it,
    beyond the last, and repeated."""
    import math
    import random
    from bisect import bisect_left

    import structlog

    from sse_proxy.core import StreamReassembler
    from sse_proxy.obs.sink import AlertSink
    from sse_proxy.server.timing import GAP_BOUNDS, StreamObserver

    rng = random.Random(seed)
    edges = [g for b in GAP_BOUNDS for g in (math.nextafter(b, 0), b, math.nextafter(b, 9))]
    gaps = [rng.choice([*edges, 0.0, 1e4]) for _ in range(600)]
    r = StreamReassembler("openai", emit_events=False, frame_ends=False, keep_text=False)
    obs = StreamObserver(
        r, AlertSink(structlog.get_logger()), RequestContext(route="t"), stall_threshold=0,
        now=lambda: 0.0,
    )  # fmt: skip
    obs._new_gaps.extend(gaps)
    obs._bucket_gaps()
    expected = [0] * (len(GAP_BOUNDS) + 1)
    for gap in gaps:
        expected[bisect_left(GAP_BOUNDS, gap)] += 1
    assert obs.gaps.counts == expected, seed
    assert obs._gap_max == max(gaps), seed
