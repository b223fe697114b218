"""Telemetry over OTLP/HTTP: one OpenTelemetry span per proxied request, and the GenAI
streaming metrics.

Optional (``pip install 'sse-proxy[otel]'``, then ``--otlp-endpoint URL``). The span
continues the client's W3C ``traceparent`` when it sent one, carries the OpenTelemetry
GenAI semantic-convention attributes (provider, request and response model, usage,
finish reasons, ``gen_ai.request.stream``, ``gen_ai.response.time_to_first_chunk``) and the
proxy's own (``sse_proxy.*``: stream id, verdict, timings), and has one span event per
alert. Spans are batched and exported off the event loop by the SDK's worker thread.

The two streaming histograms of the conventions (:class:`StreamMetrics`) are kept here, not
by the SDK's meter: a stream adds its time to first chunk and its whole gap histogram
(which the stream keeps anyway, for the log line and Prometheus) once, at its end, where
the SDK would take one call per chunk. Without an endpoint nothing here runs.
"""

from __future__ import annotations

import asyncio
import operator
import os
import threading
import time
import uuid
from bisect import bisect_left
from collections.abc import Sequence
from functools import lru_cache
from typing import Any, Final
from urllib.parse import urlsplit

from aiohttp import web

from sse_proxy import __version__
from sse_proxy.cache import BoundedCache
from sse_proxy.core.alerts import Alert
from sse_proxy.core.dialects.registry import DIALECTS
from sse_proxy.errors import ConfigError
from sse_proxy.obs.metrics import GENAI_BUCKETS, GapHistogram
from sse_proxy.obs.redact import mask_message_text, redact_text, scrub_held
from sse_proxy.server.context import RequestContext
from sse_proxy.settings import Config

__all__ = [
    "TIME_PER_OUTPUT_CHUNK",
    "TIME_TO_FIRST_CHUNK",
    "Attrs",
    "RequestSpan",
    "StreamMetrics",
    "Tracing",
    "route_of",
    "server_of",
]

Attrs = tuple[tuple[str, Any], ...]
"""A set of metric attributes, as a hashable tuple of pairs."""
TIME_TO_FIRST_CHUNK: Final = "gen_ai.client.operation.time_to_first_chunk"
TIME_PER_OUTPUT_CHUNK: Final = "gen_ai.client.operation.time_per_output_chunk"
_EXPORT_INTERVAL_MS: Final = 60_000.0
"""The SDK's default export interval; ``OTEL_METRIC_EXPORT_INTERVAL`` (ms) changes it."""


@lru_cache(maxsize=8)
def route_of(upstream: str) -> str:
    """The ``route`` field: the upstream's host (and port when not the default)."""
    parts = urlsplit(upstream)
    host = parts.hostname or ""
    if parts.port is not None:
        return f"{host}:{parts.port}"
    return host


@lru_cache(maxsize=8)
def server_of(upstream: str) -> tuple[str, int]:
    """``server.address`` and ``server.port``: the upstream's host and port (the scheme's
    default port when the URL names none)."""
    parts = urlsplit(upstream)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    return parts.hostname or "", port


def _attr(value: Any) -> Any:
    """An attribute value OpenTelemetry accepts (str, bool, int, float or lists of those),
    every string scrubbed of the values the proxy holds: a span leaves the process as a log
    line does (an upstream may quote a key back in a model name, an id, an error)."""
    if type(value) is str:  # most are
        return scrub_held(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, list | tuple):
        return [scrub_held(str(v)) for v in value]
    return scrub_held(str(value))


_SPAN_FIELDS: Final = (
    ("request_model", "gen_ai.request.model"),
    ("response_model", "gen_ai.response.model"),
    ("response_id", "gen_ai.response.id"),
    ("finish_reasons", "gen_ai.response.finish_reasons"),
    ("input_tokens", "gen_ai.usage.input_tokens"),
    ("output_tokens", "gen_ai.usage.output_tokens"),
    *(
        (k, f"sse_proxy.{k}")
        for k in (
            "dialect",
            "verdict",
            "verdict_reason",
            "ended_by",
            "ttfb_ms",
            "ttft_ms",
            "gap_p99_ms",
            "gap_max_ms",
            "stalls",
            "events",
            "bytes",
            "cached_tokens",
            "reasoning_tokens",
        )
    ),
)
"""The summary fields a stream's span carries, and their attribute names."""


class RequestSpan:
    """The span of one proxied request; every method is safe to call in any order."""

    def __init__(
        self, span: Any, status_code: Any, path: str = "", *, keep_text: bool = False
    ) -> None:
        self._span = span
        self._path = path  # the request's: it tells Vertex AI from the Gemini API
        self._error = status_code.ERROR
        self._ended = False
        self._keep_text = keep_text  # --log-text: previews of message text as they are
        self._status: int | None = None

    def response(self, status: int) -> None:
        # set with the stream's summary (or at the end): one call on the span, not two
        self._status = status

    def alert(self, alert: Alert) -> None:
        """An alert as a span event (the stall timer's too)."""
        fields = alert.fields()
        if not self._keep_text and isinstance(fields.get("preview"), str):
            fields["preview"] = mask_message_text(str(fields["preview"]))
        for key in ("message", "error"):  # free text from the upstream, as in the log lines
            if isinstance(fields.get(key), str):
                fields[key] = redact_text(str(fields[key]))
        attrs = {k: _attr(v) for k, v in fields.items() if v is not None}
        attrs["level"] = str(alert.level)
        self._span.add_event(alert.name, attributes=attrs)

    def failed(self, kind: str, status: int) -> None:
        self._status = None
        self._span.set_attribute("error.type", kind)
        self._span.set_attribute("http.response.status_code", status)
        self._span.set_status(self._error, kind)

    def stream(self, fields: dict[str, Any], ttfc: float | None = None) -> None:
        """The stream's summary: GenAI attributes, the verdict and the timings; ``ttfc``:
        the seconds to its first chunk (:attr:`StreamEnd.ttfc`). Set in one call: each
        ``set_attribute`` takes the span's lock and checks it again."""
        get = fields.get
        attrs: dict[str, Any] = {"gen_ai.request.stream": True}
        if self._status is not None:
            attrs["http.response.status_code"] = self._status
            self._status = None
        if ttfc is not None:
            attrs["gen_ai.response.time_to_first_chunk"] = ttfc
        described = DIALECTS.get(str(get("dialect")))
        provider = described.provider_for(self._path) if described is not None else None
        operation = None
        if provider is not None:
            operation = provider.operation
            attrs["gen_ai.provider.name"] = provider.name
            attrs["gen_ai.system"] = provider.system
            attrs["gen_ai.operation.name"] = operation
        for key, name in _SPAN_FIELDS:
            value = get(key)
            if value is not None and value != []:
                attrs[name] = _attr(value)
        broken = get("verdict") == "broken"
        if broken:
            attrs["error.type"] = _attr(get("verdict_reason") or "broken")
        span = self._span
        span.set_attributes(attrs)
        model = get("model")
        if model:
            span.update_name(_attr(f"{operation or 'stream'} {model}"))
        if broken:
            span.set_status(self._error, _attr(get("verdict_reason")))

    def end(self) -> None:
        if not self._ended:
            self._ended = True
            if self._status is not None:
                self._span.set_attribute("http.response.status_code", self._status)
            self._span.end()


class _Series:
    """One histogram's cumulative counts for one set of attributes."""

    __slots__ = ("count", "counts", "max", "min", "sum")

    def __init__(self) -> None:
        self.counts = [0] * (len(GENAI_BUCKETS) + 1)
        self.count = 0
        self.sum = 0.0
        self.min = float("inf")
        self.max = float("-inf")

    def add(self, counts: Sequence[int], n: int, total: float, lo: float, hi: float) -> None:
        """A stream's bucket counts (``n`` values summing to ``total``, ``lo`` to ``hi``)."""
        self.counts = list(map(operator.add, self.counts, counts))
        self.count += n
        self.sum += total
        self.min = min(self.min, lo)
        self.max = max(self.max, hi)

    def add_one(self, value: float) -> None:
        self.counts[bisect_left(GENAI_BUCKETS, value)] += 1
        self.count += 1
        self.sum += value
        self.min = min(self.min, value)
        self.max = max(self.max, value)


class StreamMetrics:
    """``gen_ai.client.operation.time_to_first_chunk`` and ``...time_per_output_chunk``
    (seconds, the conventions' explicit buckets), cumulative per attribute set, exported over
    OTLP/HTTP every ``OTEL_METRIC_EXPORT_INTERVAL`` ms by a thread of their own and once more
    at shutdown. :meth:`record` runs on the event loop at each stream's end; the export
    takes a copy under the same lock."""

    def __init__(self, endpoint: str, resource: Any, *, exporter: Any = None) -> None:
        """``exporter``: an OTLP metric exporter other than the endpoint's (the bench's)."""
        if exporter is None:
            from opentelemetry.exporter.otlp.proto.http.metric_exporter import (
                OTLPMetricExporter,
            )

            url = endpoint.rstrip("/") + "/v1/metrics"
            exporter = OTLPMetricExporter(endpoint=url, timeout=5)
        self._exporter = exporter
        self._resource = resource
        self.attrs: BoundedCache[tuple[Any, ...], Attrs] = BoundedCache(1 << 20)
        """A stream's attributes by what decides them (the GenAIMetricsTap's)."""
        self._series: dict[tuple[str, Attrs], _Series] = {}
        self._lock = threading.Lock()
        self._started = time.time_ns()
        self._stop = threading.Event()
        try:
            interval = float(os.environ.get("OTEL_METRIC_EXPORT_INTERVAL", _EXPORT_INTERVAL_MS))
        except ValueError:
            interval = _EXPORT_INTERVAL_MS
        self._interval = max(interval, 100.0) / 1000
        self._thread = threading.Thread(target=self._run, name="sse-proxy-metrics", daemon=True)
        self._thread.start()

    def _get(self, name: str, attrs: tuple[tuple[str, Any], ...]) -> _Series:
        key = (name, attrs)
        series = self._series.get(key)
        if series is None:
            series = self._series[key] = _Series()
        return series

    def record(
        self, attrs: tuple[tuple[str, Any], ...], ttfc: float | None, gaps: GapHistogram
    ) -> None:
        """One stream: its time to first chunk, and every gap between its chunks."""
        with self._lock:
            if ttfc is not None:
                self._get(TIME_TO_FIRST_CHUNK, attrs).add_one(ttfc)
            if gaps.count:
                self._get(TIME_PER_OUTPUT_CHUNK, attrs).add(
                    gaps.genai_buckets(), gaps.count, gaps.sum, gaps.min, gaps.max
                )

    def collect(self) -> Any:
        """What the series hold now, as the SDK's ``MetricsData`` (cumulative)."""
        from opentelemetry.sdk.metrics.export import (
            AggregationTemporality,
            Histogram,
            HistogramDataPoint,
            Metric,
            MetricsData,
            ResourceMetrics,
            ScopeMetrics,
        )
        from opentelemetry.sdk.util.instrumentation import InstrumentationScope

        now = time.time_ns()
        points: dict[str, list[Any]] = {TIME_TO_FIRST_CHUNK: [], TIME_PER_OUTPUT_CHUNK: []}
        with self._lock:
            for (name, attrs), s in self._series.items():
                points[name].append(
                    HistogramDataPoint(
                        attributes=dict(attrs),
                        start_time_unix_nano=self._started,
                        time_unix_nano=now,
                        count=s.count,
                        sum=s.sum,
                        bucket_counts=list(s.counts),
                        explicit_bounds=list(GENAI_BUCKETS),
                        min=s.min,
                        max=s.max,
                    )
                )
        briefs = {
            TIME_TO_FIRST_CHUNK: "Time to receive the first chunk, from the request to the "
            "first chunk of the response stream.",
            TIME_PER_OUTPUT_CHUNK: "Time per output chunk after the first, from the end of the "
            "previous chunk to the end of this one.",
        }
        metrics = [
            Metric(
                name=name,
                description=briefs[name],
                unit="s",
                data=Histogram(
                    data_points=found,
                    aggregation_temporality=AggregationTemporality.CUMULATIVE,
                ),
            )
            for name, found in points.items()
            if found
        ]
        scope = ScopeMetrics(
            scope=InstrumentationScope("sse-proxy", __version__), metrics=metrics, schema_url=""
        )
        return MetricsData(
            resource_metrics=[
                ResourceMetrics(resource=self._resource, scope_metrics=[scope], schema_url="")
            ]
        )

    def export(self) -> None:
        if self._series:
            self._exporter.export(self.collect())

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.export()

    def shutdown(self) -> None:
        """Stop the thread, export what was recorded, close the exporter."""
        self._stop.set()
        self._thread.join(timeout=10)
        self.export()
        self._exporter.shutdown()


def _remote_parent(trace_id: str, span_id: str, sampled: int) -> Any:
    """The context of the client's ``traceparent``, for the request's span to continue."""
    from opentelemetry.trace import (
        NonRecordingSpan,
        SpanContext,
        TraceFlags,
        set_span_in_context,
    )

    remote = SpanContext(
        trace_id=int(trace_id, 16),
        span_id=int(span_id, 16),
        is_remote=True,
        trace_flags=TraceFlags(sampled),
    )
    return set_span_in_context(NonRecordingSpan(remote))


class Tracing:
    """The app's tracer and streaming metrics: off (``start`` returns ``None``, ``metrics``
    is ``None``) unless an endpoint is set."""

    def __init__(self, endpoint: str = "", *, keep_text: bool = False) -> None:
        self.endpoint = endpoint
        self.keep_text = keep_text
        self._provider: Any = None
        self._tracer: Any = None
        self._server_kind: Any = None
        self.metrics: StreamMetrics | None = None
        if endpoint:
            self._setup(endpoint)

    @classmethod
    def for_config(cls, cfg: Config) -> Tracing:
        return cls(cfg.otlp_endpoint, keep_text=cfg.log_text)

    def _setup(self, endpoint: str) -> None:
        # Imported here, not at the top: opentelemetry is the optional ``otel`` extra.
        try:
            from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
            from opentelemetry.sdk.resources import Resource
            from opentelemetry.sdk.trace import TracerProvider
            from opentelemetry.sdk.trace.export import BatchSpanProcessor
            from opentelemetry.trace import SpanKind, StatusCode
        except ImportError:
            raise ConfigError(
                "otlp_endpoint: tracing needs the otel extra (pip install 'sse-proxy[otel]')"
            ) from None

        resource = Resource.create(
            {
                "service.name": "sse-proxy",
                "service.version": __version__,
                # each worker's cumulative series are its own
                "service.instance.id": str(uuid.uuid4()),
            }
        )
        provider = TracerProvider(resource=resource)
        exporter = OTLPSpanExporter(endpoint=endpoint.rstrip("/") + "/v1/traces", timeout=5)
        # the SDK's cadence (OTEL_BSP_SCHEDULE_DELAY, 5 s by default): a post costs about
        # what several spans' encoding does, so fewer, fuller batches
        provider.add_span_processor(BatchSpanProcessor(exporter))
        self._provider = provider
        self._tracer = provider.get_tracer("sse-proxy")
        self._status_code = StatusCode
        self._server_kind = SpanKind.SERVER
        self.metrics = StreamMetrics(endpoint, resource)

    def start(
        self, request: web.Request, ctx: RequestContext, stream_id: str
    ) -> RequestSpan | None:
        """A span for this request, child of the client's traceparent if it sent one.

        A client without a trace gets a new one, and its id goes into ``ctx.trace_id``
        so that the log lines carry it too.
        """
        if self._tracer is None:
            return None
        parent = None
        if ctx.trace_id is not None and ctx.parent_span_id is not None:
            flags = int(ctx.traceparent[-2:], 16) if ctx.traceparent else 1
            parent = _remote_parent(ctx.trace_id, ctx.parent_span_id, flags & 1)
        attrs = {
            "http.request.method": request.method,
            "url.path": _attr(request.path),
            "server.address": ctx.route,
            "sse_proxy.stream_id": stream_id,
        }
        if ctx.client_request_id:
            attrs["sse_proxy.client_request_id"] = _attr(ctx.client_request_id)
        span = self._tracer.start_span(
            _attr(f"{request.method} {request.path}"),
            context=parent,
            kind=self._server_kind,
            attributes=attrs,
        )
        if ctx.trace_id is None:
            ctx.trace_id = format(span.get_span_context().trace_id, "032x")
        return RequestSpan(span, self._status_code, request.path, keep_text=self.keep_text)

    async def close(self, _app: web.Application | None = None) -> None:
        """Flush and stop off the event loop (the SDK's shutdown blocks on the export)."""
        if self._provider is not None or self.metrics is not None:
            await asyncio.to_thread(self.shutdown)

    def shutdown(self) -> None:
        """Export what is batched and recorded, then stop the exporters (at shutdown)."""
        if self._provider is not None:
            self._provider.shutdown()
            self._provider = None
            self._tracer = None
        if self.metrics is not None:
            self.metrics.shutdown()
            self.metrics = None
