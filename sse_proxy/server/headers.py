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


def _without_hop_by_hop(headers: Iterable[tuple[str, str]]) -> CIMultiDict[str]:
    """``headers`` minus hop-by-hop ones, those a ``Connection`` header names, ``Proxy-*``
    and the proxy's own: one pass, each name lowered once (twice per request, per header)."""
    kept: list[tuple[str, str, str]] = []
    named: set[str] | None = None
    for key, value in headers:
        low = key.lower()
        if low in _HOP_BY_HOP or low.startswith(_DROPPED_PREFIXES):
            if low == "connection":
                tokens = {tok.strip().lower() for tok in value.split(",")} - {""}
                named = tokens if named is None else named | tokens
            continue
        kept.append((low, key, value))
    if named:
        return CIMultiDict([(key, value) for low, key, value in kept if low not in named])
    return CIMultiDict([(key, value) for _low, key, value in kept])


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
