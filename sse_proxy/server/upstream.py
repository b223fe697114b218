"""Opening the upstream request (HTTP or WebSocket) and mapping its failures to replies."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web
from yarl import URL

from sse_proxy.errors import ChaosSpecError
from sse_proxy.names import CHAOS_HEADER
from sse_proxy.obs.logs import get_logger, new_stream_id
from sse_proxy.obs.metrics import Metrics
from sse_proxy.obs.redact import redact_url
from sse_proxy.server.admission import (
    RequestTooLarge,
    chaos_allowed,
    chaos_spec,
    json_error,
    request_body,
    too_large,
)
from sse_proxy.server.exchange import RequestContext
from sse_proxy.server.headers import loggable_headers, request_headers_for_upstream
from sse_proxy.server.keys import CONFIG, METRICS, NETWORK, ROUTES, SESSION, TRACING
from sse_proxy.server.network import tls_reason
from sse_proxy.server.relay import respond
from sse_proxy.server.routes import Route
from sse_proxy.server.tracing import RequestSpan
from sse_proxy.server.websocket import is_websocket_upgrade, relay_websocket

__all__ = ["proxy_request", "session_ctx"]


async def proxy_request(request: web.Request) -> web.StreamResponse:
    cfg = request.app[CONFIG]
    metrics = request.app[METRICS]
    stream_id = new_stream_id()
    log = get_logger(stream_id=stream_id, method=request.method, path=request.path)
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

    matched = request.app[ROUTES].match(raw_target)
    if matched is None:
        prefixes = ", ".join(r.prefix for r in request.app[ROUTES].routes)
        return json_error(
            404, "no_route", f"no route for this path (routes: {prefixes})", stream_id
        )
    route, rest = matched
    upstream_url = route.url_for(route.strip_auth_query(rest))
    log = log.bind(route=route.name, upstream_url=redact_url(upstream_url))
    metrics.route_requests.labels(route=route.name).inc()
    url = URL(upstream_url, encoded=True)
    headers = route.upstream_headers(request_headers_for_upstream(request.headers))
    if is_websocket_upgrade(request):
        return await _websocket(request, route, url, headers, log, metrics, stream_id)
    ctx = RequestContext.from_headers(request.headers, route.name)
    data = request_body(request, cfg.max_request_body_bytes) if request.body_exists else None
    if data is not None and "json" in request.headers.get("Content-Type", ""):
        data = ctx.peek(data)
    span = request.app[TRACING].start(request, ctx, stream_id)
    log = log.bind(**ctx.fields())
    if cfg.log_level == "debug":
        log.debug("upstream.request", url=redact_url(str(url)), headers=loggable_headers(headers))
    # The idle timeout is not aiohttp's sock_read, which re-arms a timer on every read:
    # waiting for the headers has its own deadline below, the body an _IdleWatch.
    timeout = aiohttp.ClientTimeout(
        total=None,
        connect=cfg.connect_timeout or None,
        sock_connect=cfg.connect_timeout or None,
    )
    started = time.monotonic()
    proxy, proxy_headers = request.app[NETWORK].proxy_for(url)
    try:
        upstream_cm = request.app[SESSION].request(
            request.method,
            url,
            headers=headers,
            data=data,
            allow_redirects=False,
            timeout=timeout,
            proxy=proxy,
            proxy_headers=proxy_headers,
            skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),
            trace_request_ctx={"log": log},
        )
        async with contextlib.AsyncExitStack() as stack:
            async with asyncio.timeout(cfg.idle_timeout or None):
                upstream = await stack.enter_async_context(upstream_cm)
            return await respond(
                request, upstream, cfg, metrics, spec, stream_id, started, ctx, span, route, url
            )
    except RequestTooLarge:
        return too_large(cfg, stream_id)
    except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
        log = log.bind(request_model=ctx.request_model)
        return _upstream_failed(log, metrics, 504, "upstream_timeout", exc, stream_id, route, span)
    except (aiohttp.ClientSSLError, aiohttp.ServerFingerprintMismatch) as exc:
        log = log.bind(request_model=ctx.request_model)
        return _upstream_failed(
            log,
            metrics,
            502,
            "upstream_tls_error",
            exc,
            stream_id,
            route,
            span,
            reason=tls_reason(exc),
        )
    except aiohttp.ClientProxyConnectionError as exc:
        log = log.bind(request_model=ctx.request_model)
        return _upstream_failed(log, metrics, 502, "proxy_unreachable", exc, stream_id, route, span)
    except aiohttp.ClientConnectorError as exc:
        log = log.bind(request_model=ctx.request_model)
        return _upstream_failed(
            log, metrics, 502, "upstream_unreachable", exc, stream_id, route, span
        )
    except (aiohttp.ClientError, OSError) as exc:
        if isinstance(exc.__cause__, RequestTooLarge):  # raised inside aiohttp's body writer
            return too_large(cfg, stream_id)
        log = log.bind(request_model=ctx.request_model)
        kind = (
            "proxy_refused" if isinstance(exc, aiohttp.ClientHttpProxyError) else "upstream_failed"
        )
        return _upstream_failed(log, metrics, 502, kind, exc, stream_id, route, span)
    finally:
        if span is not None:
            span.end()


async def _websocket(
    request: web.Request,
    route: Route,
    url: URL,
    headers: Any,
    log: Any,
    metrics: Metrics,
    stream_id: str,
) -> web.StreamResponse:
    """The WebSocket pass-through, with the same upstream error mapping as HTTP."""
    cfg = request.app[CONFIG]
    proxy, proxy_headers = request.app[NETWORK].proxy_for(url)

    def done(summary: dict[str, Any]) -> None:
        metrics.ws_sessions.labels(route=route.name, close_code=str(summary["close_code"])).inc()
        metrics.ws_messages.labels(route=route.name, direction="to_upstream").inc(
            summary["messages_to_upstream"]
        )
        metrics.ws_messages.labels(route=route.name, direction="to_client").inc(
            summary["messages_to_client"]
        )

    try:
        return await relay_websocket(
            request,
            request.app[SESSION],
            url,
            headers,
            proxy,
            proxy_headers,
            cfg.max_request_body_bytes,
            log,
            done,
        )
    except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
        return _upstream_failed(log, metrics, 504, "upstream_timeout", exc, stream_id, route)
    except (aiohttp.ClientSSLError, aiohttp.ServerFingerprintMismatch) as exc:
        return _upstream_failed(
            log, metrics, 502, "upstream_tls_error", exc, stream_id, route, reason=tls_reason(exc)
        )
    except aiohttp.ClientProxyConnectionError as exc:
        return _upstream_failed(log, metrics, 502, "proxy_unreachable", exc, stream_id, route)
    except aiohttp.ClientConnectorError as exc:
        return _upstream_failed(log, metrics, 502, "upstream_unreachable", exc, stream_id, route)
    except (aiohttp.ClientError, OSError) as exc:
        return _upstream_failed(log, metrics, 502, "upstream_failed", exc, stream_id, route)


def _upstream_failed(
    log: Any,
    metrics: Metrics,
    status: int,
    kind: str,
    exc: BaseException,
    stream_id: str,
    route: Route,
    span: RequestSpan | None = None,
    reason: str | None = None,
) -> web.Response:
    message = redact_url(str(exc) or type(exc).__name__)
    extra = {"reason": reason} if reason else {}
    log.warning("upstream.error", kind=kind, error=message, status=status, **extra)
    metrics.upstream_errors.labels(kind=kind).inc()
    metrics.count_total("upstream_errors")
    metrics.route_upstream_errors.labels(route=route.name, kind=kind).inc()
    if span is not None:
        span.failed(kind, status)
    if reason:
        message = f"{reason}: {message}"
    return json_error(status, kind, message, stream_id)


async def session_ctx(app: web.Application) -> AsyncIterator[None]:
    cfg = app[CONFIG]
    connector = app[NETWORK].connector()
    async with aiohttp.ClientSession(
        trace_configs=[_connection_trace()] if cfg.log_level == "debug" else None,
        connector=connector,
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        timeout=aiohttp.ClientTimeout(total=None, connect=cfg.connect_timeout or None),
    ) as session:
        app[SESSION] = session
        yield


def _connection_trace() -> aiohttp.TraceConfig:
    """Debug lines for upstream connections: a new one, or one reused from the pool."""
    trace = aiohttp.TraceConfig()

    async def created(_s: Any, ctx: Any, params: Any) -> None:
        _log_of(ctx).debug("upstream.connection", reused=False)

    async def reused(_s: Any, ctx: Any, params: Any) -> None:
        _log_of(ctx).debug("upstream.connection", reused=True)

    trace.on_connection_create_end.append(created)
    trace.on_connection_reuseconn.append(reused)
    return trace


def _log_of(ctx: Any) -> Any:
    request_ctx = getattr(ctx, "trace_request_ctx", None)
    if isinstance(request_ctx, dict) and "log" in request_ctx:
        return request_ctx["log"]
    return get_logger()
