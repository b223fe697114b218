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

from sse_proxy.server.aiohttp_internals import MAX_RESOLVED_PATHS, _RememberingDispatcher
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
    return (type(match), match.route, dict(match))


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
        miss = _outcome(await router.resolve(request))
        hit = _outcome(await router.resolve(request))
        return reference, miss, hit

    reference, miss, hit = asyncio.run(both())
    assert miss == reference, (method, path)
    assert hit == reference, (method, path)


def test_a_path_resolved_before_is_remembered_within_bounds() -> None:
    app = _app()
    router = app.router
    assert isinstance(router, _RememberingDispatcher)

    async def resolve(path: str) -> UrlMappingMatchInfo:
        return await router.resolve(make_mocked_request("POST", path, app=app))

    async def run() -> None:
        first = await resolve("/v1/chat/completions")
        assert ("POST", "/v1/chat/completions") in router._resolved
        again = await resolve("/v1/chat/completions")
        assert again is not first  # a new match each time
        assert again.route is first.route
        await resolve("/_sse-proxy/nothing")  # a 404 of the prefix: a route, remembered
        for i in range(MAX_RESOLVED_PATHS + 10):
            await resolve(f"/v1/x{i}")
        assert len(router._resolved) == MAX_RESOLVED_PATHS
        assert dict(await resolve("/v1/x2000")) == {"tail": "v1/x2000"}  # still resolved

    asyncio.run(run())
