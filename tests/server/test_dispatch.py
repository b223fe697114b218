"""The remembering router finds what aiohttp's own resolution finds: differential, each
(method, path) resolved on a miss and again on a hit, against ``UrlDispatcher.resolve``
(the uncached walk) on the same frozen router; the proxy's app with its admin endpoints,
the inspector and extra routes."""

from __future__ import annotations

import asyncio

import pytest
from aiohttp import web
from aiohttp.test_utils import make_mocked_request
from aiohttp.web_urldispatcher import UrlDispatcher, UrlMappingMatchInfo
from hypothesis import given, settings
from hypothesis import strategies as st

from sse_proxy.server.aiohttp_internals import (
    RESOLVED_BUDGET,
    _FirstSeen,
    _RememberingDispatcher,
    remember,
)
from sse_proxy.server.app import make_app
from sse_proxy.settings import Config, RouteSpec

SEGMENTS = st.sampled_from(
    ["_sse-proxy", "_sse-proxyX", "health", "metrics", "ui", "v1", "chat", "", "a%2Fb", "é", "."]
)
PATHS = st.lists(SEGMENTS, min_size=0, max_size=4).map(lambda s: "/" + "/".join(s))
METHODS = st.sampled_from(["GET", "POST", "HEAD", "OPTIONS", "DELETE"])


def _app() -> web.Application:
    cfg = Config(
        upstream="http://127.0.0.1:9",
        routes=(RouteSpec(prefix="/anthropic", upstream="http://127.0.0.1:10"),),
        ui=True,
    )
    app = make_app(cfg)
    app.freeze()
    return app


def _outcome(match: UrlMappingMatchInfo) -> tuple[object, ...]:
    exc = match.http_exception
    if exc is not None:  # (an error's route is made for it: its status says what it is)
        return (type(match), exc.status)
    # a first-seen match is aiohttp's, waiting to be remembered
    kind = UrlMappingMatchInfo if type(match) is _FirstSeen else type(match)
    return (kind, match.route, dict(match))


def _let_in(app: web.Application, method: str, path: str, match: UrlMappingMatchInfo) -> None:
    """What the front door does for a request it lets in (its match set as aiohttp sets
    it: make_mocked_request wraps what it is given)."""
    request = make_mocked_request(method, path, app=app)
    request._match_info = match
    remember(request)


@pytest.fixture(scope="module")
def app() -> web.Application:
    return _app()


@settings(max_examples=300, deadline=None)
@given(method=METHODS, path=PATHS)
def test_resolved_as_aiohttp_resolves(app: web.Application, method: str, path: str) -> None:
    router = app.router
    assert isinstance(router, _RememberingDispatcher)
    request = make_mocked_request(method, path, app=app)

    async def both() -> tuple[tuple[object, ...], ...]:
        reference = _outcome(await UrlDispatcher.resolve(router, request))
        first = await router.resolve(request)
        _let_in(app, method, path, first)
        hit = _outcome(await router.resolve(request))
        return reference, _outcome(first), hit

    reference, miss, hit = asyncio.run(both())
    assert miss == reference, (method, path)
    assert hit == reference, (method, path)


def test_a_path_let_in_is_remembered_within_a_byte_budget() -> None:
    """A path is remembered once its request is let in (the front door calls
    ``remember``), never before; 1,100 invented paths of 30 KB keep the memory under its
    budget, and are resolved all the same."""
    app = _app()
    router = app.router
    assert isinstance(router, _RememberingDispatcher)

    async def resolve(path: str, *, let_in: bool = True) -> UrlMappingMatchInfo:
        match = await router.resolve(make_mocked_request("POST", path, app=app))
        if let_in:
            _let_in(app, "POST", path, match)
        return match

    async def run() -> None:
        await resolve("/v1/chat/completions", let_in=False)
        assert ("POST", "/v1/chat/completions") not in router._resolved  # refused: not kept
        first = await resolve("/v1/chat/completions")
        assert ("POST", "/v1/chat/completions") in router._resolved
        again = await resolve("/v1/chat/completions")
        assert type(again) is UrlMappingMatchInfo  # a hit
        assert again is not first  # a new match each time
        assert again.route is first.route
        await resolve("/_sse-proxy/nothing")  # a 404 of the prefix: a route, remembered
        assert ("POST", "/_sse-proxy/nothing") in router._resolved
        most = 0
        for i in range(1100):
            path = f"/v1/{i:05d}/" + "x" * 30_000
            assert dict(await resolve(path)) == {"tail": path[1:]}  # resolved all the same
            most = max(most, router._resolved.size)
        assert 0 < most <= RESOLVED_BUDGET
        assert len(router._resolved) < 1100

    asyncio.run(run())
