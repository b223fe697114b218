"""Pure header rules: what crosses the proxy in each direction."""

from __future__ import annotations

from typing import Any

from multidict import CIMultiDict, CIMultiDictProxy, MultiDict

from sse_proxy.cache import BoundedCache, size_of
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


def _fate_of(key: str) -> int:
    low = key.lower()
    if low == "connection":
        return _CONNECTION
    if low in _HOP_BY_HOP or low.startswith(_DROPPED_PREFIXES):
        return _DROP
    return _KEEP


_Plan = tuple[tuple[str, ...], bool]
"""What to take out of a copy of one sequence of header names: these names (lowered, each
once), and whether a ``Connection`` header names more."""

PLANS_BUDGET = 1 << 20
_PLANS: BoundedCache[tuple[str, ...], _Plan] = BoundedCache(PLANS_BUDGET)
"""Each sequence of header names as written, its plan: a client or an upstream sends the
same names in the same order request after request, so most are looked up, not matched
name by name in Python again (bounded in bytes: a client inventing names empties it)."""


def _plan_for(names: tuple[str, ...]) -> _Plan:
    drop: dict[str, None] = {}
    connection = False
    for name in names:
        fate = _fate_of(name)
        if fate != _KEEP:
            drop[name.lower()] = None
            connection = connection or fate == _CONNECTION
    plan = (tuple(drop), connection)
    _PLANS.put(names, plan, size_of(*names, *plan[0]) + 8 * len(names))
    return plan


def _without_hop_by_hop(headers: CIMultiDictProxy[str] | MultiDict[str]) -> CIMultiDict[str]:
    """``headers`` minus hop-by-hop ones, those a ``Connection`` header names, ``Proxy-*``
    and the proxy's own (twice per request: a copy made at C speed, the plan of its names
    looked up, what it names taken out)."""
    names = tuple(headers.keys())
    plan = _PLANS.get(names)
    if plan is None:
        plan = _plan_for(names)
    drop, connection = plan
    out = CIMultiDict(headers)
    for name in drop:
        out.popall(name)
    if connection:
        for value in headers.getall("Connection"):
            for token in value.split(","):
                if token := token.strip():
                    out.popall(token, None)
    return out


def request_headers_for_upstream(
    headers: CIMultiDictProxy[str] | CIMultiDict[str],
) -> CIMultiDict[str]:
    """Client request headers minus hop-by-hop and the proxy's own ``X-SSE-Proxy-*``."""
    return _without_hop_by_hop(headers)


def response_headers_for_client(
    headers: CIMultiDictProxy[str] | MultiDict[str],
) -> CIMultiDict[str]:
    """Upstream response headers minus hop-by-hop ones; Content-Length is kept as is.

    The body is forwarded byte for byte (never decompressed), so Content-Length and
    Content-Encoding stay true.
    """
    return _without_hop_by_hop(headers)


def is_event_stream(content_type: str | None) -> bool:
    """``text/event-stream`` with any parameters, any case."""
    if not content_type:
        return False
    return content_type.split(";", 1)[0].strip().lower() == "text/event-stream"


def loggable_headers(headers: Any) -> dict[str, str]:
    """Headers as a plain dict for a debug line (the log sink redacts secret values);
    values the proxy holds (route keys) never enter it at all."""
    return {str(k): scrub_held(str(v)) for k, v in headers.items()}
