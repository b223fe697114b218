"""Opening the upstream request (HTTP or WebSocket) and mapping its failures to replies."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from sse_proxy.obs.logs import get_logger
from sse_proxy.obs.redact import redact_url
from sse_proxy.server.admission import RequestTooLarge, json_error, request_body, too_large
from sse_proxy.server.exchange import Exchange
from sse_proxy.server.headers import loggable_headers, request_headers_for_upstream
from sse_proxy.server.keys import CONFIG, NETWORK, SESSION, TRACING
from sse_proxy.server.network import tls_reason
from sse_proxy.server.relay import respond
from sse_proxy.server.websocket import is_websocket_upgrade, relay_websocket

__all__ = ["forward", "session_ctx"]


async def forward(ex: Exchange) -> web.StreamResponse:
    """Open the upstream request of an admitted exchange and relay its response."""
    request = ex.request
    ex.metrics.route_requests.labels(route=ex.route.name).inc()
    headers = ex.route.upstream_headers(request_headers_for_upstream(request.headers))
    if is_websocket_upgrade(request):
        return await _websocket(ex, headers)
    cfg = ex.cfg
    ctx = ex.ctx
    data = request_body(request, cfg.max_request_body_bytes) if request.body_exists else None
    if data is not None and "json" in request.headers.get("Content-Type", ""):
        data = ctx.peek(data)
    ex.span = span = request.app[TRACING].start(request, ctx, ex.stream_id)
    ex.upstream_log = log = ex.upstream_log.bind(**ctx.fields())
    if cfg.log_level == "debug":
        log.debug(
            "upstream.request", url=redact_url(str(ex.url)), headers=loggable_headers(headers)
        )
    # The idle timeout is not aiohttp's sock_read, which re-arms a timer on every read:
    # waiting for the headers has its own deadline below, the body an IdleWatch.
    timeout = aiohttp.ClientTimeout(
        total=None,
        connect=cfg.connect_timeout or None,
        sock_connect=cfg.connect_timeout or None,
    )
    ex.started = time.monotonic()
    proxy, proxy_headers = request.app[NETWORK].proxy_for(ex.url)
    try:
        upstream_cm = request.app[SESSION].request(
            request.method,
            ex.url,
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
            return await respond(ex, upstream)
    except RequestTooLarge:
        return too_large(cfg, ex.stream_id)
    except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
        return _upstream_failed(ex, 504, "upstream_timeout", exc)
    except (aiohttp.ClientSSLError, aiohttp.ServerFingerprintMismatch) as exc:
        return _upstream_failed(ex, 502, "upstream_tls_error", exc, reason=tls_reason(exc))
    except aiohttp.ClientProxyConnectionError as exc:
        return _upstream_failed(ex, 502, "proxy_unreachable", exc)
    except aiohttp.ClientConnectorError as exc:
        return _upstream_failed(ex, 502, "upstream_unreachable", exc)
    except (aiohttp.ClientError, OSError) as exc:
        if isinstance(exc.__cause__, RequestTooLarge):  # raised inside aiohttp's body writer
            return too_large(cfg, ex.stream_id)
        kind = (
            "proxy_refused" if isinstance(exc, aiohttp.ClientHttpProxyError) else "upstream_failed"
        )
        return _upstream_failed(ex, 502, kind, exc)
    finally:
        if span is not None:
            span.end()


async def _websocket(ex: Exchange, headers: CIMultiDict[str]) -> web.StreamResponse:
    """The WebSocket pass-through, with the same upstream error mapping as HTTP."""
    request = ex.request
    metrics = ex.metrics
    route = ex.route.name
    proxy, proxy_headers = request.app[NETWORK].proxy_for(ex.url)

    def done(summary: dict[str, Any]) -> None:
        metrics.ws_sessions.labels(route=route, close_code=str(summary["close_code"])).inc()
        metrics.ws_messages.labels(route=route, direction="to_upstream").inc(
            summary["messages_to_upstream"]
        )
        metrics.ws_messages.labels(route=route, direction="to_client").inc(
            summary["messages_to_client"]
        )

    try:
        return await relay_websocket(
            request,
            request.app[SESSION],
            ex.url,
            headers,
            proxy,
            proxy_headers,
            ex.cfg.max_request_body_bytes,
            ex.upstream_log,
            done,
        )
    except (TimeoutError, aiohttp.ServerTimeoutError) as exc:
        return _upstream_failed(ex, 504, "upstream_timeout", exc)
    except (aiohttp.ClientSSLError, aiohttp.ServerFingerprintMismatch) as exc:
        return _upstream_failed(ex, 502, "upstream_tls_error", exc, reason=tls_reason(exc))
    except aiohttp.ClientProxyConnectionError as exc:
        return _upstream_failed(ex, 502, "proxy_unreachable", exc)
    except aiohttp.ClientConnectorError as exc:
        return _upstream_failed(ex, 502, "upstream_unreachable", exc)
    except (aiohttp.ClientError, OSError) as exc:
        return _upstream_failed(ex, 502, "upstream_failed", exc)


def _upstream_failed(
    ex: Exchange, status: int, kind: str, exc: BaseException, reason: str | None = None
) -> web.Response:
    message = redact_url(str(exc) or type(exc).__name__)
    extra = {"reason": reason} if reason else {}
    log = ex.upstream_log
    if ex.ctx.request_model is not None:  # read from the body on its way up
        log = log.bind(request_model=ex.ctx.request_model)
    log.warning("upstream.error", kind=kind, error=message, status=status, **extra)
    metrics = ex.metrics
    metrics.upstream_errors.labels(kind=kind).inc()
    metrics.count_total("upstream_errors")
    metrics.route_upstream_errors.labels(route=ex.route.name, kind=kind).inc()
    if ex.span is not None:
        ex.span.failed(kind, status)
    if reason:
        message = f"{reason}: {message}"
    return json_error(status, kind, message, ex.stream_id)


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
