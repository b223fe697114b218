"""Admission: where a request let in by the front door becomes an :class:`Exchange`, or
is refused.

The refusals made after the front door and before anything is forwarded live here, in
the order they are checked (the front door's own: :mod:`.front_door`).
"""

from __future__ import annotations

from itertools import chain

from aiohttp import web
from yarl import URL

from sse_proxy.errors import ChaosSpecError
from sse_proxy.names import CHAOS_HEADER
from sse_proxy.obs.logs import new_stream_id
from sse_proxy.rechunk.spec import ChaosSpec, parse_chaos_header
from sse_proxy.server.context import RequestContext
from sse_proxy.server.exchange import Exchange, ProxyParts
from sse_proxy.server.replies import json_error, too_large
from sse_proxy.server.routes import PathRefused, Route, RouteTable, resolve_dot_segments
from sse_proxy.settings import Config

__all__ = ["admit", "chaos_allowed", "chaos_spec", "config_spec"]


def admit(request: web.Request, parts: ProxyParts) -> Exchange | web.Response:
    """The request as an exchange, or the reply that refuses it.

    Checked in this order, after the front door (which refused a target that is not a
    path: :func:`refuse_connect`): the chaos header (malformed: 400; not allowed on this
    server: 403), the headers' total size (431), a declared body length (413; a streamed
    body is bounded by :func:`request_body`), the path's dot segments (resolved per RFC
    3986 before routing; hidden ones are a 400), a route for the path (404), and a ``..``
    that would leave that route (400).
    """
    cfg = parts.cfg
    stream_id = new_stream_id()
    raw_target = request.raw_path
    try:
        spec = chaos_spec(request, cfg)
    except ChaosSpecError as exc:
        status = 403 if CHAOS_HEADER in request.headers and not chaos_allowed(cfg) else 400
        return json_error(status, "chaos_spec", str(exc), stream_id)
    raw_headers = request.raw_headers
    header_bytes = sum(map(len, chain.from_iterable(raw_headers))) + 4 * len(raw_headers)
    if header_bytes > cfg.max_request_header_bytes:
        # aiohttp bounds each header line; this bounds them all together.
        return json_error(
            431,
            "request_headers_too_large",
            f"request headers over {cfg.max_request_header_bytes} bytes",
            stream_id,
        )
    length = request.content_length
    if length is not None and length > cfg.max_request_body_bytes:
        return too_large(cfg, stream_id)
    routes = parts.routes
    routed = routes.admitted.get(raw_target)  # a target admitted before: the same outcome
    if routed is None:
        try:
            target, low = resolve_dot_segments(raw_target)
        except PathRefused as exc:
            return json_error(400, "path_refused", str(exc), stream_id)
        path = target.partition("?")[0]
        if path == cfg.admin_prefix or path.startswith(cfg.admin_prefix + "/"):
            return json_error(404, "not_found", "reserved sse-proxy path", None)
        matched = routes.match(target)
        if low is not None and (left := _left_route(routes, raw_target, matched, low)):
            return json_error(
                400,
                "path_leaves_route",
                f"the path climbs out of its route ({left}) with '..'",
                stream_id,
            )
        if matched is None:
            prefixes = ", ".join(r.prefix for r in routes.routes)
            return json_error(
                404, "no_route", f"no route for this path (routes: {prefixes})", stream_id
            )
        route, rest = matched
        routed = (route, URL(route.url_for(route.strip_auth_query(rest)), encoded=True))
        routes.remember(raw_target, routed)
    route, url = routed
    return Exchange(
        request=request,
        parts=parts,
        cfg=cfg,
        metrics=parts.metrics,
        stream_id=stream_id,
        route=route,
        url=url,
        spec=spec,
        ctx=RequestContext.from_headers(request.headers, route.name, request.method),
    )


def _left_route(
    routes: RouteTable, raw_target: str, matched: tuple[Route, str] | None, low: int
) -> str | None:
    """The prefix of the route a ``..`` climbed out of (``low``: the shallowest depth it
    reached), or None: the route the target names as written and the one it resolves to
    both count, and above the root is out of every route."""
    for found in (routes.match(raw_target), matched):
        if found is not None and low < found[0].depth:
            return found[0].prefix
    return "/" if low < 0 else None


def chaos_allowed(cfg: Config) -> bool:
    return cfg.allow_chaos_header or cfg.mode == "chaos"


def chaos_spec(request: web.Request, cfg: Config) -> ChaosSpec | None:
    """The chaos spec for this request: the per-request header if allowed, else the server's.

    The header is allowed on a server started in chaos mode (it only overrides the chaos
    settings) or with ``--allow-chaos-header`` (it then turns chaos on per request).
    """
    header = request.headers.get(CHAOS_HEADER)
    if header is not None:
        if not chaos_allowed(cfg):
            raise ChaosSpecError(
                f"{CHAOS_HEADER} is not allowed on this server "
                "(start it with --mode chaos or --allow-chaos-header)"
            )
        chaos = cfg.mode == "chaos"
        return parse_chaos_header(  # what the header does not name, the server's settings
            header,
            default_seed=cfg.seed,
            strategy=cfg.chaos if chaos else None,
            k=cfg.chaos_k,
            delay_ms=cfg.delay_ms,
            force=cfg.chaos_force,
            fault=cfg.chaos_fault if chaos and cfg.chaos_fault != "none" else None,
            timing=cfg.chaos_timing,
        )
    if cfg.mode != "chaos":
        return None
    return config_spec(cfg)


def config_spec(cfg: Config) -> ChaosSpec:
    """The server's own chaos spec (chaos mode); ``ChaosSpecError`` if it is bad."""
    return ChaosSpec.from_options(
        cfg.chaos,
        cfg.seed,
        k=cfg.chaos_k,
        delay_ms=cfg.delay_ms,
        force=cfg.chaos_force,
        fault=cfg.chaos_fault or None,
        timing=cfg.chaos_timing,
    )
