"""Admission: where a request is admitted as an :class:`Exchange` or refused.

Every refusal made before anything is forwarded lives here, in the order it is checked,
and every error the proxy answers itself has the one shape :func:`json_error` builds.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web
from yarl import URL

from sse_proxy.config import Config
from sse_proxy.errors import ChaosSpecError
from sse_proxy.names import CHAOS_HEADER, STREAM_ID_HEADER
from sse_proxy.obs.logs import get_logger, new_stream_id
from sse_proxy.obs.redact import redact_url
from sse_proxy.rechunk.spec import ChaosSpec, parse_chaos_header
from sse_proxy.server.context import RequestContext
from sse_proxy.server.exchange import Exchange
from sse_proxy.server.keys import CONFIG, METRICS, ROUTES

__all__ = [
    "RequestTooLarge",
    "admit",
    "chaos_allowed",
    "chaos_spec",
    "json_error",
    "refuse_connect",
    "request_body",
    "too_large",
]


class RequestTooLarge(Exception):
    """The request body outgrew ``max_request_body_bytes``."""


def json_error(status: int, kind: str, message: str, stream_id: str | None) -> web.Response:
    """The one shape of every error the proxy answers itself: ``{"error": {type, message,
    stream_id}}``, the stream id in its header too (none for the reserved paths, which are
    not proxied requests)."""
    error = {"type": kind, "message": message}
    if stream_id is None:
        return web.json_response({"error": error}, status=status)
    error["stream_id"] = stream_id
    return web.json_response({"error": error}, status=status, headers={STREAM_ID_HEADER: stream_id})


def too_large(cfg: Config, stream_id: str) -> web.Response:
    """The 413: a declared length over the limit, or a streamed body that outgrew it."""
    return json_error(
        413,
        "request_too_large",
        f"request body over {cfg.max_request_body_bytes} bytes",
        stream_id,
    )


@web.middleware
async def refuse_connect(request: web.Request, handler: Any) -> web.StreamResponse:
    """CONNECT never matches a route (its target has no path), so refuse it before routing."""
    if request.method == "CONNECT":
        return json_error(
            405, "method_not_allowed", "CONNECT is refused: not an open proxy", new_stream_id()
        )
    response: web.StreamResponse = await handler(request)
    return response


def admit(request: web.Request) -> Exchange | web.Response:
    """The request as an exchange, or the reply that refuses it.

    Checked in this order: an absolute-form target (not an open proxy), the chaos header
    (malformed: 400; not allowed on this server: 403), the headers' total size (431), a
    declared body length (413; a streamed body is bounded by :func:`request_body`), a
    route for the path (404).
    """
    cfg = request.app[CONFIG]
    stream_id = new_stream_id()
    raw_target = request.raw_path
    if not raw_target.startswith("/"):
        return json_error(
            400, "absolute_form_refused", "absolute-form request targets are refused", stream_id
        )
    try:
        spec = chaos_spec(request, cfg)
    except ChaosSpecError as exc:
        status = 403 if CHAOS_HEADER in request.headers and not chaos_allowed(cfg) else 400
        return json_error(status, "chaos_spec", str(exc), stream_id)
    header_bytes = sum(len(k) + len(v) + 4 for k, v in request.raw_headers)
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
    routes = request.app[ROUTES]
    matched = routes.match(raw_target)
    if matched is None:
        prefixes = ", ".join(r.prefix for r in routes.routes)
        return json_error(
            404, "no_route", f"no route for this path (routes: {prefixes})", stream_id
        )
    route, rest = matched
    upstream_url = route.url_for(route.strip_auth_query(rest))
    log = get_logger(stream_id=stream_id, method=request.method, path=request.path)
    return Exchange(
        request=request,
        cfg=cfg,
        metrics=request.app[METRICS],
        stream_id=stream_id,
        log=log,
        route=route,
        url=URL(upstream_url, encoded=True),
        spec=spec,
        ctx=RequestContext.from_headers(request.headers, route.name),
        upstream_log=log.bind(route=route.name, upstream_url=redact_url(upstream_url)),
    )


async def request_body(request: web.Request, limit: int) -> AsyncIterator[bytes]:
    """The request body streamed through, not read whole; stops past ``limit`` bytes."""
    seen = 0
    async for chunk in request.content.iter_any():
        seen += len(chunk)
        if seen > limit:
            raise RequestTooLarge
        yield chunk


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
        return parse_chaos_header(  # what the header does not name, the server's settings
            header,
            default_seed=cfg.seed,
            strategy=cfg.chaos if cfg.mode == "chaos" else None,
            k=cfg.chaos_k,
            delay_ms=cfg.delay_ms,
        )
    if cfg.mode != "chaos":
        return None
    return ChaosSpec.from_options(cfg.chaos, cfg.seed, k=cfg.chaos_k, delay_ms=cfg.delay_ms)
