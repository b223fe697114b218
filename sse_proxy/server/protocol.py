"""The HTTP server side of the proxy: aiohttp's, with clean answers to malformed requests.

aiohttp answers every request it cannot parse with 400 and logs the exception with its
traceback at error level. A request whose header line (or request line) is over the limit
is a 431 by RFC 6585, and neither case is the proxy's error: each gets a JSON body and
one warning line without a traceback. Everything else is aiohttp's own behaviour.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web
from aiohttp.http_exceptions import HttpProcessingError, LineTooLong
from aiohttp.web_protocol import RequestHandler
from aiohttp.web_request import BaseRequest

from sse_proxy.obs.logs import get_logger
from sse_proxy.server.admission import json_error

__all__ = ["ProxyAppRunner"]


class _ProxyRequestHandler(RequestHandler):
    """aiohttp's connection handler, answering parse errors without a traceback."""

    def handle_error(
        self,
        request: BaseRequest,
        status: int = 500,
        exc: BaseException | None = None,
        message: str | None = None,
    ) -> web.StreamResponse:
        if not isinstance(exc, HttpProcessingError):
            return super().handle_error(request, status, exc, message)
        if isinstance(exc, LineTooLong):
            status, kind = 431, "request_headers_too_large"
            text = "a request header line or the request line is over the limit"
        else:
            status, kind = 400, "bad_request"
            text = "the request is not valid HTTP/1.1"
        # The exception's own message quotes the raw request bytes: never logged.
        get_logger().warning("http.bad_request", status=status, kind=kind, error=type(exc).__name__)
        if request.writer.output_size > 0:
            raise ConnectionError("response already started; cannot send the error")
        resp = json_error(status, kind, text, None)
        resp.force_close()
        return resp


class _ProxyServer(web.Server):
    """Builds :class:`_ProxyRequestHandler` for each connection."""

    def __call__(self) -> RequestHandler:
        kwargs: dict[str, Any] = self._kwargs
        return _ProxyRequestHandler(self, loop=self._loop, **kwargs)


class ProxyAppRunner(web.AppRunner):
    """``web.AppRunner`` whose server answers malformed requests as described above."""

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _ProxyServer
        return server
