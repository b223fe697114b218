"""The application's keys: what every part of the server shell reads off ``request.app``.

In a module of their own so that no part imports the app's wiring (:mod:`.app`) to get them.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from sse_proxy.config import Config
from sse_proxy.obs.metrics import Metrics
from sse_proxy.server.network import Network
from sse_proxy.server.routes import RouteTable
from sse_proxy.server.taps import TapFactory
from sse_proxy.server.tracing import Tracing

__all__ = [
    "CONFIG",
    "METRICS",
    "NETWORK",
    "ROUTES",
    "SESSION",
    "STATE",
    "STREAM_TAPS",
    "TRACING",
    "ProxyState",
]


@dataclass
class ProxyState:
    """What the running server knows across requests."""

    shutting_down: bool = False
    active: set[asyncio.Task[Any]] = field(default_factory=set)


CONFIG = web.AppKey("config", Config)
METRICS = web.AppKey("metrics", Metrics)
SESSION = web.AppKey("session", aiohttp.ClientSession)
STATE = web.AppKey("state", ProxyState)
ROUTES = web.AppKey("routes", RouteTable)
NETWORK = web.AppKey("network", Network)
TRACING = web.AppKey("tracing", Tracing)
STREAM_TAPS = web.AppKey("stream_taps", list[TapFactory])
"""Taps a tool adds to every SSE stream of the app, after the proxy's own (empty list by
default; a test harness appends to it once the app runs)."""
