"""The header rules against a reference written from RFC 9110 7.6.1, over hostile header
lists: the rules' plan cache must give, call after call, what matching each header would."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict, CIMultiDictProxy

from sse_proxy.server import headers as rules

_HOP = {"connection", "keep-alive", "te", "trailer", "trailers", "transfer-encoding", "upgrade"}


def _reference(pairs: list[tuple[str, str]]) -> list[tuple[str, str]]:
    """RFC 9110 7.6.1: hop-by-hop headers and every header a Connection header names go;
    so do Host and Expect (the proxy's own business), Proxy-* and X-SSE-Proxy-*."""
    named = {
        token.strip().lower()
        for name, value in pairs
        if name.lower() == "connection"
        for token in value.split(",")
        if token.strip()
    }
    gone = _HOP | {"host", "expect"} | named
    return [
        (name, value)
        for name, value in pairs
        if name.lower() not in gone and not name.lower().startswith(("proxy-", "x-sse-proxy-"))
    ]


_NAMES = st.sampled_from(
    [
        "Host", "host", "Connection", "CONNECTION", "Keep-Alive", "TE", "Trailer", "Trailers",
        "Transfer-Encoding", "Upgrade", "Expect", "Proxy-Authorization", "proxy-foo",
        "X-SSE-Proxy-Chaos", "Content-Type", "Accept", "Authorization", "X-Custom", "x-custom",
        "Cache-Control", "Content-Length",
    ]
)  # fmt: skip
_VALUES = st.one_of(
    st.sampled_from(["keep-alive", "close", "X-Custom", " x-custom , Accept", ",,", "te, upgrade"]),
    st.text(alphabet="abcXYZ-, ", max_size=12),
)
_PAIRS = st.lists(st.tuples(_NAMES, _VALUES), max_size=12)


@settings(max_examples=400)
@given(pairs=_PAIRS, rounds=st.integers(1, 3))
def test_the_rules_match_the_reference(pairs: list[tuple[str, str]], rounds: int) -> None:
    proxy = CIMultiDictProxy(CIMultiDict(pairs))
    want = _reference(pairs)
    for _ in range(rounds):  # the first call plans, the next ones look the plan up
        up = rules.request_headers_for_upstream(proxy)
        down = rules.response_headers_for_client(CIMultiDict(pairs))
        assert list(up.items()) == want
        assert list(down.items()) == want


def test_the_plan_of_a_name_sequence_is_not_its_values() -> None:
    """Two requests with the same names and different Connection values: each drops what
    its own Connection names (the plan is of the names; the values are read each time)."""
    first = CIMultiDict([("Connection", "X-A"), ("X-A", "1"), ("X-B", "2")])
    second = CIMultiDict([("Connection", "X-B"), ("X-A", "1"), ("X-B", "2")])
    assert list(rules.request_headers_for_upstream(first).items()) == [("X-B", "2")]
    assert list(rules.request_headers_for_upstream(second).items()) == [("X-A", "1")]


def test_the_plans_are_bounded_in_bytes_and_still_right(monkeypatch: pytest.MonkeyPatch) -> None:
    """1,100 invented sequences of long header names: the plans kept stay under their
    byte budget, and each request's headers are filtered right all the same."""
    from sse_proxy.cache import BoundedCache

    monkeypatch.setattr(rules, "_PLANS", BoundedCache(rules.PLANS_BUDGET))
    most = 0
    for i in range(1100):
        name = f"X-{i:05d}-" + "n" * 30_000
        got = rules.request_headers_for_upstream(
            CIMultiDict([(name, "v"), ("Host", "h"), ("Proxy-A", "p")])
        )
        assert list(got.items()) == [(name, "v")]
        most = max(most, rules._PLANS.size)
    assert 0 < most <= rules.PLANS_BUDGET
    assert len(rules._PLANS) < 1100
