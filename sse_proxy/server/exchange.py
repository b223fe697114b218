"""One proxied request's exchange, built once at admission and passed whole.

httpcore hands one ``Request`` (with its ``extensions``) down every layer; this is the
shell's equivalent: the request, the route and upstream URL it was admitted to, the chaos
spec, the client's context, the trace span and the logger bound for it. Nothing below
admission takes a request apart into a dozen parameters again.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

from sse_proxy.inspect.registry import Registry
from sse_proxy.obs.logs import get_logger
from sse_proxy.obs.metrics import Metrics
from sse_proxy.obs.redact import redact_url
from sse_proxy.rechunk.spec import ChaosSpec
from sse_proxy.server.backlog import Backlog
from sse_proxy.server.context import RequestContext
from sse_proxy.server.delivery import Delivery
from sse_proxy.server.network import Network
from sse_proxy.server.recorder import Recorder
from sse_proxy.server.resumes import Resume, ResumeTable
from sse_proxy.server.routes import Route, RouteTable
from sse_proxy.server.tap_types import Tap
from sse_proxy.server.tracing import RequestSpan, Tracing
from sse_proxy.server.watchdog import Watch, Watchdog
from sse_proxy.settings import Config

__all__ = ["Exchange", "ProxyParts", "ProxyState", "RequestContext", "TapFactory"]


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
    resumes: ResumeTable = field(default_factory=ResumeTable)
    """What recent streams delivered last: a resumed stream is joined to its origin."""


@dataclass(slots=True, eq=False)
class ProxyParts:
    """What a forwarded request reads of its application, in one object taken once per
    request: an ``app[KEY]`` is a Python call with its own checks and ``request.app`` two
    properties, and a request's path would make some twenty of them. The objects are
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
    recorder: Recorder | None = None
    """The recordings (``--record DIR``), or None."""
    session: aiohttp.ClientSession | None = None
    """The upstream session, while the app runs (as are the three below)."""
    upstream_timeout: aiohttp.ClientTimeout | None = None
    """The upstream requests' timeout, the same for every request: built with the session."""
    loop: asyncio.AbstractEventLoop | None = None
    """The app's event loop: given to asyncio's helpers, which otherwise look it up on
    every call."""
    watchdog: Watchdog | None = None
    """The loop's watchdog (the deadlines of every stream)."""


class Exchange:
    """One request, from its admission to its last log line.

    A plain class, its optional fields defaults of the class: a stream start sets only the
    nine it is given (a slotted dataclass would set all twenty on every start)."""

    request: web.Request
    parts: ProxyParts
    """The app's parts (the config, the metrics, the session...), taken once."""
    cfg: Config
    """``parts.cfg`` and ``parts.metrics``, as fields: read a dozen times per request."""
    metrics: Metrics
    stream_id: str
    route: Route
    url: URL
    """The upstream URL: the route's upstream joined with the request's path and query."""
    spec: ChaosSpec | None
    """The chaos spec, from the request's header or the server's chaos mode."""
    ctx: RequestContext
    upstream_context: bool = False
    """Whether the ``upstream.*`` lines carry the request's context (HTTP: yes)."""
    _log: Any = None
    _upstream_log: Any = None
    span: RequestSpan | None = None
    span_kept: bool = False
    """Whether the stream's end, put off past the handler, ends the span (its SpanTap)."""
    delivery: Delivery | None = None
    """Chaos mode: how the stream's cuts reach the client (set when its relay starts)."""
    started: float = 0.0
    """When the upstream request was opened (the monotonic clock): durations and TTFB."""
    backlog: Backlog | None = None
    """The app's backlog, told when this request's first byte is out
    (:meth:`first_byte_sent`)."""
    owes_first_byte: bool = False
    route_counted: bool = False
    idle_watch: Watch | None = None
    """The wait for the response head's deadline, which the body's idle watch takes over."""
    resume: Resume | None = None
    """The stream this request resumes (it carries a cursor), if it does."""

    def __init__(
        self,
        *,
        request: web.Request,
        parts: ProxyParts,
        cfg: Config,
        metrics: Metrics,
        stream_id: str,
        route: Route,
        url: URL,
        spec: ChaosSpec | None,
        ctx: RequestContext,
    ) -> None:
        self.request = request
        self.parts = parts
        self.cfg = cfg
        self.metrics = metrics
        self.stream_id = stream_id
        self.route = route
        self.url = url
        self.spec = spec
        self.ctx = ctx

    def count_route(self) -> None:
        """Count the request in its route's ``sse_proxy_route_requests_total``, once: an
        event stream when it is counted as one (after its first byte, with its observers),
        any other request when its answer starts, or when it fails."""
        if not self.route_counted:
            self.route_counted = True
            metrics = self.metrics
            metrics.child(metrics.route_requests, route=self.route.name).inc()

    def owe_first_byte(self, backlog: Backlog) -> None:
        self.backlog = backlog
        self.owes_first_byte = True
        backlog.request_started()

    def first_byte_sent(self) -> None:
        """The client has its first byte, or will get none: once per exchange."""
        if self.owes_first_byte:
            self.owes_first_byte = False
            assert self.backlog is not None
            self.backlog.first_byte_sent()

    @property
    def log(self) -> Any:
        """The request's logger, with ``stream_id``, ``method`` and ``path``: every line of
        the request starts from it. Bound when first asked for (most requests log no line
        of their own; a stream binds it once with more, :meth:`stream_log`)."""
        log = self._log
        if log is None:
            log = self._log = get_logger(**self.log_fields())
        return log

    def stream_log(self, **more: Any) -> Any:
        """:attr:`log` with ``more`` fields (the response's), in one bind."""
        if self._log is not None:
            return self._log.bind(**more)
        return get_logger(**self.log_fields(), **more)

    def log_fields(self) -> dict[str, Any]:
        """The fields every line of the request starts with."""
        request = self.request
        return {"stream_id": self.stream_id, "method": request.method, "path": request.path}

    @property
    def upstream_log(self) -> Any:
        """:attr:`log` with the route and the upstream URL (and, on HTTP, the request's
        context): the ``upstream.*`` lines. Bound when first asked for: most streams log
        no such line, and binding (a redacted URL, two context copies) is per request."""
        log = self._upstream_log
        if log is None:
            log = self.log.bind(route=self.route.name, upstream_url=redact_url(str(self.url)))
            if self.upstream_context:
                log = log.bind(**self.ctx.fields())
            self._upstream_log = log
        return log

    @property
    def mode(self) -> str:
        """The mode asked for: ``chaos`` with a spec, else the server's."""
        return "chaos" if self.spec is not None else self.cfg.mode


TapFactory = Callable[[Exchange], Tap | None]
"""Makes a tap for each SSE stream of the app (``STREAM_TAPS``); None: not this one."""
