"""Everything the proxy does with aiohttp's private internals, in one place.

Four parts of the shell lean on aiohttp's internals: the router remembers what it
resolved, the upstream body is read without per-chunk bookkeeping, the connection handler
bounds request heads as they arrive (and answers parse errors without a traceback), and
the upstream request copies its headers at C speed; a fifth hands the client's body
writes past ``StreamResponse.write``. Each was written against the aiohttp versions in
:data:`INTERNALS_KNOWN`. On any other version (:data:`INTERNALS_OK` false) each falls back
to aiohttp's public behaviour: the default router, aiohttp's body reader, its connection
handler (its own limits on header lines and counts, a 400 for a malformed request),
aiohttp's ``ClientRequest`` and ``StreamResponse.write``. What is sent and relayed is the
same either way but for the speed, the head bounds, and an upstream body that breaks: the
lean reader relays the bytes that came before the break, aiohttp's may not.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

import aiohttp
from aiohttp import hdrs, web
from aiohttp.http_exceptions import HttpProcessingError
from aiohttp.http_writer import StreamWriter
from aiohttp.streams import EMPTY_PAYLOAD, StreamReader
from aiohttp.web_protocol import RequestHandler, _ErrInfo
from aiohttp.web_request import BaseRequest
from aiohttp.web_urldispatcher import AbstractRoute, UrlDispatcher, UrlMappingMatchInfo
from multidict import CIMultiDict, istr

from sse_proxy.cache import BoundedCache, size_of

__all__ = [
    "AIOHTTP_VERSION",
    "INTERNALS_KNOWN",
    "INTERNALS_OK",
    "NOT_ADDED",
    "REQUEST_CLASS",
    "RESOLVED_BUDGET",
    "BoundedHeads",
    "LeanBody",
    "UpstreamRequest",
    "bounded_runner",
    "chunked_writer",
    "lean_body",
    "remember",
    "remember_resolutions",
]


def _version(text: str) -> tuple[int, int, int]:
    """``"3.14.0rc1"`` -> ``(3, 14, 0)``: the release numbers, anything after them ignored."""
    m = re.match(r"(\d+)\.(\d+)(?:\.(\d+))?", text)
    if m is None:
        return (0, 0, 0)
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0))


AIOHTTP_VERSION: Final = _version(aiohttp.__version__)
INTERNALS_KNOWN: Final = ((3, 14, 0), (3, 15, 0))
"""The aiohttp versions (from, up to but not including) whose internals this module was
written against and is tested on (the connection handler's names are 3.14's)."""
INTERNALS_OK: Final = INTERNALS_KNOWN[0] <= AIOHTTP_VERSION < INTERNALS_KNOWN[1]


# ------------------------------------------------------------------ the router

RESOLVED_BUDGET: Final = 4 << 20
"""Bytes of (method, path) pairs and their matches remembered; past it, the memory starts
again empty (the paths are the client's: bounded in bytes, not entries)."""

_Resolved = tuple[dict[str, str], AbstractRoute]
_Cache = BoundedCache[tuple[str, str], _Resolved]


class _FirstSeen(UrlMappingMatchInfo):
    """A plain match of a path not remembered yet: :func:`remember` keeps it."""

    __slots__ = ("_cache", "_key")

    _cache: _Cache
    _key: tuple[str, str]

    def keep(self) -> None:
        match = dict(self)
        cost = size_of(*self._key, *match.values())
        self._cache.put(self._key, (match, self._route), cost)


class _RememberingDispatcher(UrlDispatcher):
    """aiohttp's router, with the outcome of a path it resolved before remembered.

    aiohttp resolves every request from scratch, walking the path's segments back to ``/``;
    with the proxy's catch-all at ``/`` that is every segment of every request. Resolution
    is a pure function of the method and the path once the router is frozen (with no
    domain or sub-app resources, which look at more: with any, nothing is remembered), so a
    hit is what aiohttp would find. A path is remembered only once its request is let in
    (:func:`remember`, called by the front door): requests it refuses leave nothing."""

    _resolved: _Cache

    async def resolve(self, request: web.Request) -> UrlMappingMatchInfo:
        key = (request.method, request.rel_url.path_safe)
        hit = self._resolved.get(key)
        if hit is not None:
            return UrlMappingMatchInfo(*hit)
        match = await super().resolve(request)
        # only a plain match (not an error, not a sub-app's), on a router of such routes
        if type(match) is UrlMappingMatchInfo and not match.apps:
            if self._matched_sub_app_resources:
                return match
            first = _FirstSeen(dict(match), match.route)
            first._cache, first._key = self._resolved, key
            return first
        return match


def remember(request: web.Request) -> None:
    """Remember how ``request``'s path resolved (a request let in), if it is not yet."""
    match = request.match_info
    if type(match) is _FirstSeen:
        match.keep()


def remember_resolutions(app: web.Application) -> bool:
    """Make ``app``'s router remember what it resolved (before the app starts); False (the
    router left as it is) on an aiohttp this module does not know."""
    router = app.router
    if not INTERNALS_OK or type(router) is not UrlDispatcher:
        return False
    router.__class__ = _RememberingDispatcher
    assert isinstance(router, _RememberingDispatcher)
    router._resolved = BoundedCache(RESOLVED_BUDGET)
    return True


# ------------------------------------------------------------------ the upstream's body

_BODY_RELIES_ON: Final = (
    "_buffer",
    "_buffer_offset",
    "_size",
    "_cursor",
    "_eof",
    "_exception",
    "_http_chunk_splits",
    "_protocol",
    "_timer",
)


class LeanBody(StreamReader):
    """aiohttp's body reader for ``readany`` alone.

    An LLM API writes one HTTP chunk per event. For each, aiohttp's reader records the
    chunk's boundaries (for ``readchunk``, which the relay never calls), and ``readany``
    drains its buffer chunk by chunk, asking the protocol to resume reading after each.
    This one keeps no boundaries and, draining, takes the whole buffer at once and resumes
    reading only if it was paused. Everything else (``feed_data``, ``feed_eof``,
    exceptions, EOF callbacks, the high-water pause) is aiohttp's own, but for one order:
    bytes that arrived before the connection broke are returned before its error, where
    aiohttp's ``readany`` raises first and drops them (an upstream's last events before a
    reset, whose ids a resuming client needs)."""

    __slots__ = ()

    def begin_http_chunk_receiving(self) -> None:
        """No chunk boundaries are kept: ``readchunk`` is not used on this body."""

    def end_http_chunk_receiving(self) -> None:
        """No chunk boundaries; ``feed_data`` has woken the reader already."""

    async def readany(self) -> bytes:
        while not self._buffer and not self._eof:
            if self._exception is not None:
                raise self._exception
            await self._wait("readany")
        if not self._buffer and self._exception is not None:
            raise self._exception
        buffer = self._buffer
        if not buffer or self._buffer_offset:  # (at EOF; or a partial read before)
            return self._read_nowait(-1)
        self._timer.assert_timeout()
        data = buffer.popleft() if len(buffer) == 1 else b"".join(buffer)
        buffer.clear()
        self._size = 0
        self._cursor += len(data)
        protocol = self._protocol
        if getattr(protocol, "_reading_paused", True):
            protocol.resume_reading()
        return data


_LEAN_USABLE: Final = INTERNALS_OK and all(
    name in getattr(StreamReader, "__slots__", ()) for name in _BODY_RELIES_ON
)


def lean_body(content: StreamReader) -> bool:
    """Make ``content`` (a response's body, not yet read) a :class:`LeanBody` if it is
    aiohttp's plain reader on an aiohttp this module knows; True if it now is one."""
    if type(content) is LeanBody:
        return True
    if not _LEAN_USABLE or type(content) is not StreamReader:
        return False
    content.__class__ = LeanBody
    content._http_chunk_splits = None  # boundaries the parser noted before: not wanted
    return True


# ------------------------------------------------------------------ the upstream request

NOT_ADDED: Final = frozenset(map(istr, ("Accept-Encoding", "User-Agent", "Content-Type")))
"""What aiohttp would add to a request that lacks it and the proxy does not: the client's
request goes up as it came (HTTP and WebSocket alike)."""
_SKIPPED: Final[CIMultiDict[None]] = CIMultiDict((name, None) for name in sorted(NOT_ADDED))
_ADDED: Final = tuple(
    (name, value)
    for name, value in aiohttp.ClientRequest.DEFAULT_HEADERS.items()
    if name not in NOT_ADDED
)


class UpstreamRequest(aiohttp.ClientRequest):
    """aiohttp's client request, its headers copied at C speed: aiohttp copies them one by
    one in Python (twice, the session's defaults merged in first) and builds the headers it
    must not add anew for every request. What it sends is the same, which the tests check
    against aiohttp's own class; anything this does not expect is left to aiohttp."""

    def update_headers(self, headers: Any) -> None:
        if type(headers) is not CIMultiDict or hdrs.HOST in headers:
            super().update_headers(headers)
            return
        host = self.url.host_port_subcomponent
        assert host is not None  # (an absolute URL: the route's upstream)
        self.headers = merged = CIMultiDict(((hdrs.HOST, host),))
        merged.extend(headers)

    def update_auto_headers(self, skip_auto_headers: Any) -> None:
        if skip_auto_headers != NOT_ADDED:
            super().update_auto_headers(skip_auto_headers)
            return
        self._skip_auto_headers = _SKIPPED  # (only read: shared)
        headers = self.headers
        for name, value in _ADDED:
            if name not in headers:
                headers[name] = value


REQUEST_CLASS: Final[type[aiohttp.ClientRequest]] = (
    UpstreamRequest if INTERNALS_OK else aiohttp.ClientRequest
)
"""The client session's request class."""


# ------------------------------------------------------------------ the client's body


def chunked_writer(
    request: web.BaseRequest, resp: web.StreamResponse
) -> tuple[StreamWriter, asyncio.Transport] | None:
    """The writer and transport of a response whose headers have gone out, if aiohttp frames
    its body as HTTP/1.1 chunks, uncompressed, so that a chunk can be framed and written
    past ``StreamResponse.write`` (its byte counters kept as aiohttp keeps them); None for
    anything else, and on an aiohttp this module does not know."""
    writer = request.writer
    transport = request.transport
    if (
        INTERNALS_OK
        and type(writer) is StreamWriter
        and transport is not None
        and writer.chunked
        and writer.length is None
        and not resp.compression
    ):
        return writer, transport
    return None


# ------------------------------------------------------------------ the connection handler


@dataclass(frozen=True, slots=True, kw_only=True)
class BoundedHeads:
    """What the bounded connection handler needs from the proxy: its limits, the errors it
    raises for a head over the limit or too slow, and the answer to a malformed request."""

    limit: int
    timeout: float
    too_large: Callable[[], HttpProcessingError]
    too_slow: Callable[[], HttpProcessingError]
    answer: Callable[[BaseRequest, HttpProcessingError], web.StreamResponse]


class _BoundedRequestHandler(RequestHandler):
    """aiohttp's connection handler: parse errors answered by the proxy, request heads
    bounded in size and time while they arrive, before the parser holds them."""

    __slots__ = ("_body", "_bounds", "_head_seen", "_head_timer", "_shut")

    def __init__(self, *args: Any, bounds: BoundedHeads, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._bounds = bounds
        self._head_seen = 0  # bytes of the head being received
        self._head_timer: asyncio.TimerHandle | None = None
        self._body: StreamReader | None = None  # the body being received, if any
        self._shut = False  # refused: nothing more is read from this connection

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        super().connection_made(transport)
        if self._bounds.timeout:
            # The first head's deadline starts at accept (nginx's client_header_timeout): a
            # connection that sends nothing is closed then, not at the keep-alive timeout.
            self._head_timer = self._loop.call_later(self._bounds.timeout, self._too_slow)

    def data_received(self, data: bytes) -> None:
        if self._shut:
            return
        if self._payload_parser is not None or self._upgraded or not data:
            super().data_received(data)
            return
        body = self._body
        if body is not None and body.is_eof():
            self._body = body = None  # the body ended: what comes next is a head
        bounds = self._bounds
        if body is None:
            seen = self._head_seen
            room = bounds.limit - seen
            if len(data) > room and not _ends_head(data, room):
                self._refuse(bounds.too_large())  # before the parser holds any more of it
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
        elif body is None and self._head_timer is None and bounds.timeout:
            # a head under way: it has until the deadline (a timer only for a head that
            # did not come whole in one read)
            self._head_timer = self._loop.call_later(bounds.timeout, self._too_slow)

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
            self._refuse(self._bounds.too_slow())
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
        if request.writer.output_size > 0:
            raise ConnectionError("response already started; cannot send the error")
        return self._bounds.answer(request, exc)


def _ends_head(data: bytes, room: int) -> bool:
    """Whether the head ends (a blank line) within the first ``room`` bytes of ``data``:
    the rest of the read is then a body, or the next request, not this head."""
    if room <= 0:
        return False
    return data.find(b"\r\n\r\n", 0, room + 4) >= 0 or data.find(b"\n\n", 0, room + 2) >= 0


class _BoundedServer(web.Server):
    """Builds a :class:`_BoundedRequestHandler` for each connection."""

    bounds: BoundedHeads

    def __call__(self) -> RequestHandler:
        kwargs: dict[str, Any] = self._kwargs
        return _BoundedRequestHandler(self, loop=self._loop, bounds=self.bounds, **kwargs)


RunnerHook = Callable[[web.Server], None]


class _BoundedRunner(web.AppRunner):
    """``web.AppRunner`` whose server bounds request heads (:class:`BoundedHeads`)."""

    def __init__(
        self, app: web.Application, bounds: BoundedHeads, hook: RunnerHook, **kwargs: Any
    ) -> None:
        super().__init__(app, **kwargs)
        self._bounds = bounds
        self._hook = hook

    async def _make_server(self) -> web.Server:
        server = await super()._make_server()
        server.__class__ = _BoundedServer
        assert isinstance(server, _BoundedServer)
        server.bounds = self._bounds
        self._hook(server)
        return server


class _PlainRunner(web.AppRunner):
    """``web.AppRunner`` as it is, the hook run on its server once ``setup`` made it."""

    def __init__(
        self, app: web.Application, bounds: BoundedHeads, hook: RunnerHook, **kwargs: Any
    ) -> None:
        super().__init__(app, **kwargs)
        self._hook = hook

    async def setup(self) -> None:
        await super().setup()
        server = self.server
        assert server is not None
        self._hook(server)


def bounded_runner(
    app: web.Application, bounds: BoundedHeads, hook: RunnerHook, **kwargs: Any
) -> web.AppRunner:
    """An app runner for ``app`` whose server bounds request heads by ``bounds``; ``hook``
    is given the server once it is made (to wrap its request handler). On an aiohttp this
    module does not know, aiohttp's own server, with the hook."""
    cls = _BoundedRunner if INTERNALS_OK else _PlainRunner
    return cls(app, bounds, hook, **kwargs)
