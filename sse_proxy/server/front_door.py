"""The front door: which requests are let in before anything is forwarded.

The policy (:class:`FrontDoor`) is pure: which Hosts and Origins the proxy serves, decided
from the parsed values (:mod:`sse_proxy.hosts`). The guard (:class:`FrontDoorGuard`)
applies it to aiohttp requests, answers CORS for allowed origins, and refuses what makes
an open proxy (CONNECT, absolute-form targets).
"""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import HttpVersion10, web

from sse_proxy.cache import BoundedCache, size_of
from sse_proxy.hosts import Authority, is_loopback, parse_host, parse_origin, shown
from sse_proxy.names import SEED_HEADER, STREAM_ID_HEADER
from sse_proxy.obs.logs import get_logger, new_stream_id
from sse_proxy.server.aiohttp_internals import remember
from sse_proxy.server.replies import json_error
from sse_proxy.server.request_body import ANSWERED
from sse_proxy.settings import Config

__all__ = ["FrontDoor", "FrontDoorGuard", "Refusal", "refuse_connect", "response_starts"]


_HOSTS_SETTING: Final = "allowed_hosts"


_ORIGINS_SETTING: Final = "allow_origins"


SERVED_BUDGET = 1 << 20
"""Bytes of Host values found served that are kept (see :attr:`FrontDoor.served`)."""


_WILDCARD_LISTEN = frozenset({"0.0.0.0", "::", ""})  # noqa: S104 - names, not a bind


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why the front door refused a request: the status, the error ``type``, the message
    (which says what would allow it) and that setting's name."""

    status: int
    kind: str
    message: str
    setting: str | None = None


class FrontDoor:
    """Which Hosts and Origins the proxy serves, from the config; decides per request.

    Hosts: loopback names and addresses always; beyond loopback IP addresses too (an
    address cannot be rebound to another machine; a name can); the listen address itself;
    and ``allowed_hosts`` (``name``, ``.domain`` for it and the names under it, ``*`` for
    any). Origins: the proxy's own (the request's Host), and ``allow_origins``.
    """

    def __init__(
        self,
        listen: str,
        allowed_hosts: Iterable[str] = (),
        allow_origins: Iterable[str] = (),
    ) -> None:
        allowed_hosts = tuple(allowed_hosts)
        names: set[str] = set()
        self.domains: tuple[str, ...] = ()
        self.any_host = "*" in allowed_hosts
        for entry in allowed_hosts:
            if entry.startswith("."):
                self.domains += (entry[1:].lower().rstrip("."),)
            elif (parsed := parse_host(entry)) is not None:
                names.add(parsed.host)
        bound = parse_host(listen) or parse_host(f"[{listen}]")
        if bound is not None and listen not in _WILDCARD_LISTEN:
            names.add(bound.host)
        self.names = frozenset(names)
        self.loopback_only = bound is not None and is_loopback(bound)
        self.origins = frozenset(
            str(origin) for o in allow_origins if (origin := parse_origin(o)) is not None
        )
        self.served: BoundedCache[str, Authority] = BoundedCache(SERVED_BUDGET)
        """Host values already found served: a client sends the same one on every request,
        and its parse (an IPv4 address through ``ipaddress``) is the front door's dearest
        step. Bounded in bytes: a flood of distinct Hosts only empties it."""

    @classmethod
    def for_config(cls, cfg: Config) -> FrontDoor:
        return cls(cfg.host, cfg.allowed_hosts, cfg.allow_origins)

    def serves(self, host: Authority) -> bool:
        if self.any_host or is_loopback(host) or host.host in self.names:
            return True
        if any(host.host == d or host.host.endswith("." + d) for d in self.domains):
            return True
        return not self.loopback_only and host.ip is not None

    def check_host(self, values: Sequence[str], http10: bool = False) -> Refusal | Authority | None:
        """The request's Host, parsed, or why it is refused (None: an HTTP/1.0 request
        without one)."""
        if len(values) == 1 and (known := self.served.get(values[0])) is not None:
            return known
        if len(values) > 1:
            return Refusal(400, "bad_host", "more than one Host header")
        if not values:
            if http10:
                return None
            return Refusal(400, "bad_host", "an HTTP/1.1 request needs a Host header")
        host = parse_host(values[0])
        if host is None:
            return Refusal(
                400,
                "bad_host",
                f"Host {shown(values[0])!r} is not host[:port] (a name or an address, and a port)",
            )
        if self.serves(host):
            self.served.put(values[0], host, size_of(values[0], host.host))
            return host
        where = (
            "on loopback, loopback names and addresses only"
            if self.loopback_only
            else ("beyond loopback, IP addresses and loopback names only")
        )
        return Refusal(
            421,
            "host_not_served",
            f"this proxy does not serve the Host {str(host)!r} ({where}: a web page whose "
            "name is rebound to this address must not reach the keys it holds); to serve "
            f"it, start the proxy with --allowed-host {host.host} (allowed_hosts in the "
            "config file, SSE_PROXY_ALLOWED_HOSTS)",
            _HOSTS_SETTING,
        )

    def check_origin(
        self, origins: Sequence[str], fetch_site: str | None, host: Authority | None
    ) -> Refusal | str | None:
        """The allowed foreign origin to answer CORS for, None for a request that is not
        cross-origin, or why it is refused.

        Without an allowed Origin, a request is the app's own only when it says so: no
        Fetch Metadata at all (an SDK, curl), or ``Sec-Fetch-Site`` ``same-origin`` or
        ``none`` (a person typing the URL). ``same-site`` is a page on another port of
        this machine (ports do not make a site): its ``<img>`` and ``<script>`` requests
        carry no Origin, and they must not spend the held key any more than a
        ``cross-site`` page's."""
        site = _site_of(fetch_site)
        if origins:
            origin = parse_origin(origins[0]) if len(origins) == 1 else None
            if origin is not None and str(origin) in self.origins:
                return origins[0]  # echoed exactly as sent, as CORS wants it
            same = origin is not None and host is not None and origin.same_as(host)
            if not same or site not in _OWN_SITES:
                quoted = shown(", ".join(origins))
                allow = str(origin) if origin is not None else "ORIGIN"
                return Refusal(
                    403,
                    "origin_not_allowed",
                    f"requests from web pages of origin {quoted!r} are refused (a page must "
                    "not spend the keys this proxy holds); to let a local web app call the "
                    f"proxy, start it with --allow-origin {allow} (allow_origins in the "
                    "config file, SSE_PROXY_ALLOW_ORIGINS)",
                    _ORIGINS_SETTING,
                )
            return None
        if site in _OWN_SITES:
            return None
        return Refusal(
            403,
            "same_site_refused" if site == "same-site" else "cross_site_refused",
            f"requests from web pages (Sec-Fetch-Site: {shown(fetch_site)}) are refused: a "
            "page of another site, or on another port of this machine, must not spend the "
            "keys this proxy holds; to let a local web app call the proxy, start it with "
            "--allow-origin ORIGIN (allow_origins in the config file, "
            "SSE_PROXY_ALLOW_ORIGINS) and call it with fetch(), which sends its Origin",
            _ORIGINS_SETTING,
        )


_OWN_SITES: Final = frozenset({None, "same-origin", "none"})
"""``Sec-Fetch-Site`` values of the app's own requests (None: not sent, as by an SDK)."""


def _site_of(fetch_site: str | None) -> str | None:
    return None if fetch_site is None else fetch_site.strip().lower()


# ------------------------------------------------------------- applied to requests

_CORS_ORIGIN: Final = web.RequestKey("cors_origin", str)


_EXPOSED = ", ".join((STREAM_ID_HEADER, SEED_HEADER))


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class FrontDoorGuard:
    """The front door: a Host the proxy serves, no foreign origin, no CONNECT and no
    absolute-form target (``listen``: the listener's address, when not ``cfg.host``: the
    admin listener's). ``in_flight``: where the handler tasks of the requests let in are
    kept while they run (a shutdown waits for them).

    The proxy's own app checks each request in its handlers (:meth:`refusal` at the top of
    the forwarding one, :meth:`around` the others): a middleware stays on the stack of
    every request, and each resumption of a forwarded request's start would pass through
    it and through the layer aiohttp adds beside any middleware. A target no route
    can match (CONNECT's authority, ``*``) is answered by the server
    (:func:`.protocol.unroutable_first`). The admin listener's app, which forwards nothing, has
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
        remember(request)  # let in: the router keeps how its path resolved
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
        request[ANSWERED] = True
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
