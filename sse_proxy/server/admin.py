"""The proxy's own endpoints under the admin prefix: health, metrics, the inspector, and a
404 for every other reserved path (never forwarded)."""

from __future__ import annotations

from aiohttp import web

from sse_proxy.config import Config
from sse_proxy.inspect.web import add_ui_routes, registry_for
from sse_proxy.server.admission import json_error
from sse_proxy.server.keys import METRICS, ROUTES, STATE, WORKERS, WorkerCounts

__all__ = ["add_admin_routes"]


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
    body, content_type = request.app[METRICS].render_for(request.headers.get("Accept"))
    return web.Response(body=body, headers={"Content-Type": content_type})


async def _not_found(request: web.Request) -> web.Response:
    return json_error(404, "not_found", "reserved sse-proxy path", None)


def add_admin_routes(app: web.Application, config: Config) -> None:
    """Health, metrics, the inspector (with ``--ui``) and the reserved prefix's catch-all."""
    prefix = config.admin_prefix
    app.router.add_get(f"{prefix}/health", _health)
    app.router.add_get(f"{prefix}/metrics", _metrics)
    registry = registry_for(config)
    if registry is not None:
        add_ui_routes(app, config, registry)
    app.router.add_route("*", prefix + "{tail:(/.*)?}", _not_found)
