"""Pure header rules: what crosses the proxy in each direction."""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from multidict import CIMultiDict, CIMultiDictProxy, MultiDict

from sse_proxy.obs.redact import scrub_held

__all__ = [
    "HOP_BY_HOP",
    "OWN_PREFIX",
    "is_event_stream",
    "loggable_headers",
    "request_headers_for_upstream",
    "response_headers_for_client",
]

OWN_PREFIX = "x-sse-proxy-"
# RFC 9110 7.6.1 hop-by-hop headers (Proxy-* and those Connection names are dropped too).
HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "te", "trailer", "trailers", "transfer-encoding", "upgrade"}
)
# Plus Host, which the client library sets for the upstream, and Expect: the proxy meets a
# 100-continue expectation itself, once the upstream request is under way (forwarded, the
# upstream client would hold the body until the upstream's own 100, which many never send).
_HOP_BY_HOP = HOP_BY_HOP | {"host", "expect"}


_DROPPED_PREFIXES = ("proxy-", OWN_PREFIX)


_KEEP, _DROP, _CONNECTION = 0, 1, 2
_FATE: dict[str, int] = {}
"""Each header name as written, what happens to it: names repeat from request to request,
so most are looked up, not lowered and matched again (bounded: see :func:`_fate_of`)."""
_MAX_NAMES = 4096


def _fate_of(key: str) -> int:
    low = key.lower()
    if low == "connection":
        fate = _CONNECTION
    elif low in _HOP_BY_HOP or low.startswith(_DROPPED_PREFIXES):
        fate = _DROP
    else:
        fate = _KEEP
    if len(_FATE) < _MAX_NAMES:  # a client inventing names gets them matched each time
        _FATE[key] = fate
    return fate


def _without_hop_by_hop(headers: Iterable[tuple[str, str]]) -> CIMultiDict[str]:
    """``headers`` minus hop-by-hop ones, those a ``Connection`` header names, ``Proxy-*``
    and the proxy's own: one pass (twice per request, per header)."""
    fates = _FATE
    kept: list[tuple[str, str]] = []
    connection: list[str] = []
    for key, value in headers:
        fate = fates.get(key)
        if fate is None:
            fate = _fate_of(key)
        if fate == _KEEP:
            kept.append((key, value))
        elif fate == _CONNECTION:
            connection.append(value)
    out = CIMultiDict(kept)
    for value in connection:
        for token in value.split(","):
            if token := token.strip():
                out.popall(token, None)
    return out


def request_headers_for_upstream(
    headers: CIMultiDictProxy[str] | CIMultiDict[str],
) -> CIMultiDict[str]:
    """Client request headers minus hop-by-hop and the proxy's own ``X-SSE-Proxy-*``."""
    return _without_hop_by_hop(headers.items())


def response_headers_for_client(
    headers: CIMultiDictProxy[str] | MultiDict[str],
) -> CIMultiDict[str]:
    """Upstream response headers minus hop-by-hop ones; Content-Length is kept as is.

    The body is forwarded byte for byte (never decompressed), so Content-Length and
    Content-Encoding stay true.
    """
    return _without_hop_by_hop(headers.items())


def is_event_stream(content_type: str | None) -> bool:
    """``text/event-stream`` with any parameters, any case."""
    if not content_type:
        return False
    return content_type.split(";", 1)[0].strip().lower() == "text/event-stream"


def loggable_headers(headers: Any) -> dict[str, str]:
    """Headers as a plain dict for a debug line (the log sink redacts secret values);
    values the proxy holds (route keys) never enter it at all."""
    return {str(k): scrub_held(str(v)) for k, v in headers.items()}
