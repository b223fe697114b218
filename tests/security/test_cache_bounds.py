"""What the proxy remembers by request data is bounded in bytes, not only in entries.

A client that invents long paths, header names or Host values must not make the proxy keep
them: 1,100 distinct 30 KB paths through a real proxy (each with a 20 KB header name of its
own) leave every cache keyed by them under its byte budget, as each cache counts; requests
the front door refuses leave nothing in the router's; and the process does not keep the
hundred-odd MiB that a bound by count let them hold.
"""

from __future__ import annotations

import aiohttp
import pytest
from aiohttp import web

from sse_proxy.hosts import parse_host
from sse_proxy.server import headers
from sse_proxy.server.aiohttp_internals import RESOLVED_BUDGET
from sse_proxy.server.front_door import SERVED_BUDGET, FrontDoor
from sse_proxy.server.keys import ROUTES
from sse_proxy.server.routes import ADMITTED_BUDGET
from sse_proxy.server.run import start_proxy, stop_proxy
from sse_proxy.settings import Config
from tests.support.net import running_app

N = 1100
PATH_BYTES = 30_000


def _upstream() -> web.Application:
    async def ok(_request: web.Request) -> web.Response:
        return web.Response(text="ok")

    app = web.Application(handler_args={"max_line_size": 1 << 20, "max_field_size": 1 << 20})
    app.router.add_route("*", "/{tail:.*}", ok)
    return app


def _rss() -> int:
    with open("/proc/self/statm", encoding="ascii") as f:
        return int(f.read().split()[1]) * 4096


@pytest.mark.asyncio
async def test_invented_paths_and_names_stay_within_the_byte_budgets() -> None:
    async with running_app(_upstream()) as upstream:
        runner, url = await start_proxy(Config(upstream=upstream, port=0, shutdown_grace=0.5))
        app = runner.app
        resolved, admitted, plans = app.router._resolved, app[ROUTES].admitted, headers._PLANS  # type: ignore[attr-defined]
        connector = aiohttp.TCPConnector(limit=1)
        sizes: list[tuple[int, int, int]] = []
        try:
            async with aiohttp.ClientSession(connector=connector, trust_env=False) as session:
                before = _rss()
                for i in range(N):
                    path = f"/v1/{i:05d}/" + "p" * PATH_BYTES
                    name = f"X-Invented-{i:05d}-" + "n" * 20_000
                    async with session.get(url + path, headers={name: "1"}) as resp:
                        assert resp.status == 200, await resp.text()
                        await resp.read()
                    sizes.append((resolved.size, admitted.size, plans.size))
                grown = _rss() - before
                # refused by the front door (a page of another site): nothing kept
                resolved.clear()
                for i in range(50):
                    async with session.get(
                        url + f"/v1/refused/{i:05d}/" + "r" * PATH_BYTES,
                        headers={"Sec-Fetch-Site": "cross-site"},
                    ) as resp:
                        assert resp.status == 403
                refused_kept = len(resolved)
                async with session.get(url + "/v1/models") as resp:
                    assert resp.status == 200
                assert ("GET", "/v1/models") in resolved  # a request let in is remembered
        finally:
            await stop_proxy(runner)
    assert max(s[0] for s in sizes) <= RESOLVED_BUDGET
    assert max(s[1] for s in sizes) <= ADMITTED_BUDGET
    assert max(s[2] for s in sizes) <= headers.PLANS_BUDGET
    assert min(s[0] for s in sizes[-100:]) > 0  # (they do keep what fits)
    assert refused_kept == 0
    # each request's path and name were kept three or four times over by a count bound:
    # over a hundred MiB; a few budgets' worth now (generous: the heap is the test's too)
    assert grown < 64 << 20, grown


def test_invented_host_names_stay_within_the_byte_budget() -> None:
    """Loopback names are served (``*.localhost``): 5,000 distinct ones about as long as a
    Host may be (300 characters: a few MiB in all)."""
    door = FrontDoor("127.0.0.1")
    label = "h" * 60
    most = 0
    for i in range(5000):
        name = ".".join([f"a{i:05d}", *[label] * 3]) + ".localhost:8787"
        assert door.check_host([name]) == parse_host(name)
        most = max(most, door.served.size)
    assert 0 < most <= SERVED_BUDGET
    assert len(door.served) < 5000
