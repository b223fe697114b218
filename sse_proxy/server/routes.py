"""Where a request goes: routes by path prefix, upstream URL joining, held keys.

Pure (no I/O beyond reading a key file at startup): a :class:`RouteTable` is built once
from the config, resolving ``${ENV}`` and ``${file:PATH}`` header values, and then maps
each request target to a route and the full upstream URL.

Joining does what people mean: ``--upstream https://api.openai.com/v1`` with a request for
``/v1/chat/completions`` is ``https://api.openai.com/v1/chat/completions``, not ``/v1/v1/...``:
the longest run of path segments that ends the base path and starts the request path is
sent once.
"""

from __future__ import annotations

import functools
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import unquote_plus, urlsplit

from multidict import CIMultiDict
from yarl import URL

from sse_proxy.cache import BoundedCache, size_of
from sse_proxy.errors import ConfigError
from sse_proxy.names import DIALECT_PATHS
from sse_proxy.obs.redact import hold_secret, redact_url
from sse_proxy.settings import Config, RouteSpec

__all__ = [
    "CLIENT_AUTH_HEADERS",
    "PathRefused",
    "Route",
    "RouteTable",
    "carries_credential",
    "join_upstream",
    "resolve_dot_segments",
    "resolve_value",
]

DEFAULT_ROUTE = "default"
# What a client may send to authenticate to an LLM API; dropped with drop_client_auth.
CLIENT_AUTH_HEADERS = frozenset({"authorization", "x-api-key", "api-key", "x-goog-api-key"})
_REFERENCE = re.compile(r"\$\{([^}]*)\}")
_ENV_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_CREDENTIAL_PROTOCOL = re.compile(r"(?i)key|token|secret|passw|auth|bearer")


def carries_credential(protocol: str) -> bool:
    """Whether a WebSocket subprotocol token carries a credential: its name (before the first
    ``.``, the rest being the value) says so."""
    return bool(_CREDENTIAL_PROTOCOL.search(protocol.split(".", 1)[0]))


# A dot segment, or something an upstream may read as one: %2e for a dot (RFC 3986 2.3: the
# same character), and a segment that hides "." or ".." behind %2f, %5c or a backslash
# (servers that decode those, or treat "\\" as "/", would climb out of the base path).
_MAYBE_DOT = re.compile(r"\.|%2[eE]")
_ENCODED_DOT = re.compile(r"%2[eE]")
_HIDDEN_SEP = re.compile(r"%2[fF]|%5[cC]|\\")


class PathRefused(ValueError):
    """A request target whose dot segments the proxy will not forward (a 400)."""


def _dot_kind(segment: str) -> str | None:
    """``"."`` or ``".."`` for a dot segment (its dots possibly percent-encoded), else None;
    raises :class:`PathRefused` for a segment that hides one."""
    plain = _ENCODED_DOT.sub(".", segment) if "%" in segment else segment
    if plain in (".", ".."):
        return plain
    for piece in _HIDDEN_SEP.split(plain.replace("%25", "%")):
        if piece.split(";", 1)[0] in (".", "..", "%2e", "%2E", "%2e%2e", "%2E%2E"):
            raise PathRefused(
                "the path hides a dot segment (behind an encoded slash or backslash, a "
                "backslash or a ;parameter)"
            )
    return None


def resolve_dot_segments(target: str) -> tuple[str, int | None]:
    """``target`` (path and query) with its dot segments removed (RFC 3986 5.2.4), and the
    shallowest depth a ``..`` reached (None when there was none; -1 when it tried to climb
    above the root). The query is left as it is; a target without dot segments is
    returned unchanged.
    """
    end = len(target)
    for sep in "?#":
        at = target.find(sep)
        if 0 <= at < end:
            end = at
    path, rest = target[:end], target[end:]
    if not _MAYBE_DOT.search(path) and "\\" not in path:
        return target, None
    segments = path[1:].split("/") if path.startswith("/") else path.split("/")
    out: list[str] = []
    low: int | None = None
    changed = False
    for i, segment in enumerate(segments):
        dot = _dot_kind(segment)
        if dot is None:
            out.append(segment)
            continue
        changed = True
        if dot == "..":
            if out:
                out.pop()
                low = len(out) if low is None else min(low, len(out))
            else:
                low = -1
        if i == len(segments) - 1:
            out.append("")  # "/a/." and "/a/.." end in a slash (RFC 3986 5.2.4)
    if not changed:
        return target, None
    return "/" + "/".join(out) + rest, low


def join_upstream(base: str, target: str) -> str:
    """``base`` (scheme, host, optional path) + request ``target`` (path and query).

    A base path whose last segments repeat the first segments of the target's path is not
    doubled (the longest such overlap is sent once); everything else is appended as is.
    """
    path, sep, query = target.partition("?")
    origin, base_path, base_segs = _base_parts(base)
    segs = path[1:].split("/") if path.startswith("/") else ([path] if path else [])
    overlap = 0
    for k in range(min(len(base_segs), len(segs)), 0, -1):
        if base_segs[-k:] == tuple(segs[:k]) and all(segs[:k]):
            overlap = k
            break
    rest = segs[overlap:]
    joined = base_path + ("/" + "/".join(rest) if rest else "")
    if not joined:
        joined = "/"
    return origin + joined + (sep + query if sep else "")


@functools.lru_cache(maxsize=256)
def _base_parts(base: str) -> tuple[str, str, tuple[str, ...]]:
    """A route's upstream split once, not per request: origin, path, path segments."""
    parts = urlsplit(base)
    base_path = parts.path.rstrip("/")
    segs = tuple(base_path.strip("/").split("/")) if base_path.strip("/") else ()
    return f"{parts.scheme}://{parts.netloc}", base_path, segs


def resolve_value(
    template: str, env: Mapping[str, str], where: str, substituted: list[str] | None = None
) -> str:
    """A held header value: ``${NAME}`` from the environment, ``${file:PATH}`` from a file;
    each value substituted is appended to ``substituted`` (they are secrets on their own: an
    upstream may quote the bare key back, without the ``Bearer`` around it).

    Errors name the route, the header and the variable or file, never a value.
    """

    def sub(match: re.Match[str]) -> str:
        ref = match.group(1).strip()
        if ref.startswith("file:"):
            path = Path(ref[5:]).expanduser()
            try:
                value = path.read_text(encoding="utf-8").rstrip("\r\n")
            except (OSError, UnicodeDecodeError) as exc:
                why = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
                raise ConfigError(f"{where}: cannot read key file {str(path)!r}: {why}") from None
            if not value:
                raise ConfigError(f"{where}: key file {str(path)!r} is empty")
            if substituted is not None:
                substituted.append(value)
            return value
        if not _ENV_NAME.fullmatch(ref):
            raise ConfigError(f"{where}: ${{{ref}}} is neither ${{NAME}} nor ${{file:PATH}}")
        found = env.get(ref)
        if not found:
            raise ConfigError(f"{where}: environment variable {ref} is not set or empty")
        if substituted is not None:
            substituted.append(found)
        return found

    value = _REFERENCE.sub(sub, template)
    if any(c in value for c in "\r\n\0"):
        raise ConfigError(f"{where}: the value holds a line break or NUL")
    return value


@dataclass(frozen=True, slots=True)
class Route:
    """One resolved route: prefix, upstream base, dialect, held headers (secret values)."""

    name: str
    prefix: str
    upstream: str
    dialect: str
    headers: tuple[tuple[str, str], ...]
    drop_client_auth: bool

    @property
    def depth(self) -> int:
        """How many path segments the prefix has (``/``: 0, ``/openai``: 1)."""
        return len([s for s in self.prefix.split("/") if s])

    def url_for(self, rest: str) -> str:
        """The full upstream URL for the target left after the prefix was stripped."""
        return join_upstream(self.upstream, rest or "")

    def upstream_headers(self, headers: CIMultiDict[str]) -> CIMultiDict[str]:
        """The client's headers (already hop-by-hop filtered) with held ones applied."""
        if self.drop_client_auth:
            for name in CLIENT_AUTH_HEADERS:
                headers.popall(name, None)
        for name, value in self.headers:
            headers[name] = value  # replaces every value the client sent under that name
        return headers

    def strip_auth_query(self, target: str) -> str:
        """``?key=...`` (Gemini's query-string key) dropped when client auth is dropped,
        however its name is written (``k%65y``, ``KEY``: an upstream decodes the name)."""
        if not self.drop_client_auth or "?" not in target:
            return target
        path, _, query = target.partition("?")
        kept = [
            pair
            for pair in query.split("&")
            if unquote_plus(pair.partition("=")[0]).strip().lower() != "key"
        ]
        query = "&".join(kept).lstrip("&")
        return path + ("?" + query if query else "")

    def client_protocols(self, offered: tuple[str, ...]) -> tuple[str, ...]:
        """The WebSocket subprotocols to offer the upstream: with ``drop_client_auth``, not
        those that carry a credential (a browser's only way to send a key on a WebSocket:
        ``openai-insecure-api-key.sk-...``)."""
        if not self.drop_client_auth:
            return offered
        return tuple(p for p in offered if not carries_credential(p))

    def describe(self, example: str) -> dict[str, object]:
        """What the startup line and health say about it (no header values)."""
        return {
            "route": self.name,
            "prefix": self.prefix,
            "upstream": redact_url(self.upstream),
            "dialect": self.dialect,
            "held_headers": [name for name, _ in self.headers],
            "drop_client_auth": self.drop_client_auth,
            "example": f"{self.prefix.rstrip('/')}{example} -> "
            + redact_url(self.url_for(example)),
        }


def _example_for(route: Route) -> str:
    """A request path that shows how the mapping works for this upstream."""
    if route.dialect == "anthropic" or "anthropic" in route.upstream:
        return DIALECT_PATHS["anthropic"]
    if route.dialect == "gemini" or "generativelanguage" in route.upstream:
        return DIALECT_PATHS["gemini"]
    return DIALECT_PATHS["openai"]


ADMITTED_BUDGET = 4 << 20
"""Bytes of request targets, with their route and upstream URL, kept (see
:attr:`RouteTable.admitted`)."""


class RouteTable:
    """Routes by path prefix: the longest prefix that matches whole segments wins."""

    def __init__(self, routes: list[Route]) -> None:
        self.routes = sorted(routes, key=lambda r: len(r.prefix.rstrip("/")), reverse=True)
        self.admitted: BoundedCache[str, tuple[Route, URL]] = BoundedCache(ADMITTED_BUDGET)
        """Raw request targets admitted before, with their route and upstream URL: a client
        sends the same target request after request, and resolving its dot segments,
        matching a route and joining and parsing the URL again each time is much of what
        admission would cost. A pure function of the target and this table, so a hit is
        the outcome the checks would reach; bounded in bytes (a client inventing paths
        only empties it)."""

    def remember(self, target: str, routed: tuple[Route, URL]) -> None:
        self.admitted.put(target, routed, size_of(target, str(routed[1])))

    @classmethod
    def from_config(cls, cfg: Config, env: Mapping[str, str] | None = None) -> RouteTable:
        """Resolve the config's routes (and ``upstream``, the catch-all); hold the keys."""
        env = os.environ if env is None else env
        specs = list(cfg.routes)
        if cfg.upstream:
            if any(s.prefix == "/" for s in specs):
                raise ConfigError("routes: '/' is already the route of upstream")
            specs.append(
                RouteSpec(
                    prefix="/",
                    upstream=cfg.upstream,
                    headers=cfg.upstream_headers,
                    drop_client_auth=cfg.drop_client_auth,
                )
            )
        routes: list[Route] = []
        for spec in specs:
            name = DEFAULT_ROUTE if spec.prefix == "/" and cfg.upstream else spec.prefix
            pieces: list[str] = []
            headers = tuple(
                (
                    header,
                    resolve_value(value, env, f"route {spec.prefix!r}: header {header!r}", pieces),
                )
                for header, value in spec.headers
            )
            # the whole values and each value substituted into them: held, never shown
            for value in (*(v for _, v in headers), *pieces):
                hold_secret(value)
            routes.append(
                Route(
                    name=name,
                    prefix=spec.prefix,
                    upstream=spec.upstream.rstrip("/"),
                    dialect=spec.dialect or cfg.dialect,
                    headers=headers,
                    drop_client_auth=spec.drop_client_auth or cfg.drop_client_auth,
                )
            )
        if not routes:
            raise ConfigError("upstream: required (--upstream URL or --route PREFIX=URL)")
        return cls(routes)

    def match(self, target: str) -> tuple[Route, str] | None:
        """(route, target with the prefix stripped), or ``None`` when no route matches."""
        path = target.partition("?")[0]
        for route in self.routes:
            prefix = route.prefix.rstrip("/")
            if not prefix:
                return route, target
            if path == prefix or path.startswith(prefix + "/"):
                return route, target[len(prefix) :]
        return None

    def describe(self) -> list[dict[str, object]]:
        return [r.describe(_example_for(r)) for r in self.routes]
