"""The upstream request class builds the headers aiohttp's own would: differential, over
generated header lists (duplicates, every case of ``Host``, the names aiohttp adds)."""

from __future__ import annotations

import asyncio
from collections.abc import Iterable

import aiohttp
from hypothesis import given, settings
from hypothesis import strategies as st
from multidict import CIMultiDict
from yarl import URL

from sse_proxy.server.aiohttp_internals import NOT_ADDED, UpstreamRequest

NAMES = st.sampled_from(
    [
        "Accept",
        "accept",
        "Accept-Encoding",
        "User-Agent",
        "Content-Type",
        "Host",
        "hOsT",
        "X-Dup",
        "x-dup",
        "Authorization",
        "Content-Length",
    ]
)
VALUES = st.text(st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=8)
HEADERS = st.lists(st.tuples(NAMES, VALUES), max_size=8)
SKIPS = st.sampled_from([NOT_ADDED, None, frozenset(), frozenset({"User-Agent"})])
URLS = st.sampled_from(["http://127.0.0.1:8080/v1/x", "http://example.test/p?q=1", "http://[::1]/"])


Built = tuple[list[tuple[str, str]], list[tuple[str, None]]]


def _built(cls: type[aiohttp.ClientRequest], url: str, headers: object, skip: object) -> Built:
    loop = asyncio.new_event_loop()
    try:
        req = cls(
            "POST",
            URL(url),
            headers=headers,  # type: ignore[arg-type]
            skip_auto_headers=skip,  # type: ignore[arg-type]
            data=b"{}",
            loop=loop,
        )
        return list(req.headers.items()), list(req.skip_auto_headers.items())
    finally:
        loop.close()


@settings(max_examples=300, deadline=None)
@given(pairs=HEADERS, skip=SKIPS, url=URLS, as_multidict=st.booleans())
def test_headers_as_aiohttp_builds_them(
    pairs: list[tuple[str, str]], skip: Iterable[str] | None, url: str, as_multidict: bool
) -> None:
    headers: object = CIMultiDict(pairs) if as_multidict else pairs
    ours = _built(UpstreamRequest, url, headers, skip)
    theirs = _built(aiohttp.ClientRequest, url, headers, skip)
    assert ours == theirs, (pairs, skip, url)


def test_the_fast_path_is_taken() -> None:
    """The case the proxy sends (a CIMultiDict without Host, the session's skipped names)
    gives the same headers, Host first and no User-Agent or Accept-Encoding added."""
    headers = CIMultiDict([("X-Dup", "1"), ("x-dup", "2"), ("Authorization", "Bearer k")])
    got, skipped = _built(UpstreamRequest, "http://127.0.0.1:9/v1", headers, NOT_ADDED)
    assert got[0] == ("Host", "127.0.0.1:9")
    names = [k.lower() for k, _ in got]
    assert names == ["host", "x-dup", "x-dup", "authorization", "accept", "content-length"]
    assert {k.lower() for k, _ in skipped} == {"accept-encoding", "user-agent", "content-type"}
