"""The aiohttp application: the wiring of the server shell, and nothing else.

Thin by design: the protocol knowledge lives in :mod:`sse_proxy.core` (what the stream means)
and :mod:`sse_proxy.rechunk` (how the client receives it). A request is admitted or refused
in :mod:`.admission`, forwarded in :mod:`.upstream`, relayed back in :mod:`.relay`; the
proxy's own endpoints are in :mod:`.admin` (on this app, or with ``--admin-port`` on an
app of their own that shares this one's state), the app's keys in :mod:`.keys`.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from aiohttp import web

from sse_proxy.inspect.web import REGISTRY, registry_for
from sse_proxy.obs.metrics import Metrics
from sse_proxy.server.admin import add_admin_routes, reserve_admin_prefix
from sse_proxy.server.admission import admit
from sse_proxy.server.aiohttp_internals import remember_resolutions
from sse_proxy.server.exchange import ProxyParts, ProxyState
from sse_proxy.server.front_door import FrontDoorGuard, response_starts
from sse_proxy.server.keys import (
    CONFIG,
    METRICS,
    NETWORK,
    PARTS,
    ROUTES,
    STATE,
    STREAM_TAPS,
    TRACING,
)
from sse_proxy.server.network import Network
from sse_proxy.server.recorder import Recorder
from sse_proxy.server.request_body import defer_continue
from sse_proxy.server.routes import RouteTable
from sse_proxy.server.tracing import Tracing
from sse_proxy.server.upstream import forward, session_ctx
from sse_proxy.settings import Config

__all__ = ["make_app"]


def _proxy_handler(
    parts: ProxyParts, door: FrontDoorGuard
) -> Callable[[web.Request], Awaitable[web.StreamResponse]]:
    refusal = door.refusal
    in_flight = parts.state.in_flight

    async def proxy(request: web.Request) -> web.StreamResponse:
        """Every request not under the admin prefix: past the front door, admitted (or
        refused), then forwarded; its task in ``in_flight`` meanwhile (inline, as
        :meth:`FrontDoorGuard.around` would do it: one coroutine layer fewer to resume)."""
        refused = refusal(request)
        if refused is not None:
            return refused
        task = asyncio.current_task(parts.loop)
        assert task is not None  # a handler runs in a task
        in_flight.add(task)
        try:
            exchange = admit(request, parts)
            if isinstance(exchange, web.StreamResponse):
                return exchange
            return await forward(exchange)
        finally:
            in_flight.discard(task)

    return proxy


async def _flush(state: ProxyState) -> None:
    state.backlog.flush()


def make_app(config: Config, *, metrics: Metrics | None = None) -> web.Application:
    """The proxy as an aiohttp application (run it with handler_cancellation=True)."""
    state = ProxyState()
    # The front door is in each handler, not a middleware (why: FrontDoorGuard).
    door = FrontDoorGuard(config, in_flight=state.in_flight)
    app = web.Application(
        client_max_size=config.max_request_body_bytes,
        handler_args={
            "max_field_size": config.max_request_header_bytes,
            "max_line_size": config.max_request_header_bytes,
            "keepalive_timeout": config.keepalive_timeout,
        },
    )
    app.on_response_prepare.append(response_starts)
    app[CONFIG] = config
    app[METRICS] = metrics or Metrics(
        models=config.metrics_models, max_models=config.metrics_max_models
    )
    app[TRACING] = Tracing.for_config(config)
    app[STATE] = state
    app.on_cleanup.append(lambda _app: _flush(state))  # before the spans are exported
    app.on_cleanup.append(app[TRACING].close)
    recorder = Recorder.for_config(config, app[METRICS])
    if recorder is not None:
        app.on_cleanup.append(recorder.close)  # (after the flush: its streams' recordings)
    app[ROUTES] = RouteTable.from_config(config)
    app[NETWORK] = Network(config)
    app[STREAM_TAPS] = []
    app.cleanup_ctx.append(session_ctx)
    registry = registry_for(config)
    if registry is not None:
        app[REGISTRY] = registry  # the relay records streams into it, wherever it is shown
    parts = app[PARTS] = ProxyParts(
        cfg=config,
        metrics=app[METRICS],
        state=state,
        routes=app[ROUTES],
        network=app[NETWORK],
        tracing=app[TRACING],
        taps=app[STREAM_TAPS],
        registry=registry,
        recorder=recorder,
    )
    # Before the catch-all: the admin prefix is never forwarded. With --admin-port, the
    # endpoints are on their own listener (admin.make_admin_app) and only the 404 is here.
    if config.admin_port is None:
        add_admin_routes(app, config, registry, guard=door.around)
    else:
        reserve_admin_prefix(app, config, moved=True, guard=door.around)
    app.router.add_route(
        "*", "/{tail:.*}", _proxy_handler(parts, door), expect_handler=defer_continue
    )
    remember_resolutions(app)
    return app
