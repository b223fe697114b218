"""Prometheus metrics, fed from alerts and stream summaries.

Each proxy app owns its own registry, so several apps (tests, the demo) never collide.
With ``PROMETHEUS_MULTIPROC_DIR`` set (``serve --workers N``), values are aggregated
across worker processes by prometheus-client's multiprocess mode.
"""

from __future__ import annotations

import os

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)

__all__ = ["Metrics"]

_LATENCY_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
_DURATION_BUCKETS = (0.1, 0.5, 1, 2.5, 5, 10, 30, 60, 120, 300, 600, 1800)


class Metrics:
    """The proxy's counters, gauges and histograms in one registry."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        reg = self.registry
        self.requests = Counter(
            "sse_proxy_requests",
            "Requests proxied, by kind (sse or other).",
            ["kind"],
            registry=reg,
        )
        self.streams = Counter(
            "sse_proxy_streams",
            "SSE streams finished, by how they ended.",
            ["ended_by"],
            registry=reg,
        )
        self.active = Gauge(
            "sse_proxy_streams_active",
            "SSE streams being relayed now.",
            registry=reg,
            multiprocess_mode="livesum",
        )
        self.bytes = Counter(
            "sse_proxy_stream_bytes", "Bytes relayed in SSE streams (as received).", registry=reg
        )
        self.events = Counter("sse_proxy_events", "SSE events dispatched.", registry=reg)
        self.alerts = Counter(
            "sse_proxy_alerts",
            "Alerts by event name (exact, never rate-limited).",
            ["event"],
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
        self.ttfb = Histogram(
            "sse_proxy_time_to_first_byte_seconds",
            "From forwarding the request to the first upstream body byte.",
            buckets=_LATENCY_BUCKETS,
            registry=reg,
        )
        self.duration = Histogram(
            "sse_proxy_stream_duration_seconds",
            "SSE stream duration.",
            buckets=_DURATION_BUCKETS,
            registry=reg,
        )

    def render(self) -> bytes:
        """The exposition text; aggregated across workers in multiprocess mode."""
        if os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
            reg = CollectorRegistry()
            multiprocess.MultiProcessCollector(reg)  # type: ignore[no-untyped-call]
            return generate_latest(reg)
        return generate_latest(self.registry)
