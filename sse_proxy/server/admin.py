"""The proxy's own endpoints under the admin prefix: health, metrics, the inspector, and a
404 for every other reserved path (never forwarded).

They are served on the traffic port, or with ``--admin-port`` by an app of their own
(:func:`make_admin_app`) on its own listener, which stays open through the drain after
SIGTERM so that a probe gets health's 503 rather than a refused connection. The traffic
port then only reserves the prefix: every path under it is a 404 there.
"""

from __future__ import annotations

from aiohttp import web

from sse_proxy.inspect.registry import Registry
from sse_proxy.inspect.web import (
    REGISTRY,
    Guard,
    add_ui_routes,
    not_framed,
    unframeable,
    unguarded,
)
from sse_proxy.server.front_door import FrontDoorGuard
from sse_proxy.server.keys import CONFIG, METRICS, ROUTES, STATE, WORKERS
from sse_proxy.server.replies import json_error
from sse_proxy.server.workers import WorkerCounts
from sse_proxy.settings import Config

__all__ = ["add_admin_routes", "make_admin_app", "reserve_admin_prefix"]


async def _health(request: web.Request) -> web.Response:
    state = request.app[STATE]
    status = "shutting_down" if state.shutting_down else "ok"
    routes = [
        {k: v for k, v in r.items() if k in ("route", "prefix", "upstream", "dialect")}
        for r in request.app[ROUTES].describe()
    ]
    workers = request.app.get(WORKERS, WorkerCounts.single()).fields()
    if status == "ok" and workers["live"] < workers["configured"]:
        status = "degraded"  # still serving; a worker is being replaced
    return web.json_response(
        {
            "status": status,
            "active_streams": len(state.active),
            "workers": workers,
            "routes": routes,
        },
        status=503 if state.shutting_down else 200,
    )


async def _metrics(request: web.Request) -> web.Response:
    request.app[STATE].backlog.flush()  # the streams that ended count, whatever waits
    body, content_type = request.app[METRICS].render_for(request.headers.get("Accept"))
    return web.Response(body=body, headers={"Content-Type": content_type})


async def _not_found(request: web.Request) -> web.Response:
    return json_error(404, "not_found", "reserved sse-proxy path", None)


async def _elsewhere(request: web.Request) -> web.Response:
    return json_error(
        404,
        "not_found",
        "reserved sse-proxy path (health, metrics and the inspector are on the admin port)",
        None,
    )


async def _not_admin(request: web.Request) -> web.Response:
    prefix = request.app[CONFIG].admin_prefix
    return json_error(
        404, "not_found", f"not an sse-proxy endpoint (they are under {prefix}/)", None
    )


def reserve_admin_prefix(
    app: web.Application, config: Config, *, moved: bool = False, guard: Guard = unguarded
) -> None:
    """Every path under the admin prefix not routed yet: 404, never forwarded (``moved``:
    the traffic port of a proxy with an admin listener, whose 404 says where they went;
    ``guard``: what each handler is put behind, the front door where it is not a
    middleware)."""
    handler = guard(not_framed(_elsewhere if moved else _not_found))
    # Two routes, not one pattern that starts inside the prefix's last segment: aiohttp
    # indexes a route by the whole segments before its first variable, so this way the
    # catch-all sits under the prefix and no forwarded request is matched against it.
    app.router.add_route("*", config.admin_prefix, handler)
    app.router.add_route("*", config.admin_prefix + "/{tail:.*}", handler)


def add_admin_routes(
    app: web.Application, config: Config, registry: Registry | None, *, guard: Guard = unguarded
) -> None:
    """Health, metrics, the inspector (a registry: ``--ui``) and the prefix's catch-all,
    each behind ``guard``."""
    prefix = config.admin_prefix
    app.router.add_get(f"{prefix}/health", guard(not_framed(_health)))
    app.router.add_get(f"{prefix}/metrics", guard(not_framed(_metrics)))
    if registry is not None:
        add_ui_routes(app, config, registry, guard=guard)
    reserve_admin_prefix(app, config, guard=guard)


def make_admin_app(proxy: web.Application) -> web.Application:
    """The admin listener's app (``--admin-port``): the endpoints above, reading the proxy
    app's own state, metrics, routes, worker counts and inspector registry (shared objects,
    not copies: health turns 503 the moment the proxy starts draining)."""
    config = proxy[CONFIG]
    app = web.Application(
        # the front door here too: health lists the upstreams, metrics and the inspector
        # what the streams were (its listen address is the admin listener's own)
        middlewares=[FrontDoorGuard(config, listen=config.admin_listen_host).middleware()],
        handler_args={
            "max_field_size": config.max_request_header_bytes,
            "max_line_size": config.max_request_header_bytes,
            "keepalive_timeout": config.keepalive_timeout,
        },
    )
    app[CONFIG] = config
    app[METRICS] = proxy[METRICS]
    app[STATE] = proxy[STATE]
    app[ROUTES] = proxy[ROUTES]
    if WORKERS in proxy:
        app[WORKERS] = proxy[WORKERS]
    add_admin_routes(app, config, proxy.get(REGISTRY))
    app.router.add_route("*", "/{tail:.*}", _not_admin)  # nothing here is forwarded
    app.on_response_prepare.append(_unframeable)  # every answer here, refusals too
    return app


async def _unframeable(_request: web.Request, response: web.StreamResponse) -> None:
    unframeable(response.headers)
