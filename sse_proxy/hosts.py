"""Host and Origin values as a browser sends them, parsed strictly.

Pure (no I/O): the front door (:mod:`sse_proxy.server.front_door`) decides which ones it
serves from these values, and the inspector uses the same parser. A value that is not exactly
``host[:port]`` (a reg-name, an IPv4 address or a bracketed IPv6 address, and a decimal
port) parses to ``None``: no userinfo (``h:1@x``), no list (``h:1, x``), no path, no
spaces, no empty or out-of-range port. Browsers never send anything else, so nothing
legitimate is lost by refusing it.
"""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass

__all__ = [
    "Authority",
    "Origin",
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


def shown(value: str | None) -> str:
    """A client's header value as it may be logged or quoted back: printable, bounded."""
    if value is None:
        return ""
    out = "".join(c if " " <= c <= "~" else "?" for c in value[:120])
    return out + ("..." if len(value) > 120 else "")
