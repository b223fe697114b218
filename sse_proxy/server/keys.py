"""The application's keys: what every part of the server shell reads off ``request.app``.

Only the keys: their value types live with what they describe (:mod:`.exchange`,
:mod:`.workers`), so no part imports the app's wiring (:mod:`.app`) to get them.
"""

from __future__ import annotations

from aiohttp import web

from sse_proxy.obs.metrics import Metrics
from sse_proxy.server.exchange import ProxyParts, ProxyState, TapFactory
from sse_proxy.server.network import Network
from sse_proxy.server.routes import RouteTable
from sse_proxy.server.tracing import Tracing
from sse_proxy.server.workers import WorkerCounts
from sse_proxy.settings import Config

__all__ = [
    "CONFIG",
    "METRICS",
    "NETWORK",
    "PARTS",
    "ROUTES",
    "STATE",
    "STREAM_TAPS",
    "TRACING",
    "WORKERS",
]


CONFIG = web.AppKey("config", Config)
METRICS = web.AppKey("metrics", Metrics)
STATE = web.AppKey("state", ProxyState)
ROUTES = web.AppKey("routes", RouteTable)
NETWORK = web.AppKey("network", Network)
TRACING = web.AppKey("tracing", Tracing)
STREAM_TAPS = web.AppKey("stream_taps", list[TapFactory])
"""Taps a tool adds to every SSE stream of the app, after the proxy's own (empty list by
default; a test harness appends to it once the app runs)."""
PARTS = web.AppKey("parts", ProxyParts)


WORKERS = web.AppKey("workers", WorkerCounts)
