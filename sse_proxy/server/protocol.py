"""The HTTP server side of the proxy: aiohttp's, with clean answers to malformed requests and
request heads bounded as they arrive.

aiohttp answers every request it cannot parse with 400 and logs the exception with its
traceback at error level. A request whose header line (or request line) is over the limit
is a 431 by RFC 6585, and neither case is the proxy's error: each gets a JSON body and
one warning line without a traceback.

aiohttp bounds each header line, and the number of headers, but not a head as a whole
while it arrives: 128 header lines of 64 KiB each is 8 MiB held per connection before any
check could run. The connection handler here counts a head's bytes as they come and
refuses it (431, then the connection is closed) once it passes ``max_request_header_bytes``,
before the parser is given more; and a head must arrive whole within
``request_head_timeout`` of its first byte (408, closed), and a connection's first head
within that time of the accept (nginx's ``client_header_timeout``; closed without an
answer if not a byte came), so a client sending a head a byte at a time (slowloris), or
nothing at all, does not hold a connection for ever. Idle connections between requests
are aiohttp's keep-alive timeout (``keepalive_timeout``). Everything else is aiohttp's
own.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, cast

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.streams import EMPTY_PAYLOAD, StreamReader
from aiohttp.web_protocol import RequestHandler, _ErrInfo
from aiohttp.web_request import BaseRequest

from sse_proxy.obs.logs import get_logger
from sse_proxy.server.front_door import refuse_connect
from sse_proxy.server.keys import CONFIG
from sse_proxy.server.replies import json_error

__all__ = ["ProxyAppRunner"]


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


class _ProxyRequestHandler(RequestHandler):
    """aiohttp's connection handler: parse errors answered without a traceback, request
    heads bounded in size and time while they arrive."""

    __slots__ = ("_body", "_head_limit", "_head_seen", "_head_timeout", "_head_timer", "_shut")

    def __init__(self, *args: Any, head_limit: int, head_timeout: float, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._head_limit = head_limit
        self._head_timeout = head_timeout
        self._head_seen = 0  # bytes of the head being received
        self._head_timer: asyncio.TimerHandle | None = None
        self._body: StreamReader | None = None  # the body being received, if any
        self._shut = False  # refused: nothing more is read from this connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self._head_timeout:
            # The first head's deadline starts at accept (nginx's client_header_timeout): a
            # connection that sends nothing is closed then, not at the keep-alive timeout.
            self._head_timer = self._loop.call_later(self._head_timeout, self._too_slow)

    def data_received(self, data: bytes) -> None:
        if self._shut:
            return
        if self._payload_parser is not None or self._upgraded or not data:
            super().data_received(data)
            return
        body = self._body
        if body is not None and body.is_eof():
            self._body = body = None  # the body ended: what comes next is a head
        if body is None:
            seen = self._head_seen
            room = self._head_limit - seen
            if len(data) > room and not _ends_head(data, room):
                self._refuse(HeadTooLarge())  # before the parser holds any more of it
                return
            self._head_seen = seen + len(data)
        count = self._request_count
        super().data_received(data)
        if self._request_count != count:  # a head was parsed: this one is done
            self._head_seen = 0
            if self._head_timer is not None:
                self._head_timer.cancel()
                self._head_timer = None
            if self._messages:
                payload = self._messages[-1][1]
                if payload is not EMPTY_PAYLOAD and not payload.is_eof():
                    self._body = payload
        elif body is None and self._head_timer is None and self._head_timeout:
            # a head under way: it has until the deadline (a timer only for a head that
            # did not come whole in one read)
            self._head_timer = self._loop.call_later(self._head_timeout, self._too_slow)

    def connection_lost(self, exc: BaseException | None) -> None:
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        super().connection_lost(exc)

    def _too_slow(self) -> None:
        self._head_timer = None
        if self._shut:
            return
        if self._head_seen:
            self._refuse(HeadTimeout())
        elif not self._request_count:  # not a byte since accept: nothing to answer
            self._shut = True
            self.force_close()

    def _refuse(self, exc: HttpProcessingError) -> None:
        """Answer ``exc`` as aiohttp answers a parse error (then close), read no more."""
        self._shut = True
        if self._head_timer is not None:
            self._head_timer.cancel()
            self._head_timer = None
        self._messages.append(
            (_ErrInfo(status=exc.code, exc=exc, message=exc.message), EMPTY_PAYLOAD)
        )
        waiter = self._waiter
        if waiter is not None and not waiter.done():
            waiter.set_result(None)

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        status, kind, text = next(
            (answer for cls, answer in _ANSWERS.items() if isinstance(exc, cls)),
            (400, "bad_request", "the request is not valid HTTP/1.1"),
        )
        # The exception's own message quotes the raw request bytes: never logged.
        get_logger().warning("http.bad_request", status=status, kind=kind, error=type(exc).__name__)
        if request.writer.output_size > 0:
            raise ConnectionError("response already started; cannot send the error")
        resp = json_error(status, kind, text, None)
        resp.force_close()
        return resp


def _ends_head(data: bytes, room: int) -> bool:
    """Whether the head ends (a blank line) within the first ``room`` bytes of ``data``:
    the rest of the read is then a body, or the next request, not this head."""
    if room <= 0:
        return False
    return data.find(b"\r\n\r\n", 0, room + 4) >= 0 or data.find(b"\n\n", 0, room + 2) >= 0


class _ProxyServer(web.Server):
    """Builds :class:`_ProxyRequestHandler` for each connection."""

    head_limit: int = 64 << 10
    head_timeout: float = 0.0

    def __call__(self) -> RequestHandler:
        kwargs: dict[str, Any] = self._kwargs
        return _ProxyRequestHandler(
            self,
            loop=self._loop,
            head_limit=self.head_limit,
            head_timeout=self.head_timeout,
            **kwargs,
        )


RequestHandlerFn = Callable[[BaseRequest], Awaitable[web.StreamResponse]]


def unroutable_first(handler: RequestHandlerFn) -> RequestHandlerFn:
    """The server's request handler, with a target no route can match answered first: a
    CONNECT's authority or ``*`` has no path, so aiohttp's router would give its own plain
    404 before any handler (and so the front door, :class:`FrontDoorGuard`) saw it. A
    plain function that hands back the app's coroutine: no frame of its own on the stack
    of every request."""

    def handle(request: BaseRequest) -> Awaitable[web.StreamResponse]:
        if request.method == "CONNECT" or not request.raw_path.startswith("/"):
            refused = refuse_connect(cast(web.Request, request))
            if refused is not None:
                return _answered(refused)
        return handler(request)

    return handle


async def _answered(response: web.StreamResponse) -> web.StreamResponse:
    return response


class ProxyAppRunner(web.AppRunner):
    """``web.AppRunner`` whose server answers malformed requests and unroutable targets and
    bounds request heads as described above (the limits from the app's config)."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _ProxyServer
        cfg = self.app[CONFIG]
        assert isinstance(server, _ProxyServer)
        server.head_limit = cfg.max_request_header_bytes
        server.head_timeout = cfg.request_head_timeout
        server.request_handler = unroutable_first(server.request_handler)
        return server
