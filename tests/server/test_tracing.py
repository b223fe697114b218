"""Traces: one OTLP/HTTP span per proxied request, checked by a real receiver on loopback.

The receiver (tests/support/otlp.py) is a plain aiohttp server that decodes what the proxy's
exporter posts with the official ``opentelemetry-proto`` messages; nothing in the exporter
is replaced.
"""

from __future__ import annotations

import asyncio

import aiohttp
import pytest

from sse_proxy.errors import ConfigError
from sse_proxy.server.run import start_proxy, stop_proxy
from sse_proxy.settings import Config
from sse_proxy.tools import fixtures
from tests.support.logs import LogEntries, wait_for
from tests.support.net import STREAM_ID
from tests.support.otlp import Receiver
from tests.support.otlp import attrs as _attrs
from tests.support.stack import StartApp

TRACE_ID = "4bf92f3577b34da6a3ce929d0e0e4736"
PARENT = "00f067aa0ba902b7"


@pytest.mark.asyncio
async def test_one_span_per_request_continuing_the_clients_trace(
    start_app: StartApp, mock_url: str, logs: LogEntries
) -> None:
    """GenAI attributes, the verdict, alerts as events; the client's trace is continued."""
    receiver = Receiver()
    endpoint = await start_app(receiver.app())
    runner, url = await start_proxy(Config(upstream=mock_url, port=0, otlp_endpoint=endpoint))
    try:
        async with aiohttp.ClientSession() as session:
            async with session.post(
                url + "/v1/chat/completions",
                json={"model": "gpt-test", "stream": True},
                headers={
                    "X-Mock-Fault": "truncated",
                    "X-Request-ID": "app-trace-1",
                    "traceparent": f"00-{TRACE_ID}-{PARENT}-01",
                },
            ) as resp:
                await resp.read()
                broken_sid = resp.headers[STREAM_ID]
            async with session.post(
                url + "/v1/messages", json={"model": "claude-test", "stream": True}
            ) as resp:
                await resp.read()
                clean_sid = resp.headers[STREAM_ID]
        clean_line = await wait_for(logs, "stream.summary", clean_sid)
    finally:
        await stop_proxy(runner)  # flushes the batch
    async with asyncio.timeout(10):
        while len(receiver.spans) < 2:
            receiver.arrived.clear()
            await receiver.arrived.wait()
    assert all(ct == "application/x-protobuf" for ct in receiver.content_types)
    by_sid = {_attrs(s.attributes)["sse_proxy.stream_id"]: s for s in receiver.spans}
    broken = by_sid[broken_sid]
    assert broken.trace_id.hex() == TRACE_ID
    assert broken.parent_span_id.hex() == PARENT
    attrs = _attrs(broken.attributes)
    assert attrs["gen_ai.provider.name"] == "openai"
    assert attrs["gen_ai.request.model"] == "gpt-test"
    assert attrs["gen_ai.response.model"] == "gpt-4o-mini-2024-07-18"
    assert attrs["gen_ai.response.finish_reasons"] == ["stop"]
    assert attrs["sse_proxy.client_request_id"] == "app-trace-1"
    assert attrs["sse_proxy.verdict"] == "broken"
    assert attrs["http.response.status_code"] == 200
    assert broken.name == "chat gpt-test"
    assert broken.status.code == 2  # STATUS_CODE_ERROR
    events = {e.name: _attrs(e.attributes) for e in broken.events}
    assert events["sse.truncated"]["reason"] == "no_terminal_marker"

    clean = by_sid[clean_sid]
    assert clean.trace_id.hex() == clean_line["trace_id"], "a new trace, logged too"
    assert not clean.parent_span_id
    attrs = _attrs(clean.attributes)
    assert attrs["gen_ai.provider.name"] == "anthropic"
    assert attrs["gen_ai.usage.input_tokens"] == 12
    assert attrs["gen_ai.usage.output_tokens"] > 0
    assert attrs["gen_ai.response.finish_reasons"] == ["end_turn"]
    assert attrs["sse_proxy.verdict"] == "ok"
    assert clean.status.code != 2
    assert not clean.events


@pytest.mark.asyncio
async def test_gemini_spans_name_the_google_provider_and_carry_the_stream_meta(
    start_app: StartApp, mock_url: str
) -> None:
    """Gemini API and Vertex AI paths: their own provider names, and model, response id,
    finish reason and usage read from the chunks (``modelVersion``, ``usageMetadata``)."""
    receiver = Receiver()
    endpoint = await start_app(receiver.app())
    runner, url = await start_proxy(Config(upstream=mock_url, port=0, otlp_endpoint=endpoint))
    gemini = "/v1beta/models/gemini-2.0-flash:streamGenerateContent"
    vertex = (
        "/v1/projects/p/locations/us-central1/publishers/google/models/"
        "gemini-2.0-flash:streamGenerateContent"
    )
    body = {"contents": [{"role": "user", "parts": [{"text": "hi"}]}]}
    sids: dict[str, str] = {}
    try:
        async with aiohttp.ClientSession() as session:
            for path in (gemini, vertex):
                async with session.post(url + path, params={"alt": "sse"}, json=body) as resp:
                    await resp.read()
                    sids[path] = resp.headers[STREAM_ID]
    finally:
        await stop_proxy(runner)
    async with asyncio.timeout(10):
        while len(receiver.spans) < 2:
            receiver.arrived.clear()
            await receiver.arrived.wait()
    by_sid = {_attrs(s.attributes)["sse_proxy.stream_id"]: s for s in receiver.spans}
    for path, (provider, system) in {
        gemini: ("gcp.gemini", "gemini"),
        vertex: ("gcp.vertex_ai", "vertex_ai"),
    }.items():
        span = by_sid[sids[path]]
        attrs = _attrs(span.attributes)
        assert attrs["gen_ai.provider.name"] == provider, path
        assert attrs["gen_ai.system"] == system, path
        assert attrs["gen_ai.operation.name"] == "generate_content"
        assert attrs["gen_ai.response.model"] == "gemini-2.0-flash"
        assert attrs["gen_ai.response.id"] == "mockGeminiResponse0001"
        assert attrs["gen_ai.response.finish_reasons"] == ["STOP"]
        assert attrs["gen_ai.usage.input_tokens"] == 12
        assert attrs["gen_ai.usage.output_tokens"] == len(fixtures.TOKENS)
        assert attrs["sse_proxy.dialect"] == "gemini"
        assert attrs["sse_proxy.verdict"] == "ok"
        assert span.name == "generate_content gemini-2.0-flash"


def test_bad_otlp_endpoint_is_a_config_error() -> None:
    """A malformed endpoint is one clear configuration error."""
    with pytest.raises(ConfigError, match="otlp_endpoint"):
        Config(upstream="http://127.0.0.1:1", otlp_endpoint="localhost:4318")


GENAI_BUCKETS = [
    0.01,
    0.02,
    0.04,
    0.08,
    0.16,
    0.32,
    0.64,
    1.28,
    2.56,
    5.12,
    10.24,
    20.48,
    40.96,
    81.92,
]


@pytest.mark.asyncio
async def test_genai_streaming_metrics_and_span_attributes_reach_a_real_receiver(
    start_app: StartApp, mock_url: str
) -> None:
    """The OpenTelemetry GenAI streaming conventions over OTLP/HTTP: the two histograms by
    their names, in seconds, with the conventions' buckets and attributes (the upstream as
    the server), cumulative; the span says it streamed and its time to first chunk, the
    same value the histogram holds for it."""
    receiver = Receiver()
    endpoint = await start_app(receiver.app())
    runner, url = await start_proxy(Config(upstream=mock_url, port=0, otlp_endpoint=endpoint))
    try:
        async with aiohttp.ClientSession() as session:
            async with session.post(
                url + "/v1/chat/completions",
                json={"model": "gpt-test", "stream": True},
                headers={"X-Mock-Delay": "0.001"},  # gaps between the chunks
            ) as resp:
                await resp.read()
                sid = resp.headers[STREAM_ID]
            async with session.post(url + "/v1/chat/completions", json={"model": "gpt-test"}):
                pass  # not a stream: no streaming metric
    finally:
        await stop_proxy(runner)  # exports the metrics once more, and the spans
    async with asyncio.timeout(10):
        while not receiver.metrics or not receiver.spans:
            receiver.arrived.clear()
            await receiver.arrived.wait()
    by_name = {m.name: (resource, m) for resource, m in receiver.metrics}
    host, port = mock_url.removeprefix("http://").split(":")
    want = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-test",
        "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
        "server.address": host,
        "server.port": int(port),
    }
    points = {}
    for name in (
        "gen_ai.client.operation.time_to_first_chunk",
        "gen_ai.client.operation.time_per_output_chunk",
    ):
        resource, metric = by_name[name]
        assert resource["service.name"] == "sse-proxy"
        assert metric.unit == "s"
        assert metric.WhichOneof("data") == "histogram"
        assert metric.histogram.aggregation_temporality == 2  # CUMULATIVE
        (point,) = metric.histogram.data_points
        assert _attrs(point.attributes) == want
        assert list(point.explicit_bounds) == GENAI_BUCKETS
        assert sum(point.bucket_counts) == point.count
        assert point.min <= point.max
        points[name] = point
    ttfc = points["gen_ai.client.operation.time_to_first_chunk"]
    assert ttfc.count == 1
    per_chunk = points["gen_ai.client.operation.time_per_output_chunk"]
    assert per_chunk.count >= 10  # a paced stream: one gap per read that completed events
    assert 0 < per_chunk.sum < 30
    (span,) = [s for s in receiver.spans if _attrs(s.attributes)["sse_proxy.stream_id"] == sid]
    attrs = _attrs(span.attributes)
    assert attrs["gen_ai.request.stream"] is True
    assert attrs["gen_ai.response.time_to_first_chunk"] == pytest.approx(ttfc.sum)
    assert 0 < ttfc.sum < 10


@pytest.mark.asyncio
async def test_streams_that_end_together_carry_their_summary_in_their_spans(
    start_app: StartApp, mock_url: str, logs: LogEntries, caplog: pytest.LogCaptureFixture
) -> None:
    """Streams that start and end together are summed up after their handlers return (the
    backlog); each span still ends with the stream's attributes, and the SDK warns of no
    attribute set on an ended span."""
    receiver = Receiver()
    endpoint = await start_app(receiver.app())
    runner, url = await start_proxy(Config(upstream=mock_url, port=0, otlp_endpoint=endpoint))

    async def one(session: aiohttp.ClientSession) -> str:
        async with session.post(
            url + "/v1/chat/completions", json={"model": "gpt-test", "stream": True}
        ) as resp:
            await resp.read()
            return resp.headers[STREAM_ID]

    try:
        async with aiohttp.ClientSession() as session:
            sids = await asyncio.gather(*(one(session) for _ in range(20)))
        for sid in sids:
            await wait_for(logs, "stream.summary", sid)
    finally:
        await stop_proxy(runner)
    async with asyncio.timeout(10):
        while len(receiver.spans) < len(sids):
            receiver.arrived.clear()
            await receiver.arrived.wait()
    spans = [_attrs(s.attributes) for s in receiver.spans]
    by_sid = {attrs["sse_proxy.stream_id"]: attrs for attrs in spans}
    assert set(by_sid) == set(sids)
    for sid in sids:
        assert by_sid[sid]["sse_proxy.verdict"] == "ok", by_sid[sid]
        assert by_sid[sid]["gen_ai.response.model"] == "gpt-4o-mini-2024-07-18"
    assert not [r for r in caplog.records if "ended span" in r.getMessage()]
