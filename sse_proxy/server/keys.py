"""The application's keys: what every part of the server shell reads off ``request.app``.

In a module of their own so that no part imports the app's wiring (:mod:`.app`) to get them.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web

from sse_proxy.config import Config
from sse_proxy.inspect.registry import Registry
from sse_proxy.obs.metrics import Metrics
from sse_proxy.server.backlog import Backlog
from sse_proxy.server.network import Network
from sse_proxy.server.routes import RouteTable
from sse_proxy.server.taps import TapFactory
from sse_proxy.server.tracing import Tracing
from sse_proxy.server.watchdog import Watchdog

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
    "ProxyParts",
    "ProxyState",
    "WorkerCounts",
]


@dataclass
class ProxyState:
    """What the running server knows across requests."""

    shutting_down: bool = False
    active: set[asyncio.Task[Any]] = field(default_factory=set)
    """The SSE relays' tasks."""
    in_flight: set[asyncio.Task[Any]] = field(default_factory=set)
    """The handlers' tasks of the requests past the front door (a shutdown waits for them)."""
    backlog: Backlog = field(default_factory=Backlog)
    """Streams' bookkeeping that waits while other requests wait for a first byte."""


@dataclass(slots=True, eq=False)
class ProxyParts:
    """What a forwarded request reads of its application, in one object taken once per
    request: an ``app[KEY]`` is a Python call with its own checks and ``request.app`` two
    properties, and a request's path made some twenty of them (issue 23). The objects are
    the ones under the app's keys, which the admin app and the tools read."""

    cfg: Config
    metrics: Metrics
    state: ProxyState
    routes: RouteTable
    network: Network
    tracing: Tracing
    taps: list[TapFactory]
    """The app's ``STREAM_TAPS`` list itself (tools append to it once the app runs)."""
    registry: Registry | None
    """The inspector's registry (``--ui``), or None."""
    session: aiohttp.ClientSession | None = None
    """The upstream session, while the app runs (as are the three below)."""
    upstream_timeout: aiohttp.ClientTimeout | None = None
    """The upstream requests' timeout, the same for every request: built with the session."""
    loop: asyncio.AbstractEventLoop | None = None
    """The app's event loop: given to asyncio's helpers, which otherwise look it up (on
    Python 3.11 a ``getpid`` system call each time)."""
    watchdog: Watchdog | None = None
    """The loop's watchdog (the deadlines of every stream)."""


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


@dataclass(frozen=True, slots=True)
class WorkerCounts:
    """How many workers should run, how many do, and how many exits the parent has handled
    since it started (read at each health check and scrape)."""

    configured: int
    live: Callable[[], int]
    restarts: Callable[[], int] = lambda: 0

    @classmethod
    def single(cls) -> WorkerCounts:
        return cls(1, lambda: 1)

    @classmethod
    def shared(cls, configured: int, shared: Any) -> WorkerCounts:
        """Counts the supervisor keeps in shared memory: [live, restarts]."""
        return cls(configured, lambda: int(shared[0]), lambda: int(shared[1]))

    def fields(self) -> dict[str, int]:
        return {"live": self.live(), "configured": self.configured, "restarts": self.restarts()}


WORKERS = web.AppKey("workers", WorkerCounts)
