"""Host and Origin values as a browser sends them, parsed strictly; which ones the front
door serves.

Pure (no I/O): the front door's middleware (:mod:`sse_proxy.server.admission`) applies
:class:`FrontDoor`, and the inspector uses the same parser. A value that is not exactly
``host[:port]`` (a reg-name, an IPv4 address or a bracketed IPv6 address, and a decimal
port) parses to ``None``: no userinfo (``h:1@x``), no list (``h:1, x``), no path, no
spaces, no empty or out-of-range port. Browsers never send anything else, so nothing
legitimate is lost by refusing it.
"""

from __future__ import annotations

import ipaddress
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Final

if TYPE_CHECKING:
    from sse_proxy.settings import Config

__all__ = [
    "Authority",
    "FrontDoor",
    "Origin",
    "Refusal",
    "is_loopback",
    "parse_host",
    "parse_origin",
    "shown",
]

_LABEL = r"[A-Za-z0-9_](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9_])?"
_REG_NAME = re.compile(rf"{_LABEL}(?:\.{_LABEL})*\.?")
_DOTTED = re.compile(r"[0-9.]+")
# A name whose last label is a number is an IPv4 address to a browser's URL parser
# (0x7f.1, 2130706433): it never sends one as written, and no resolver should guess.
_ENDS_IN_NUMBER = re.compile(r"(?:^|\.)(?:[0-9]+|0[xX][0-9a-fA-F]*)\.?$")
_PORT = re.compile(r"[0-9]{1,5}")
_SCHEME = re.compile(r"[a-z][a-z0-9+.-]{0,31}")
_DEFAULT_PORTS = {"http": 80, "https": 443, "ws": 80, "wss": 443}


@dataclass(frozen=True, slots=True)
class Authority:
    """A parsed ``host[:port]``: the host in lower case without a trailing dot (an IPv6
    address without its brackets), the port when one was given."""

    host: str
    port: int | None = None

    @property
    def ip(self) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
        try:
            return ipaddress.ip_address(self.host)
        except ValueError:
            return None

    def __str__(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port is None else f"{host}:{self.port}"


@dataclass(frozen=True, slots=True)
class Origin:
    """A parsed ``scheme://host[:port]`` (the port filled in from the scheme's default)."""

    scheme: str
    authority: Authority

    @property
    def port(self) -> int | None:
        return self.authority.port or _DEFAULT_PORTS.get(self.scheme)

    def __str__(self) -> str:
        """The serialised origin, as a browser sends it (no default port)."""
        auth = self.authority
        if auth.port is not None and auth.port == _DEFAULT_PORTS.get(self.scheme):
            auth = Authority(auth.host)
        return f"{self.scheme}://{auth}"

    def same_as(self, host: Authority) -> bool:
        """Whether this origin names ``host`` (a request's Host): same host, same port once
        the scheme's default port fills in an absent one."""
        return self.authority.host == host.host and self.port == (
            host.port or _DEFAULT_PORTS.get(self.scheme)
        )


def _parse_port(text: str) -> int | None:
    if not _PORT.fullmatch(text):
        return None
    port = int(text)
    return port if 0 < port <= 65535 else None


def _parse_hostname(text: str) -> str | None:
    """A reg-name or dotted IPv4 address, lower case, trailing dot dropped; else None."""
    if _DOTTED.fullmatch(text):
        # digits and dots only: an IPv4 address written exactly, nothing a resolver might
        # read another way (127.1, 0x7f.1, 0177.0.0.1 are refused, not guessed at)
        try:
            return str(ipaddress.IPv4Address(text))
        except ValueError:
            return None
    if not _REG_NAME.fullmatch(text) or len(text) > 253 or _ENDS_IN_NUMBER.search(text):
        return None
    return text.lower().rstrip(".")


def parse_host(value: str | None) -> Authority | None:
    """``host[:port]`` exactly, as RFC 9110 allows in a Host header; None for anything else."""
    if not value or len(value) > 300:
        return None
    if value.startswith("["):
        end = value.find("]")
        literal, rest = value[1:end], value[end + 1 :]
        if end < 0 or "%" in literal:  # zone identifiers: no browser sends one
            return None
        try:
            host = str(ipaddress.IPv6Address(literal))
        except ValueError:
            return None
        if not rest:
            return Authority(host)
        if not rest.startswith(":"):
            return None
        port = _parse_port(rest[1:])
        return None if port is None else Authority(host, port)
    name, sep, port_text = value.partition(":")
    hostname = _parse_hostname(name)
    if hostname is None or not hostname:
        return None
    if not sep:
        return Authority(hostname)
    port = _parse_port(port_text)
    return None if port is None else Authority(hostname, port)


def parse_origin(value: str | None) -> Origin | None:
    """``scheme://host[:port]`` exactly (an Origin header, or an ``allow_origins`` entry);
    None for ``null`` (an opaque origin) and anything else."""
    if not value:
        return None
    scheme, sep, rest = value.partition("://")
    scheme = scheme.lower()
    if not sep or not _SCHEME.fullmatch(scheme):
        return None
    authority = parse_host(rest)
    return None if authority is None else Origin(scheme, authority)


def is_loopback(host: Authority | str) -> bool:
    """``localhost`` and names under ``.localhost`` (RFC 6761: browsers resolve them to
    loopback themselves, so DNS cannot rebind them), and the loopback addresses
    (127.0.0.0/8, ::1, and 127.x written as an IPv4-mapped IPv6 address)."""
    name = host.host if isinstance(host, Authority) else host.strip("[]").lower().rstrip(".")
    if name == "localhost" or name.endswith(".localhost"):
        return True
    try:
        ip = ipaddress.ip_address(name)
    except ValueError:
        return False
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    return ip.is_loopback


# ---------------------------------------------------------------------- the front door
#
# The proxy holds the app's keys: a request it admits spends them. Browsers let any web page
# send requests to 127.0.0.1 (a form, a fetch() in no-cors mode, a WebSocket), and a page
# whose DNS name is rebound to 127.0.0.1 becomes same-origin with the proxy. So before
# anything else, every request (forwarded, upgraded, health, metrics, the inspector) must
# name a Host the proxy serves (421 otherwise: DNS rebinding) and must not come from a web
# page of a foreign origin (403: CSRF, cross-site WebSocket hijacking). SDKs send neither
# Origin nor Sec-Fetch-Site, so they are never refused here.

_HOSTS_SETTING: Final = "allowed_hosts"
_ORIGINS_SETTING: Final = "allow_origins"
_SERVED_KEPT = 256
_WILDCARD_LISTEN = frozenset({"0.0.0.0", "::", ""})  # noqa: S104 - names, not a bind


@dataclass(frozen=True, slots=True)
class Refusal:
    """Why the front door refused a request: the status, the error ``type``, the message
    (which says what would allow it) and that setting's name."""

    status: int
    kind: str
    message: str
    setting: str | None = None


def shown(value: str | None) -> str:
    """A client's header value as it may be logged or quoted back: printable, bounded."""
    if value is None:
        return ""
    out = "".join(c if " " <= c <= "~" else "?" for c in value[:120])
    return out + ("..." if len(value) > 120 else "")


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
        self._served: dict[str, Authority] = {}
        """Host values already found served: a client sends the same one on every request,
        and its parse (an IPv4 address through ``ipaddress``) cost more than the rest of
        the front door. Bounded: a flood of distinct Hosts only empties it."""

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
        if len(values) == 1 and (known := self._served.get(values[0])) is not None:
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
            if len(self._served) >= _SERVED_KEPT:
                self._served.clear()
            self._served[values[0]] = host
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
        cross-origin, or why it is refused."""
        if origins:
            origin = parse_origin(origins[0]) if len(origins) == 1 else None
            if origin is not None and str(origin) in self.origins:
                return origins[0]  # echoed exactly as sent, as CORS wants it
            same = origin is not None and host is not None and origin.same_as(host)
            if not same or (fetch_site or "").strip().lower() == "cross-site":
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
        if (fetch_site or "").strip().lower() == "cross-site":
            return Refusal(
                403,
                "cross_site_refused",
                "cross-site requests (Sec-Fetch-Site: cross-site) are refused: a web page "
                "of another site must not spend the keys this proxy holds; to let a web app "
                "call the proxy, start it with --allow-origin ORIGIN (allow_origins in the "
                "config file, SSE_PROXY_ALLOW_ORIGINS)",
                _ORIGINS_SETTING,
            )
        return None
