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


def test_names_past_the_plan_bound_are_still_matched(monkeypatch: pytest.MonkeyPatch) -> None:
    """Once the plan cache is full, new name sequences are matched each time, never cached."""
    monkeypatch.setattr(rules, "_PLANS", {})
    monkeypatch.setattr(rules, "_MAX_PLANS", 2)
    for i in range(6):
        got = rules.request_headers_for_upstream(
            CIMultiDict([(f"X-{i}", "v"), ("Host", "h"), ("Proxy-A", "p")])
        )
        assert list(got.items()) == [(f"X-{i}", "v")]
    assert len(rules._PLANS) == 2
