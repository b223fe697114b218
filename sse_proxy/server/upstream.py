"""Opening the upstream request (HTTP or WebSocket), with one map from the foreign errors
that can fail it to :class:`~sse_proxy.errors.UpstreamError`, and one reply to those."""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator
from typing import Any, Final

import aiohttp
from aiohttp import web
from multidict import CIMultiDict

from sse_proxy.errors import UpstreamError, UpstreamTimeout
from sse_proxy.obs.logs import get_logger
from sse_proxy.obs.redact import redact_url
from sse_proxy.server.aiohttp_internals import NOT_ADDED, REQUEST_CLASS
from sse_proxy.server.deadlines import HeadDeadline
from sse_proxy.server.exchange import Exchange
from sse_proxy.server.headers import loggable_headers, request_headers_for_upstream
from sse_proxy.server.keys import CONFIG, NETWORK, PARTS
from sse_proxy.server.network import tls_reason
from sse_proxy.server.relay import respond
from sse_proxy.server.replies import json_error, too_large
from sse_proxy.server.request_body import RequestTooLarge, request_body, whole_body
from sse_proxy.server.watchdog import Watchdog
from sse_proxy.server.websocket import is_websocket_upgrade, relay_websocket

__all__ = ["forward", "map_upstream_errors", "session_ctx", "upstream_failed"]


async def forward(ex: Exchange) -> web.StreamResponse:
    """Open the upstream request of an admitted exchange and relay its response; a failure
    to open it is answered here, once, for HTTP and WebSocket alike."""
    request = ex.request
    ex.owe_first_byte(ex.parts.state.backlog)
    headers = ex.route.upstream_headers(request_headers_for_upstream(request.headers))
    try:
        if is_websocket_upgrade(request):
            ex.first_byte_sent()  # a session, not a response: nothing to put first
            ex.count_route()
            return await _websocket(ex, headers)
        return await _http(ex, headers)
    except RequestTooLarge:
        return too_large(ex.cfg, ex.stream_id)
    except UpstreamError as err:
        return upstream_failed(ex, err)
    finally:
        ex.first_byte_sent()
        ex.count_route()  # (once: a stream its observers counted is not counted again)
        if ex.span is not None and not ex.span_kept:
            ex.span.end()


async def _http(ex: Exchange, headers: CIMultiDict[str]) -> web.StreamResponse:
    request = ex.request
    cfg = ex.cfg
    ctx = ex.ctx
    data: bytes | AsyncIterator[bytes] | None = None
    spec = ex.spec
    if spec is not None and spec.variants:  # some variants depend on what the request asks
        ctx.keep_request = True
    if request.body_exists:
        json_body = ctx.keep_request or "json" in request.headers.get("Content-Type", "")
        whole = await whole_body(request)
        if whole is not None:
            data = whole
            if json_body:
                ctx.read_body(whole)
        else:
            data = request_body(request, cfg.max_request_body_bytes)
            if json_body:
                data = ctx.peek(data)
    parts = ex.parts
    ex.span = parts.tracing.start(request, ctx, ex.stream_id)
    ex.upstream_context = True
    if cfg.log_level == "debug":
        ex.upstream_log.debug(
            "upstream.request", url=redact_url(str(ex.url)), headers=loggable_headers(headers)
        )
    ex.started = time.monotonic()
    hop = parts.network.proxy_for(ex.url)
    if hop.request_headers:
        headers.update(hop.request_headers)
    with map_upstream_errors():
        session = parts.session
        assert session is not None  # (set while the app runs)
        upstream_cm = session.request(
            request.method,
            ex.url,
            headers=headers,
            data=data,
            allow_redirects=False,
            timeout=parts.upstream_timeout,
            proxy=hop.proxy,
            proxy_headers=hop.proxy_headers,
            trace_request_ctx={"exchange": ex},
        )
        # the wait for the response's head has the idle timeout too (the body: an IdleWatch)
        deadline = HeadDeadline(parts, cfg.idle_timeout) if cfg.idle_timeout else None
        try:
            upstream = await upstream_cm
        except BaseException as exc:
            if deadline is not None:
                deadline.cancel()
                if isinstance(exc, asyncio.CancelledError) and deadline.expired():
                    raise TimeoutError("no response head within the idle timeout") from None
            raise
        # the head's deadline goes on as the body's idle watch: one deadline, not two
        ex.idle_watch = None if deadline is None else deadline.hand_over()
        try:
            async with upstream:  # released (or closed, if the relay broke off) at the end
                return await respond(ex, upstream)
        finally:
            if ex.idle_watch is not None:  # (a relay that took it over has cancelled it)
                ex.idle_watch.cancel()


async def _websocket(ex: Exchange, headers: CIMultiDict[str]) -> web.StreamResponse:
    metrics = ex.metrics
    route = ex.route.name

    def done(summary: dict[str, Any]) -> None:
        metrics.ws_sessions.labels(route=route, close_code=str(summary["close_code"])).inc()
        metrics.ws_messages.labels(route=route, direction="to_upstream").inc(
            summary["messages_to_upstream"]
        )
        metrics.ws_messages.labels(route=route, direction="to_client").inc(
            summary["messages_to_client"]
        )

    with map_upstream_errors():
        return await relay_websocket(ex, headers, done)


# The one exception map (httpcore's map_exceptions), for HTTP and WebSocket: the first row
# whose types match wins, so TLS and proxy failures come before the connector errors they
# subclass, and the catch-all comes last.
_UPSTREAM_ERRORS: Final[tuple[tuple[tuple[type[BaseException], ...], str], ...]] = (
    ((TimeoutError, aiohttp.ServerTimeoutError), "upstream_timeout"),
    ((aiohttp.ClientSSLError, aiohttp.ServerFingerprintMismatch), "upstream_tls_error"),
    ((aiohttp.ClientProxyConnectionError,), "proxy_unreachable"),
    ((aiohttp.ClientConnectorError,), "upstream_unreachable"),
    ((aiohttp.ClientHttpProxyError,), "proxy_refused"),
    ((aiohttp.ClientError, OSError), "upstream_failed"),
)


class _MapUpstreamErrors:
    """``with map_upstream_errors():`` aiohttp's and the OS's errors inside as one
    :class:`UpstreamError`. A class, not a generator context manager: every request opens
    its upstream inside one, and a generator's set-up would be a part of every start.

    A body that outgrew the limit inside aiohttp's body writer comes out as aiohttp's
    error caused by :class:`RequestTooLarge`: that is re-raised as what it is.
    """

    __slots__ = ()

    def __call__(self) -> _MapUpstreamErrors:
        return self

    def __enter__(self) -> None:
        return None

    def __exit__(self, _type: object, exc: BaseException | None, _tb: object) -> None:
        if not isinstance(exc, (aiohttp.ClientError, OSError)):
            return
        if isinstance(exc.__cause__, RequestTooLarge):
            raise exc.__cause__ from None
        message = str(exc) or type(exc).__name__
        for types, kind in _UPSTREAM_ERRORS:
            if isinstance(exc, types):
                if kind == "upstream_timeout":
                    raise UpstreamTimeout(kind, message) from exc
                reason = tls_reason(exc) if kind == "upstream_tls_error" else None
                raise UpstreamError(kind, message, reason=reason) from exc
        # (the last row matches any error that gets here: nothing else is let through)


map_upstream_errors: Final = _MapUpstreamErrors()


def upstream_failed(ex: Exchange, err: UpstreamError) -> web.Response:
    """An upstream failure, once: the reply, the ``upstream.error`` line, the metrics and
    the span's status."""
    kind, status, reason = err.kind, err.status, err.reason
    message = redact_url(str(err))
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
        request_class=REQUEST_CLASS,
        skip_auto_headers=NOT_ADDED,
        trace_configs=[_connection_trace()] if cfg.log_level == "debug" else None,
        connector=connector,
        auto_decompress=False,
        cookie_jar=aiohttp.DummyCookieJar(),
        timeout=aiohttp.ClientTimeout(total=None, connect=cfg.connect_timeout or None),
    ) as session:
        parts = app[PARTS]
        parts.session = session
        parts.loop = loop = asyncio.get_running_loop()
        parts.watchdog = Watchdog.of(loop)
        # The idle timeout is not aiohttp's sock_read, which re-arms a timer on every
        # read: waiting for the headers has its own deadline (_http), the body an IdleWatch.
        parts.upstream_timeout = aiohttp.ClientTimeout(
            total=None,
            connect=cfg.connect_timeout or None,
            sock_connect=cfg.connect_timeout or None,
        )
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
    if isinstance(request_ctx, dict) and "exchange" in request_ctx:
        return request_ctx["exchange"].upstream_log
    return get_logger()
