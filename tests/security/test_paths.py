"""Paths stay under their route: dot segments, encoded or hidden behind encoded slashes and
backslashes, are resolved per RFC 3986 before route matching or refused (400); a target that
would climb out of its route is a 400. Against a recording upstream: what is forwarded is
checked on the upstream's side, raw, as it arrived.
"""

from __future__ import annotations

import re

import pytest

from sse_proxy.settings import RouteSpec
from tests.support.net import port_of, raw_exchange, running_app, running_proxy
from tests.support.upstreams import Seen, recording_app

_SEPARATORS = re.compile(r"/|\\|%2[fF]|%5[cC]")


def _get(target: str) -> bytes:
    return f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()


def _has_dot_segment(path: str) -> bool:
    """What an upstream that decodes %2e, %2f and %5c, or reads a backslash as a slash,
    would see as a dot segment."""
    pieces = _SEPARATORS.split(re.sub(r"%2[eE]", ".", path.replace("%25", "%")))
    return any(p.split(";", 1)[0] in (".", "..") for p in pieces)


def _two_routes(upstream: str) -> tuple[RouteSpec, ...]:
    """/openai with a held key; /anthropic, which drops the client's own (and ``?key=``)."""
    return (
        RouteSpec(
            prefix="/openai",
            upstream=upstream + "/v1",
            headers=(("Authorization", "Bearer sk-held-for-openai-only"),),
        ),
        RouteSpec(
            prefix="/anthropic", upstream=upstream + "/anthropic-base", drop_client_auth=True
        ),
    )


ESCAPES = [
    "/openai/../anthropic/messages",
    "/openai/%2e%2e/anthropic/messages",
    "/openai/%2E%2E/%2e%2e/admin",
    "/openai/.%2e/admin",
    "/openai/%2e./admin",
    "/openai/..%2fadmin",
    "/openai/..%2F..%2Fadmin",
    "/openai/..\\admin",
    "/openai/..%5cadmin",
    "/openai/x/..%252f..%252fadmin",
    "/openai/x/..;/..;/admin",
    "/openai/%2e%2e%2f%2e%2e%2fadmin",
    "/openai/v1/../../admin",
    "/openai/./../admin",
    "/../openai/chat",
    "/openai/x\\..\\..\\admin",
]


@pytest.mark.asyncio
@pytest.mark.parametrize("target", ESCAPES)
async def test_dot_segment_shapes_never_leave_the_route(target: str) -> None:
    """Each shape is refused (400, the upstream sees nothing) or reaches the upstream under
    the route's base path with no dot segment an upstream could read; the held key is never
    sent for a path outside its route."""
    seen: list[Seen] = []
    async with (
        running_app(recording_app(seen)) as upstream,
        running_proxy("", routes=_two_routes(upstream)) as proxy,
    ):
        reply = await raw_exchange(port_of(proxy), _get(target))
        assert reply.status in (200, 400), reply
        if reply.status == 400:
            assert seen == []
            assert reply.json()["error"]["type"] in ("path_refused", "path_leaves_route")
            return
        (got,) = seen
        assert not _has_dot_segment(got.raw_path), got.raw_path
        held = {k.lower(): v for k, v in got.headers}.get("authorization")
        assert got.raw_path.startswith("/v1/") or held is None, (got.raw_path, held)


def test_the_shapes_are_dot_segments() -> None:
    """The oracle sees what an upstream would: every escape shape has a dot segment."""
    assert all(_has_dot_segment(t) for t in ESCAPES)
    assert not _has_dot_segment("/v1/models/gemini-2.0-flash:streamGenerateContent")


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("target", "forwarded"),
    [
        ("/openai/chat/./completions", "/v1/chat/completions"),
        ("/openai/x/../chat/completions", "/v1/chat/completions"),
        ("/openai/chat/%2e/completions?q=../x", "/v1/chat/completions?q=../x"),
        ("/openai/models/gpt-4.1", "/v1/models/gpt-4.1"),
    ],
)
async def test_dot_segments_inside_the_route_are_resolved(target: str, forwarded: str) -> None:
    seen: list[Seen] = []
    async with (
        running_app(recording_app(seen)) as upstream,
        running_proxy(
            "", routes=(RouteSpec(prefix="/openai", upstream=upstream + "/v1"),)
        ) as proxy,
    ):
        reply = await raw_exchange(port_of(proxy), _get(target))
        assert reply.status == 200, reply
        assert [s.raw_path for s in seen] == [forwarded]


@pytest.mark.asyncio
async def test_a_dot_path_into_the_admin_prefix_is_not_forwarded() -> None:
    """``/v1/../_sse-proxy/...`` resolves into the reserved prefix: never forwarded."""
    seen: list[Seen] = []
    async with running_app(recording_app(seen)) as upstream, running_proxy(upstream) as proxy:
        for target in ("/v1/../_sse-proxy/x", "/v1/%2e%2e/_sse-proxy/health"):
            reply = await raw_exchange(port_of(proxy), _get(target))
            assert reply.status in (200, 404), reply
            if reply.status == 200:  # routed to the proxy's own health endpoint
                assert reply.json()["status"] == "ok"
        assert seen == []


# A target admitted once is routed from RouteTable.admitted after that; every
# repetition must reach the outcome the first did: the same status, the same raw path and
# the same held headers at the upstream.
REPEATED = [
    "/openai/chat/completions",
    "/openai/x/../chat/completions",
    "/openai/chat/%2e/completions?q=../x",
    "/openai/../anthropic/messages",
    "/openai/..%2fadmin",
    "/anthropic/v1/messages?key=abc&beta=1",
    "/anthropic/v1/messages?KEY=abc",
    "/nowhere/at/all",
    "/_sse-proxy/nothing",
    "/v1/../_sse-proxy/x",
]


@pytest.mark.asyncio
async def test_a_repeated_target_is_routed_as_it_was_the_first_time() -> None:
    seen: list[Seen] = []
    async with (
        running_app(recording_app(seen)) as upstream,
        running_proxy("", routes=_two_routes(upstream)) as proxy,
    ):
        first: dict[str, tuple[int, tuple[str, str | None] | None]] = {}
        for round_ in range(3):
            for target in REPEATED:
                before = len(seen)
                reply = await raw_exchange(port_of(proxy), _get(target))
                forwarded = None
                if len(seen) > before:
                    (got,) = seen[before:]
                    held = {k.lower(): v for k, v in got.headers}.get("authorization")
                    forwarded = (got.raw_path, held)
                outcome = (reply.status, forwarded)
                if round_ == 0:
                    first[target] = outcome
                else:
                    assert outcome == first[target], (target, round_)
    statuses = {t: s for t, (s, _) in first.items()}
    assert statuses["/openai/chat/completions"] == 200
    assert statuses["/nowhere/at/all"] == 404
    assert statuses["/openai/..%2fadmin"] in (400, 200)
    assert first["/anthropic/v1/messages?KEY=abc"][1] == ("/anthropic-base/v1/messages", None)
    assert first["/anthropic/v1/messages?key=abc&beta=1"][1] == (
        "/anthropic-base/v1/messages?beta=1",
        None,
    )
    assert first["/openai/x/../chat/completions"][1] == (
        "/v1/chat/completions",
        "Bearer sk-held-for-openai-only",
    )


def test_the_kept_targets_are_bounded_in_bytes() -> None:
    """1,100 invented 30 KB targets: what is kept stays under the budget; a short target
    kept after a flood is kept."""
    from yarl import URL

    from sse_proxy.server.routes import ADMITTED_BUDGET, Route, RouteTable

    route = Route("r", "/", "http://127.0.0.1:9", "auto", (), False)
    table = RouteTable([route])
    most = 0
    for i in range(1100):
        target = f"/p{i:05d}/" + "x" * 30_000
        table.remember(target, (route, URL(f"http://127.0.0.1:9{target}")))
        most = max(most, table.admitted.size)
    assert 0 < most <= ADMITTED_BUDGET
    assert len(table.admitted) < 1100
    table.remember("/v1/chat/completions", (route, URL("http://127.0.0.1:9/v1/chat/completions")))
    assert "/v1/chat/completions" in table.admitted
