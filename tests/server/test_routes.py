"""Routes and upstream URL joining: one sidecar, several upstreams, no doubled /v1."""

from __future__ import annotations

import json
from pathlib import Path

import aiohttp
import pytest

from sse_proxy.config import load_config
from sse_proxy.errors import ConfigError
from sse_proxy.server.routes import RouteTable, join_upstream
from sse_proxy.settings import Config, RouteSpec
from sse_proxy.tools import fixtures
from sse_proxy.tools.mock_upstream import start_mock_upstream
from tests.support.logs import LogEntries, named, summary, wait_for
from tests.support.stack import StartProxy

STREAM_ID = "X-SSE-Proxy-Stream-Id"
CHAT = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.parametrize(
    ("base", "target", "url"),
    [
        ("https://api.openai.com", "/v1/chat/completions", "https://api.openai.com/v1/chat/completions"),
        ("https://api.openai.com/v1", "/v1/chat/completions", "https://api.openai.com/v1/chat/completions"),
        ("https://api.openai.com/v1/", "/v1/chat/completions", "https://api.openai.com/v1/chat/completions"),
        ("https://api.openai.com/v1", "/chat/completions", "https://api.openai.com/v1/chat/completions"),
        ("https://h/openai/v1", "/v1/models?x=1", "https://h/openai/v1/models?x=1"),
        ("https://h/api/v1", "/api/v1/x", "https://h/api/v1/x"),
        ("https://h/v1", "/v1beta/models/m:streamGenerateContent?alt=sse", "https://h/v1/v1beta/models/m:streamGenerateContent?alt=sse"),
        ("https://h/v1", "/v1", "https://h/v1"),
        ("https://h/v1", "/v1/", "https://h/v1/"),
        ("https://h/v1", "", "https://h/v1"),
        ("https://h/v1", "?a=b", "https://h/v1?a=b"),
        ("https://h", "", "https://h/"),
        ("https://h/a", "/a/a/x", "https://h/a/a/x"),
        ("http://h:8080/v1", "/v1/x%2Fy?q=%20", "http://h:8080/v1/x%2Fy?q=%20"),
    ],
)  # fmt: skip
def test_join_upstream_does_what_people_mean(base: str, target: str, url: str) -> None:
    assert join_upstream(base, target) == url


def _table(*routes: tuple[str, str], upstream: str = "") -> RouteTable:
    specs = tuple(RouteSpec(prefix=p, upstream=u) for p, u in routes)
    return RouteTable.from_config(Config(upstream=upstream, routes=specs), env={})


def test_longest_prefix_wins_on_whole_segments() -> None:
    table = _table(("/ai", "http://a"), ("/ai/anthropic", "http://b"), upstream="http://default")
    assert table.match("/ai/anthropic/v1/messages") is not None
    route, rest = table.match("/ai/anthropic/v1/messages")  # type: ignore[misc]
    assert (route.prefix, rest) == ("/ai/anthropic", "/v1/messages")
    route, rest = table.match("/ai/v1/x?y=1")  # type: ignore[misc]
    assert (route.prefix, rest) == ("/ai", "/v1/x?y=1")
    route, rest = table.match("/aix/v1")  # type: ignore[misc]
    assert (route.name, rest) == ("default", "/aix/v1")
    route, rest = table.match("/ai?q=1")  # type: ignore[misc]
    assert (route.prefix, rest) == ("/ai", "?q=1")
    assert _table(("/ai", "http://a")).match("/other") is None


@pytest.mark.parametrize(
    ("routes", "word"),
    [
        (["ai=http://a"], "starts with '/'"),
        (["/ai/=http://a"], "does not end with '/'"),
        (["/ai=ftp://a"], "http"),
        (["/_sse-proxy/x=http://a"], "reserved"),
        (["/a?b=http://a"], "plain path"),
        (["no-equals-sign"], "PREFIX=URL"),
        (["/a=https://user:pw@h"], "credentials"),
    ],
)
def test_bad_routes_are_one_clear_error(routes: list[str], word: str) -> None:
    with pytest.raises(ConfigError) as info:
        load_config(flags={"routes": routes})
    assert word in str(info.value)
    assert str(info.value).startswith("flag --route: ")
    assert "pw" not in str(info.value)


def test_routes_table_in_the_config_file(tmp_path: Path) -> None:
    path = tmp_path / "c.toml"
    path.write_text(
        """
[sse-proxy]
port = 0

[routes]
"/openai" = "https://api.openai.com/v1"

[routes."/anthropic"]
upstream = "https://api.anthropic.com"
dialect = "anthropic"
drop_client_auth = true
headers = { "x-api-key" = "${ANTHROPIC_KEY}" }
""",
        encoding="utf-8",
    )
    cfg = load_config(path=path)
    assert cfg.routes == (
        RouteSpec(prefix="/openai", upstream="https://api.openai.com/v1"),
        RouteSpec(
            prefix="/anthropic",
            upstream="https://api.anthropic.com",
            dialect="anthropic",
            headers=(("x-api-key", "${ANTHROPIC_KEY}"),),
            drop_client_auth=True,
        ),
    )
    bad = tmp_path / "bad.toml"
    bad.write_text('[routes."/x"]\nupstream = "http://h"\nheaderz = {}\n', encoding="utf-8")
    with pytest.raises(ConfigError, match="unknown key 'headerz'"):
        load_config(path=bad)


def test_env_routes() -> None:
    cfg = load_config(env={"SSE_PROXY_ROUTES": "/a=http://a/v1, /b=http://b"})
    assert [(r.prefix, r.upstream) for r in cfg.routes] == [
        ("/a", "http://a/v1"),
        ("/b", "http://b"),
    ]


# --------------------------------------------------------------- over real sockets


@pytest.mark.asyncio
async def test_two_routes_to_two_upstreams_stream_exactly(
    start: StartProxy, logs: LogEntries, session: aiohttp.ClientSession
) -> None:
    runner_a, url_a = await start_mock_upstream(seed=1)
    runner_b, url_b = await start_mock_upstream(seed=2)
    try:
        proxy = await start(
            "",
            routes=(
                RouteSpec(prefix="/openai", upstream=url_a + "/v1"),
                RouteSpec(prefix="/anthropic", upstream=url_b, dialect="anthropic"),
            ),
        )
        async with session.post(f"{proxy}/openai/v1/chat/completions", json=CHAT) as resp:
            assert resp.status == 200
            body = await resp.read()
            sid_a = resp.headers[STREAM_ID]
        assert body == fixtures.clean_stream("openai")
        async with session.post(
            f"{proxy}/anthropic/v1/messages", json={**CHAT, "max_tokens": 5}
        ) as resp:
            assert resp.status == 200
            assert await resp.read() == fixtures.clean_stream("anthropic")
            sid_b = resp.headers[STREAM_ID]
        # each upstream saw its own request, prefix stripped, /v1 not doubled
        async with session.get(f"{proxy}/anthropic/echo/x?y=1") as resp:
            echo = json.loads(await resp.read())
        assert echo["path"] == "/echo/x"
        assert echo["query"] == "y=1"
        assert echo["headers"]["host"] == url_b.removeprefix("http://")
        async with session.get(f"{proxy}/nowhere/v1/chat/completions") as resp:
            assert resp.status == 404
            assert (await resp.json())["error"]["type"] == "no_route"
        await wait_for(logs, "stream.summary", sid_b)
        first, second = summary(logs, sid_a), summary(logs, sid_b)
        assert (first["route"], first["dialect"], first["text_length"]) == (
            "/openai",
            "openai",
            len(fixtures.MESSAGE),
        )
        assert (second["route"], second["dialect"]) == ("/anthropic", "anthropic")
        async with session.get(f"{proxy}/_sse-proxy/health") as resp:
            health = await resp.json()
        assert {r["route"]: r["upstream"] for r in health["routes"]} == {
            "/openai": url_a + "/v1",
            "/anthropic": url_b,
        }
        async with session.get(f"{proxy}/_sse-proxy/metrics") as resp:
            metrics = (await resp.read()).decode()
        assert 'sse_proxy_route_requests_total{route="/openai"} 1.0' in metrics
        assert 'sse_proxy_route_requests_total{route="/anthropic"} 2.0' in metrics
        assert (
            'sse_proxy_route_streams_total{ended_by="upstream_eof",route="/anthropic"} 1.0'
            in metrics
        )
    finally:
        await runner_a.cleanup()
        await runner_b.cleanup()


@pytest.mark.asyncio
async def test_upstream_error_names_route_and_full_redacted_url(
    start: StartProxy, logs: LogEntries, session: aiohttp.ClientSession
) -> None:
    from tests.support.net import dead_port

    dead = f"http://127.0.0.1:{dead_port()}/v1"
    proxy = await start(dead, log_level="debug")
    async with session.post(f"{proxy}/v1/chat/completions?api_key=SECRETQ&x=1", json=CHAT) as r:
        assert r.status == 502
        body = await r.json()
    assert body["error"]["type"] == "upstream_unreachable"
    error = named(logs, "upstream.error")[0]
    assert error["route"] == "default"
    assert error["upstream_url"].startswith(dead + "/chat/completions?api_key=")
    assert "SECRETQ" not in json.dumps(error, default=str)
    assert named(logs, "upstream.request")[0]["upstream_url"] == error["upstream_url"]


def test_startup_line_shows_the_mapping() -> None:
    table = RouteTable.from_config(Config(upstream="https://api.openai.com/v1"), env={})
    (described,) = table.describe()
    assert described["example"] == (
        "/v1/chat/completions -> https://api.openai.com/v1/chat/completions"
    )
