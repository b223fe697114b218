"""The HTTP server side of the proxy: aiohttp's, with clean answers to malformed requests,
request heads bounded as they arrive, and unroutable targets answered first.

aiohttp answers every request it cannot parse with 400 and logs the exception with its
traceback at error level. A request whose header line (or request line) is over the limit
is a 431 by RFC 6585, and neither case is the proxy's error: each gets a JSON body and
one warning line without a traceback.

aiohttp bounds each header line, and the number of headers, but not a head as a whole
while it arrives: 128 header lines of 64 KiB each is 8 MiB held per connection before any
check could run. The connection handler counts a head's bytes as they come and refuses it
(431, then the connection is closed) once it passes ``max_request_header_bytes``, before
the parser is given more; and a head must arrive whole within ``request_head_timeout`` of
its first byte (408, closed), and a connection's first head within that time of the
accept (nginx's ``client_header_timeout``; closed without an answer if not a byte came),
so a client sending a head a byte at a time (slowloris), or nothing at all, does not hold
a connection for ever. Idle connections between requests are aiohttp's keep-alive timeout
(``keepalive_timeout``). The handler itself is in :mod:`.aiohttp_internals`.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, cast

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong

from sse_proxy.obs.logs import get_logger
from sse_proxy.server.aiohttp_internals import BoundedHeads, bounded_runner
from sse_proxy.server.front_door import refuse_connect
from sse_proxy.server.keys import CONFIG
from sse_proxy.server.replies import json_error

__all__ = ["HeadTimeout", "HeadTooLarge", "proxy_app_runner"]


class HeadTooLarge(HttpProcessingError):
    """A request head (request line and header lines together) over the limit."""

    code = 431
    message = "request head over the limit"


class HeadTimeout(HttpProcessingError):
    """A request head that did not arrive whole in time."""

    code = 408
    message = "request head not received in time"


_ANSWERS: dict[type[HttpProcessingError], tuple[int, str, str]] = {
    HeadTooLarge: (431, "request_headers_too_large", "the request head is over the limit"),
    LineTooLong: (
        431,
        "request_headers_too_large",
        "a request header line or the request line is over the limit",
    ),
    HeadTimeout: (408, "request_head_timeout", "the request head did not arrive in time"),
}


def bad_request(request: web.BaseRequest, exc: HttpProcessingError) -> web.StreamResponse:
    """The answer to a request aiohttp could not parse (or the proxy refused while it
    arrived): JSON, one warning line, the connection closed after it."""
    status, kind, text = next(
        (answer for cls, answer in _ANSWERS.items() if isinstance(exc, cls)),
        (400, "bad_request", "the request is not valid HTTP/1.1"),
    )
    # The exception's own message quotes the raw request bytes: never logged.
    get_logger().warning("http.bad_request", status=status, kind=kind, error=type(exc).__name__)
    resp = json_error(status, kind, text, None)
    resp.force_close()
    return resp


RequestHandlerFn = Callable[[web.BaseRequest], Awaitable[web.StreamResponse]]


def unroutable_first(handler: RequestHandlerFn) -> RequestHandlerFn:
    """The server's request handler, with a target no route can match answered first: a
    CONNECT's authority or ``*`` has no path, so aiohttp's router would give its own plain
    404 before any handler (and so the front door, :class:`FrontDoorGuard`) saw it. A
    plain function that hands back the app's coroutine: no frame of its own on the stack
    of every request."""

    def handle(request: web.BaseRequest) -> Awaitable[web.StreamResponse]:
        if request.method == "CONNECT" or not request.raw_path.startswith("/"):
            refused = refuse_connect(cast(web.Request, request))
            if refused is not None:
                return _answered(refused)
        return handler(request)

    return handle


async def _answered(response: web.StreamResponse) -> web.StreamResponse:
    return response


def _answer_unroutable_first(server: web.Server) -> None:
    server.request_handler = unroutable_first(server.request_handler)


def proxy_app_runner(app: web.Application, **kwargs: Any) -> web.AppRunner:
    """A runner for ``app`` whose server answers malformed requests and unroutable targets
    and bounds request heads as described above (the limits from the app's config)."""
    cfg = app[CONFIG]
    bounds = BoundedHeads(
        limit=cfg.max_request_header_bytes,
        timeout=cfg.request_head_timeout,
        too_large=HeadTooLarge,
        too_slow=HeadTimeout,
        answer=bad_request,
    )
    return bounded_runner(app, bounds, _answer_unroutable_first, **kwargs)
