"""Prometheus metrics, fed from alerts and stream summaries.

Each proxy app owns its own registry, so several apps (tests, the demo) never collide.
With ``PROMETHEUS_MULTIPROC_DIR`` set (``serve --workers N``), values are aggregated
across worker processes by prometheus-client's multiprocess mode. No ``_created`` series
are exported. The ``model`` label is bounded (see :class:`ModelLabels`). Streams carry an
exemplar with the client's request id and trace id (OpenMetrics exposition only), which is
how a bad stream in a graph leads back to its log lines and its trace.
"""

from __future__ import annotations

import os
import re
from collections import Counter as Tally
from collections.abc import Callable, Mapping
from typing import Any, Protocol

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    disable_created_metrics,
    generate_latest,
    multiprocess,
)
from prometheus_client.exposition import choose_encoder

from sse_proxy.cache import BoundedCache, size_of
from sse_proxy.obs.redact import scrub_held

__all__ = ["GAP_BUCKETS", "GENAI_BUCKETS", "METRIC_NAMES", "Metrics", "ModelLabels"]

disable_created_metrics()  # type: ignore[no-untyped-call]

OTHER = "other"
_LABEL_SAFE = re.compile(r"[^A-Za-z0-9._:/@+-]")
GAP_BUCKETS = (0.001, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0)
"""Inter-event gap buckets (seconds)."""
GENAI_BUCKETS = (
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
)
"""The explicit bucket boundaries the OpenTelemetry GenAI conventions give their client
durations, the two streaming histograms among them (seconds)."""
_TTFT_BUCKETS = (0.05, 0.1, 0.25, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 20, 30, 60)


class GapHistogram(Protocol):
    """What the metrics need of a stream's gap histogram."""

    count: int
    sum: float
    min: float
    max: float

    def prometheus_buckets(self) -> list[int]: ...

    def genai_buckets(self) -> list[int]: ...


class ModelLabels:
    """Bounded ``model`` label values: an allow-list, or the first ``max_models`` seen.

    Everything else, and every model when neither is set, is ``other``; so is a stream
    without a known model. Values are cut to 64 safe characters.
    """

    def __init__(self, allow: str = "", max_models: int = 20) -> None:
        self.allow = frozenset(m.strip() for m in allow.split(",") if m.strip())
        self.max_models = max_models
        self.seen: set[str] = set()

    def __call__(self, model: str | None) -> str:
        if not model:
            return OTHER
        # scrubbed first: an upstream may quote a key back as the model's name
        label = _LABEL_SAFE.sub("_", scrub_held(model))[:64]
        if self.allow:
            return label if label in self.allow else OTHER
        if label in self.seen:
            return label
        if len(self.seen) < self.max_models:
            self.seen.add(label)
            return label
        return OTHER


_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_DURATION_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)


class Metrics:
    """The proxy's counters, gauges and histograms in one registry."""

    def __init__(self, *, models: str = "", max_models: int = 20) -> None:
        self.registry = CollectorRegistry()
        self.model_label = ModelLabels(models, max_models)
        self.totals: Tally[str] = Tally()
        """Plain per-process totals for the shutdown line (streams by verdict, alerts, bytes)."""
        self._children: dict[tuple[Any, ...], Any] = {}
        self._series: BoundedCache[tuple[str, str, str, str | None], _StreamSeries] = BoundedCache(
            1 << 20, max_entries=_MAX_SERIES
        )
        """The children of each label set of finished streams, by the model as the stream
        named it (the client's, when the upstream echoes it: bounded in bytes)."""
        self._route_streams: dict[tuple[str, str], Any] = {}  # (routes and endings: bounded)
        reg = self.registry
        self.requests = Counter(
            "sse_proxy_requests",
            "Requests proxied, by kind (sse or other).",
            ["kind"],
            registry=reg,
        )
        self.streams = Counter(
            "sse_proxy_streams",
            "SSE streams finished, by verdict (ok, degraded, broken), how they ended, "
            "dialect and model.",
            ["verdict", "ended_by", "dialect", "model"],
            registry=reg,
        )
        self.active = Gauge(
            "sse_proxy_streams_active",
            "SSE streams being relayed now.",
            registry=reg,
            multiprocess_mode="livesum",
        )
        # Set from the supervisor's shared counter at each scrape (worker_counts); every
        # worker reports the same value, and a dead worker's file is dropped by the parent.
        self.worker_counts: Callable[[], Mapping[str, int]] | None = None
        self.workers_live = Gauge(
            "sse_proxy_workers_live",
            "Worker processes running now (1 without --workers).",
            registry=reg,
            multiprocess_mode="livemax",
        )
        self.workers_configured = Gauge(
            "sse_proxy_workers_configured",
            "Worker processes configured (--workers).",
            registry=reg,
            multiprocess_mode="livemax",
        )
        self.worker_restarts = Gauge(
            "sse_proxy_worker_restarts",
            "Worker exits the supervising parent handled since it started (kept by the "
            "parent, a gauge here: use delta(), not rate()).",
            registry=reg,
            multiprocess_mode="livemax",
        )
        self.bytes = Counter(
            "sse_proxy_stream_bytes", "Bytes relayed in SSE streams (as received).", registry=reg
        )
        self.events = Counter("sse_proxy_events", "SSE events dispatched.", registry=reg)
        self.alerts = Counter(
            "sse_proxy_alerts",
            "Alerts by event name (exact, never rate-limited): occurrences, so one stream "
            "with 50 bad bytes counts 50. For shares of streams use "
            "sse_proxy_streams_with_alert_total.",
            ["event"],
            registry=reg,
        )
        self.streams_with_alert = Counter(
            "sse_proxy_streams_with_alert",
            "SSE streams finished that had at least one alert of this kind (once per "
            "stream, however many times it fired): divide by sse_proxy_streams_total.",
            ["event"],
            registry=reg,
        )
        self.stalls_kept_alive = Counter(
            "sse_proxy_stalls_kept_alive",
            "Stalls (sse.stall) during which only comments or ping events arrived: a client "
            "whose only deadline is a read timeout waits through them. All stalls and the "
            "bodies that stayed open after their terminal marker (sse.linger) are in "
            "sse_proxy_alerts_total.",
            registry=reg,
        )
        self.upstream_errors = Counter(
            "sse_proxy_upstream_errors", "Upstream failures, by kind.", ["kind"], registry=reg
        )
        # Per route (the route name is the prefix, or "default" for --upstream).
        self.route_requests = Counter(
            "sse_proxy_route_requests", "Requests by route.", ["route"], registry=reg
        )
        self.route_streams = Counter(
            "sse_proxy_route_streams",
            "SSE streams finished, by route and how they ended.",
            ["route", "ended_by"],
            registry=reg,
        )
        self.resumes = Counter(
            "sse_proxy_resumes",
            "Requests that resume a stream (a cursor: Last-Event-ID, starting_after), by "
            "route and how the cursor meets what the stream it resumes delivered: exact, "
            "overlap, gap, replay, unknown, or unseen (a stream this process did not see).",
            ["route", "match"],
            registry=reg,
        )
        self.route_upstream_errors = Counter(
            "sse_proxy_route_upstream_errors",
            "Upstream failures, by route and kind.",
            ["route", "kind"],
            registry=reg,
        )
        self.ws_sessions = Counter(
            "sse_proxy_websocket_sessions",
            "WebSocket sessions passed through, by route and close code.",
            ["route", "close_code"],
            registry=reg,
        )
        self.ws_messages = Counter(
            "sse_proxy_websocket_messages",
            "WebSocket messages passed through, by route and direction.",
            ["route", "direction"],
            registry=reg,
        )
        self.recordings_written = Counter(
            "sse_proxy_recordings_written",
            "Stream recordings written to the --record folder.",
            registry=reg,
        )
        self.recordings_dropped = Counter(
            "sse_proxy_recordings_dropped",
            "Stream recordings deleted or never written, by reason: max_files and "
            "max_bytes (the folder's bounds, oldest first), writer_behind (too many "
            "waiting to be written).",
            ["reason"],
            registry=reg,
        )
        self.ttfb = Histogram(
            "sse_proxy_time_to_first_byte_seconds",
            "From forwarding the request to the first upstream body byte.",
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )
        self.duration = Histogram(
            "sse_proxy_stream_duration_seconds",
            "SSE stream duration, by dialect.",
            ["dialect"],
            buckets=_DURATION_BUCKETS,
            registry=reg,
        )
        self.ttft = Histogram(
            "sse_proxy_time_to_first_token_seconds",
            "From forwarding the request to the first message-text delta, by dialect and model.",
            ["dialect", "model"],
            buckets=_TTFT_BUCKETS,
            registry=reg,
        )
        self.gap = Histogram(
            "sse_proxy_inter_event_gap_seconds",
            "Time between successive upstream reads that completed events, by dialect.",
            ["dialect"],
            buckets=GAP_BUCKETS,
            registry=reg,
        )
        self.output_tokens = Counter(
            "sse_proxy_output_tokens",
            "Output tokens as reported by the upstream's usage, by dialect and model.",
            ["dialect", "model"],
            registry=reg,
        )
        self.input_tokens = Counter(
            "sse_proxy_input_tokens",
            "Input tokens as reported by the upstream's usage, by dialect and model.",
            ["dialect", "model"],
            registry=reg,
        )

    def child(self, metric: Any, **labels: Any) -> Any:
        """``metric.labels(**labels)``, found once: prometheus-client's own lookup sorts
        the names, checks them and takes a lock on every call, several times a stream.
        The label values are bounded (routes, dialects, verdicts, alert names, the models
        :class:`ModelLabels` lets through), so this map is too."""
        key = (id(metric), *labels.items())
        found = self._children.get(key)
        if found is None:
            found = self._children[key] = metric.labels(**labels)
        return found

    def record_stream(
        self,
        fields: Mapping[str, Any],
        gaps: GapHistogram,
        duration: float,
        alerts: Mapping[str, int] | None = None,
    ) -> None:
        """One finished stream's summary fields into the counters and histograms."""
        get = fields.get
        verdict = str(get("verdict"))
        series = self._stream_series(
            verdict, str(get("ended_by")), str(get("dialect")), get("model")
        )
        request_id, trace_id = get("client_request_id"), get("trace_id")
        exemplar = None
        if request_id or trace_id:
            exemplar = {
                k: str(v)[:48] for k, v in (("request_id", request_id), ("trace_id", trace_id)) if v
            }
        series.streams.inc(exemplar=exemplar)
        series.duration.observe(duration)
        ttft = get("ttft_ms")
        if ttft is not None:
            series.labelled(self.ttft).observe(ttft / 1000, exemplar=exemplar)
        if gaps.count:
            _observe_many(series.gap, gaps.prometheus_buckets(), gaps.sum)
        output_tokens, input_tokens = get("output_tokens"), get("input_tokens")
        if output_tokens:
            series.labelled(self.output_tokens).inc(output_tokens)
        if input_tokens:
            series.labelled(self.input_tokens).inc(input_tokens)
        totals = self.totals
        totals["streams"] += 1
        totals["verdict." + verdict] += 1
        totals["bytes"] += int(get("bytes") or 0)
        kept_alive = get("stalls_kept_alive")
        if kept_alive:
            self.stalls_kept_alive.inc(kept_alive)
        if alerts:
            for name, count in alerts.items():
                if count:
                    self.child(self.streams_with_alert, event=name).inc()
                    totals["alert." + name] += count

    def _stream_series(
        self, verdict: str, ended_by: str, dialect: str, model: str | None
    ) -> _StreamSeries:
        """The children a finished stream of these labels counts in, found once: a stream's
        end otherwise looked each one up by its labels (a kwargs dict, a key, a lookup)."""
        key = (verdict, ended_by, dialect, model)
        series = self._series.get(key)
        if series is None:
            label = self.model_label(model)
            series = _StreamSeries(
                self.child(
                    self.streams, verdict=verdict, ended_by=ended_by, dialect=dialect, model=label
                ),
                self.child(self.duration, dialect=dialect),
                self.child(self.gap, dialect=dialect),
                {"dialect": dialect, "model": label},
                self,
            )
            self._series.put(key, series, size_of(verdict, ended_by, dialect, model or ""))
        return series

    def route_stream(self, route: str, ended_by: str) -> Any:
        """``route_streams``' child for a route and an ending (a tuple key: no keywords)."""
        key = (route, ended_by)
        found = self._route_streams.get(key)
        if found is None:
            found = self._route_streams[key] = self.route_streams.labels(
                route=route, ended_by=ended_by
            )
        return found

    def count_total(self, name: str) -> None:
        self.totals[name] += 1

    def shutdown_fields(self) -> dict[str, Any]:
        """Totals for the ``proxy.totals`` line logged at shutdown."""
        t = self.totals
        return {
            "streams": t["streams"],
            "verdicts": {k[8:]: v for k, v in sorted(t.items()) if k.startswith("verdict.")},
            "alerts": {k[6:]: v for k, v in sorted(t.items()) if k.startswith("alert.")},
            "bytes": t["bytes"],
            "upstream_errors": t["upstream_errors"],
        }

    def _refresh(self) -> None:
        if self.worker_counts is not None:
            counts = self.worker_counts()
            self.workers_live.set(counts["live"])
            self.workers_configured.set(counts["configured"])
            self.worker_restarts.set(counts.get("restarts", 0))

    def render_for(self, accept: str | None) -> tuple[bytes, str]:
        """Exposition in the format the scraper asks for (OpenMetrics carries exemplars)."""
        self._refresh()
        encoder, content_type = choose_encoder(accept or "")
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            reg = CollectorRegistry()
            multiprocess.MultiProcessCollector(reg)  # type: ignore[no-untyped-call]
            return encoder(reg), content_type
        return encoder(self.registry), content_type

    def render(self) -> bytes:
        """The exposition text; aggregated across workers in multiprocess mode."""
        self._refresh()
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            reg = CollectorRegistry()
            multiprocess.MultiProcessCollector(reg)  # type: ignore[no-untyped-call]
            return generate_latest(reg)
        return generate_latest(self.registry)


_MAX_SERIES = 4096


class _StreamSeries:
    """The children of one label set of finished streams (:meth:`Metrics.record_stream`);
    the by-model ones (TTFT, tokens) made when first counted, so that a series appears in
    the exposition only once it has a value, as with ``labels()``."""

    __slots__ = ("_by_model", "_labels", "_metrics", "duration", "gap", "streams")

    def __init__(
        self, streams: Any, duration: Any, gap: Any, labels: dict[str, str], metrics: Metrics
    ) -> None:
        self.streams = streams
        self.duration = duration
        self.gap = gap
        self._labels = labels
        self._metrics = metrics
        self._by_model: dict[Any, Any] = {}

    def labelled(self, metric: Any) -> Any:
        """``metric``'s child for this dialect and model (looked up once per series)."""
        found = self._by_model.get(metric)
        if found is None:
            found = self._by_model[metric] = self._metrics.child(metric, **self._labels)
        return found


def _observe_many(child: Any, buckets: list[int], total: float) -> None:
    """Add a whole stream's gap counts to a histogram in one go, not one observe() per gap.

    prometheus-client has no bulk observe; its histogram keeps one (non-cumulative) value
    per bucket and one sum, which is what observe() increments. The exposition test checks
    the result, so a change in that layout fails loudly.
    """
    for i, n in enumerate(buckets):
        if n:
            child._buckets[i].inc(n)
    child._sum.inc(total)


METRIC_NAMES = frozenset(
    {
        "sse_proxy_requests_total",
        "sse_proxy_streams_total",
        "sse_proxy_streams_active",
        "sse_proxy_workers_live",
        "sse_proxy_workers_configured",
        "sse_proxy_worker_restarts",
        "sse_proxy_stream_bytes_total",
        "sse_proxy_events_total",
        "sse_proxy_alerts_total",
        "sse_proxy_streams_with_alert_total",
        "sse_proxy_stalls_kept_alive_total",
        "sse_proxy_upstream_errors_total",
        "sse_proxy_output_tokens_total",
        "sse_proxy_input_tokens_total",
        "sse_proxy_recordings_written_total",
        *(
            f"{h}_{suffix}"
            for h in (
                "sse_proxy_time_to_first_byte_seconds",
                "sse_proxy_stream_duration_seconds",
                "sse_proxy_time_to_first_token_seconds",
                "sse_proxy_inter_event_gap_seconds",
            )
            for suffix in ("bucket", "sum", "count")
        ),
    }
)
"""Every series name the proxy exports (a test checks it against a real scrape)."""
