"""Admission: where a request is admitted as an :class:`Exchange` or refused.

Every refusal made before anything is forwarded lives here, in the order it is checked,
and every error the proxy answers itself has the one shape :func:`json_error` builds.
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import AsyncIterator, Awaitable, Callable
from itertools import chain
from typing import Any, Final

from aiohttp import HttpVersion10, web
from yarl import URL

from sse_proxy.config import Config
from sse_proxy.errors import ChaosSpecError
from sse_proxy.hosts import FrontDoor, Refusal, shown
from sse_proxy.names import CHAOS_HEADER, SEED_HEADER, STREAM_ID_HEADER
from sse_proxy.obs.logs import get_logger, new_stream_id
from sse_proxy.obs.redact import scrub_held
from sse_proxy.rechunk.spec import ChaosSpec, parse_chaos_header
from sse_proxy.server.context import RequestContext
from sse_proxy.server.exchange import Exchange
from sse_proxy.server.keys import ProxyParts
from sse_proxy.server.routes import PathRefused, Route, RouteTable, resolve_dot_segments

__all__ = [
    "FrontDoorGuard",
    "RequestTooLarge",
    "admit",
    "chaos_allowed",
    "chaos_spec",
    "defer_continue",
    "json_error",
    "refuse_connect",
    "request_body",
    "response_starts",
    "too_large",
    "whole_body",
]


class RequestTooLarge(Exception):
    """The request body outgrew ``max_request_body_bytes``."""


def json_error(
    status: int, kind: str, message: str, stream_id: str | None, *, setting: str | None = None
) -> web.Response:
    """The one shape of every error the proxy answers itself: ``{"error": {type, message,
    stream_id}}``, the stream id in its header too (none for the reserved paths and the
    front door's refusals, which are not proxied requests); ``setting``: the one that would
    have allowed the request. No value the proxy holds is ever in it."""
    error = {"type": kind, "message": scrub_held(message)}
    if setting is not None:
        error["setting"] = setting
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


# ---------------------------------------------------------------------- the front door
# (the policy, and why: sse_proxy/hosts.py)

_CORS_ORIGIN: Final = web.RequestKey("cors_origin", str)
_EXPECTS_CONTINUE: Final = web.RequestKey("expects_continue", bool)
_ANSWERED: Final = web.RequestKey("answered", bool)
_EXPOSED = ", ".join((STREAM_ID_HEADER, SEED_HEADER))


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class FrontDoorGuard:
    """The front door: a Host the proxy serves, no foreign origin, no CONNECT and no
    absolute-form target (``listen``: the listener's address, when not ``cfg.host``: the
    admin listener's). ``in_flight``: where the handler tasks of the requests let in are
    kept while they run (a shutdown waits for them).

    The proxy's own app checks each request in its handlers (:meth:`refusal` at the top of
    the forwarding one, :meth:`around` the others): a middleware stays on the stack of
    every request, and each resumption of a forwarded request's start passed through it
    and through the layer aiohttp adds beside any middleware (issue 23). A target no route
    can match (CONNECT's authority, ``*``) is answered by the server
    (``protocol.unroutable_first``). The admin listener's app, which forwards nothing, has
    it as a middleware (:meth:`middleware`)."""

    __slots__ = ("_door", "in_flight")

    def __init__(
        self,
        cfg: Config,
        *,
        listen: str | None = None,
        in_flight: set[asyncio.Task[Any]] | None = None,
    ) -> None:
        self._door = FrontDoor(listen or cfg.host, cfg.allowed_hosts, cfg.allow_origins)
        self.in_flight = in_flight

    def refusal(self, request: web.Request) -> web.Response | None:
        """The answer that refuses ``request`` (a CORS preflight's answer too), or None:
        let in (an allowed origin noted for :func:`response_starts`)."""
        not_served = refuse_connect(request)
        if not_served is not None:
            return not_served
        headers = request.headers
        door = self._door
        host = door.check_host(headers.getall("Host", []), request.version <= HttpVersion10)
        if isinstance(host, Refusal):
            return _refused(request, host)
        origin = door.check_origin(
            headers.getall("Origin", []), headers.get("Sec-Fetch-Site"), host
        )
        if isinstance(origin, Refusal):
            return _refused(request, origin)
        if origin is not None:
            request[_CORS_ORIGIN] = origin
            if request.method == "OPTIONS" and "Access-Control-Request-Method" in headers:
                return _preflight(request, origin)
        return None

    def around(self, handler: Handler) -> Handler:
        """``handler`` behind the front door."""

        @functools.wraps(handler)
        async def guarded(request: web.Request) -> web.StreamResponse:
            return await self.let_in(request, handler)

        return guarded

    async def let_in(self, request: web.Request, handler: Handler) -> web.StreamResponse:
        """The refusal of ``request``, or ``handler``'s answer, its task in ``in_flight``
        meanwhile: what :meth:`around` and :meth:`middleware` both do."""
        refused = self.refusal(request)
        if refused is not None:
            return refused
        in_flight = self.in_flight
        if in_flight is None:
            return await handler(request)
        task = asyncio.current_task()
        assert task is not None  # a handler runs in a task
        in_flight.add(task)
        try:
            return await handler(request)
        finally:
            in_flight.discard(task)

    def middleware(self) -> Any:
        """The front door as a middleware, in front of every route of an app."""
        let_in = self.let_in

        @web.middleware
        async def front_door(request: web.Request, handler: Handler) -> web.StreamResponse:
            return await let_in(request, handler)

        return front_door


def _refused(request: web.Request, refusal: Refusal) -> web.Response:
    """One warning line and the JSON error; nothing was forwarded."""
    headers = request.headers
    get_logger().warning(
        "frontdoor.refused",
        status=refusal.status,
        kind=refusal.kind,
        setting=refusal.setting,
        method=request.method,
        path=shown(request.path),
        host=shown(", ".join(headers.getall("Host", []))) or None,
        origin=shown(", ".join(headers.getall("Origin", []))) or None,
        fetch_site=shown(headers.get("Sec-Fetch-Site")) or None,
        remote=request.remote,
    )
    resp = json_error(refusal.status, refusal.kind, refusal.message, None, setting=refusal.setting)
    if refusal.status == 400:
        resp.force_close()
    return resp


def _preflight(request: web.Request, origin: str) -> web.Response:
    """A CORS preflight from an allowed origin, answered here (never forwarded: it carries
    no credentials and the upstream's CORS policy is not the proxy's)."""
    headers = request.headers
    allow = {
        "Access-Control-Allow-Origin": origin,
        "Access-Control-Allow-Methods": shown(headers.get("Access-Control-Request-Method")),
        "Access-Control-Max-Age": "600",
        "Vary": "Origin, Access-Control-Request-Method, Access-Control-Request-Headers",
    }
    if "Access-Control-Request-Headers" in headers:
        allow["Access-Control-Allow-Headers"] = shown(headers["Access-Control-Request-Headers"])
    if headers.get("Access-Control-Request-Private-Network", "").lower() == "true":
        allow["Access-Control-Allow-Private-Network"] = "true"
    return web.Response(status=204, headers=allow)


async def response_starts(request: web.Request, response: web.StreamResponse) -> None:
    """``on_response_prepare``: no ``100 Continue`` once an answer starts, and a response to
    an allowed origin says so (it replaces the upstream's own CORS answer, which is about
    the upstream's origin, not the proxy's)."""
    headers = request.headers
    # (each request.get of a key it lacks raises and catches a KeyError: only asked when
    # the header it depends on came)
    if "Expect" in headers:  # an expectation is met only before an answer starts
        request[_ANSWERED] = True
    if "Origin" not in headers:  # the front door allows an origin only when one is sent
        return
    origin = request.get(_CORS_ORIGIN)
    if origin is None:
        return
    response.headers["Access-Control-Allow-Origin"] = origin
    response.headers.add("Vary", "Origin")
    exposed = response.headers.get("Access-Control-Expose-Headers")
    response.headers["Access-Control-Expose-Headers"] = (
        f"{exposed}, {_EXPOSED}" if exposed else _EXPOSED
    )


async def defer_continue(request: web.Request) -> None:
    """The proxy route's ``expect_handler``: ``Expect: 100-continue`` is answered only once
    the request is admitted and its upstream request is under way (:func:`request_body`),
    so a refusal (403, 413, 421, 502, ...) reaches a client that has sent no body. The
    expectation is the proxy's to meet: it is not forwarded."""
    expect = request.headers.get("Expect", "").strip().lower()
    if request.version <= HttpVersion10:
        return
    if expect != "100-continue":
        raise web.HTTPExpectationFailed(text=f"unknown expectation {shown(expect)!r}\n")
    request[_EXPECTS_CONTINUE] = True


def refuse_connect(request: web.Request) -> web.Response | None:
    """Not an open proxy, whatever the Host says: CONNECT (it never matches a route, its
    target has no path) and targets that are not a path, refused before the front door
    (which calls this first)."""
    if request.method == "CONNECT":
        return json_error(
            405, "method_not_allowed", "CONNECT is refused: not an open proxy", new_stream_id()
        )
    if not request.raw_path.startswith("/"):
        return _absolute_form(new_stream_id())
    return None


def _absolute_form(stream_id: str) -> web.Response:
    return json_error(
        400, "absolute_form_refused", "absolute-form request targets are refused", stream_id
    )


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
        ctx=RequestContext.from_headers(request.headers, route.name),
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


WHOLE_BODY_BYTES: Final = 64 << 10
"""A body declared by a length up to this is read whole and sent on with that length."""


async def whole_body(request: web.Request) -> bytes | None:
    """A small body whose length the client declared, read whole (it came with the head,
    as an LLM request's JSON does): the upstream gets it in one write with its length,
    where a streamed one costs both sides a generator and chunked framing. None: stream it
    (:func:`request_body`): no length, a large one, or a ``100-continue`` to meet first."""
    length = request.content_length
    if length is None or length > WHOLE_BODY_BYTES:
        return None
    if "Expect" in request.headers and request.get(_EXPECTS_CONTINUE):
        return None
    content = request.content
    if content.is_eof():  # all of it came with the head: taken as it is, no read loop
        return content.read_nowait()
    return await request.read()


async def request_body(request: web.Request, limit: int) -> AsyncIterator[bytes]:
    """The request body streamed through, not read whole; stops past ``limit`` bytes.

    A client that expects ``100 Continue`` gets it here, when the upstream request first
    asks for the body (:func:`defer_continue`), unless an answer has started already.
    """
    if (
        "Expect" in request.headers
        and request.get(_EXPECTS_CONTINUE)
        and not request.get(_ANSWERED)
    ):
        request[_EXPECTS_CONTINUE] = False
        writer = request.writer
        await writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        writer.output_size = 0  # as aiohttp's own expect handler: the answer is still to come
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
