"""The network around the sidecar: a real forward proxy, a private CA, mutual TLS."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import aiohttp
import pytest
from aiohttp import web

from sse_proxy.errors import ConfigError
from sse_proxy.server.network import Hop, Network, no_proxy_matches
from sse_proxy.server.run import start_proxy
from sse_proxy.settings import Config
from sse_proxy.tools import fixtures
from tests.support.logs import LogEntries, named
from tests.support.net import dead_port
from tests.support.peers import forward_proxy, private_ca, tls_mock_upstream
from tests.support.stack import StartApp, StartProxy

CHAT = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}
_PROXY_VARS = ("http_proxy", "https_proxy", "all_proxy", "no_proxy")


@pytest.fixture(autouse=True)
def _no_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    """Each test sets the proxy variables it means; none leak in from the machine."""
    for name in _PROXY_VARS:
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


async def _stream(session: aiohttp.ClientSession, proxy: str) -> tuple[int, bytes]:
    async with session.post(f"{proxy}/v1/chat/completions", json=CHAT) as resp:
        return resp.status, await resp.read()


@pytest.mark.asyncio
async def test_http_upstream_goes_through_the_forward_proxy(
    mock_url: str,
    start: StartProxy,
    session: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    target = mock_url.removeprefix("http://")
    with forward_proxy() as fp:
        monkeypatch.setenv("HTTP_PROXY", fp.url)
        proxy = await start(mock_url)
        status, body = await _stream(session, proxy)
        assert status == 200
        assert body == fixtures.clean_stream("openai")
        assert fp.wait_tunnelled(target) >= 1


@pytest.mark.asyncio
@pytest.mark.parametrize("how", ["no_proxy", "trust_env_off"])
async def test_no_proxy_and_trust_env_off_go_direct(
    mock_url: str,
    start: StartProxy,
    session: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
    how: str,
) -> None:
    target = mock_url.removeprefix("http://")
    with forward_proxy() as fp:
        monkeypatch.setenv("http_proxy", fp.url)
        if how == "no_proxy":
            monkeypatch.setenv("NO_PROXY", "example.com,127.0.0.1")
            proxy = await start(mock_url)
        else:
            proxy = await start(mock_url, trust_env=False)
        status, body = await _stream(session, proxy)
        assert status == 200
        assert body == fixtures.clean_stream("openai")
        # a control request through the forward proxy shows it prints what it tunnels
        async with (
            aiohttp.ClientSession() as direct,
            direct.get(f"{mock_url}/healthz", proxy=fp.url) as resp,
        ):
            assert resp.status == 200
        assert fp.wait_tunnelled(target) == 1


@pytest.mark.asyncio
async def test_private_ca_upstream_through_the_forward_proxy(
    tmp_path: Path,
    start: StartProxy,
    session: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    pki = private_ca(tmp_path)
    async with tls_mock_upstream(pki.server_ctx) as upstream:
        with forward_proxy() as fp:
            monkeypatch.setenv("HTTPS_PROXY", fp.url)
            proxy = await start(upstream + "/v1", upstream_ca=str(pki.ca_file))
            status, body = await _stream(session, proxy)
            assert status == 200
            assert body == fixtures.clean_stream("openai")
            assert fp.wait_tunnelled(upstream.removeprefix("https://")) >= 1


@pytest.mark.asyncio
async def test_tls_failure_is_upstream_tls_error_with_the_reason(
    tmp_path: Path, start: StartProxy, session: aiohttp.ClientSession, logs: LogEntries
) -> None:
    pki = private_ca(tmp_path)
    async with tls_mock_upstream(pki.server_ctx) as upstream:
        proxy = await start(upstream)  # the private CA is not trusted
        async with session.post(f"{proxy}/v1/chat/completions", json=CHAT) as resp:
            assert resp.status == 502
            error = (await resp.json())["error"]
        assert error["type"] == "upstream_tls_error"
        assert "certificate verify failed" in error["message"]
        line = named(logs, "upstream.error")[0]
        assert line["kind"] == "upstream_tls_error"
        assert "certificate verify failed" in line["reason"]
        assert line["upstream_url"] == upstream + "/v1/chat/completions"
        # hostname checks apply too: the certificate does not name 127.0.0.2
        proxy2 = await start(
            upstream.replace("127.0.0.1", "127.0.0.2"), upstream_ca=str(pki.ca_file)
        )
        async with session.post(f"{proxy2}/v1/chat/completions", json=CHAT) as resp:
            assert resp.status in (502, 504)


@pytest.mark.asyncio
async def test_mutual_tls_with_a_client_certificate(
    tmp_path: Path, start: StartProxy, session: aiohttp.ClientSession
) -> None:
    pki = private_ca(tmp_path, require_client_cert=True)
    async with tls_mock_upstream(pki.server_ctx) as upstream:
        proxy = await start(
            upstream, upstream_ca=str(pki.ca_file), client_cert=str(pki.client_cert_file)
        )
        status, body = await _stream(session, proxy)
        assert status == 200
        assert body == fixtures.clean_stream("openai")
        without = await start(upstream, upstream_ca=str(pki.ca_file))
        status, _ = await _stream(session, without)
        assert status == 502


@pytest.mark.asyncio
async def test_unreachable_forward_proxy_is_named(
    mock_url: str,
    start: StartProxy,
    session: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("HTTP_PROXY", f"http://user:pw@127.0.0.1:{dead_port()}")
    proxy = await start(mock_url)
    async with session.post(f"{proxy}/v1/chat/completions", json=CHAT) as resp:
        assert resp.status == 502
        error = (await resp.json())["error"]
    assert error["type"] == "proxy_unreachable"
    assert "pw" not in error["message"]


@pytest.mark.asyncio
async def test_bad_tls_files_fail_at_startup(tmp_path: Path) -> None:
    missing = tmp_path / "nope.pem"
    junk = tmp_path / "junk.pem"
    junk.write_text("not a certificate")
    cases: tuple[tuple[dict[str, Any], str], ...] = (
        ({"upstream_ca": str(missing)}, "upstream_ca"),
        ({"upstream_ca": str(junk)}, "upstream_ca"),
        ({"client_cert": str(junk)}, "client_cert"),
    )
    for settings, word in cases:
        with pytest.raises(ConfigError, match=word):
            await start_proxy(Config(upstream="https://127.0.0.1:9", port=0, **settings))


def test_proxy_env_is_read_like_curl() -> None:
    cfg = Config(upstream="https://x")
    net = Network(
        cfg,
        env={
            "https_proxy": "http://lower:1",
            "HTTPS_PROXY": "http://upper:2",
            "HTTP_PROXY": "proxy.corp:3128",
            "NO_PROXY": ".internal,10.0.0.1",
        },
    )
    from yarl import URL

    assert net.proxy_for(URL("https://api.openai.com/v1"))[0] == URL("http://lower:1")
    assert net.proxy_for(URL("http://api.example/v1"))[0] == URL("http://proxy.corp:3128")
    assert net.proxy_for(URL("https://llm.internal/v1")) == Hop()
    assert net.proxy_for(URL("http://10.0.0.1:8080/v1")) == Hop()
    assert (
        Network(
            Config(upstream="https://x", trust_env=False), env={"HTTPS_PROXY": "http://p:1"}
        ).proxy_for(URL("https://api.openai.com"))
        == Hop()
    )
    with pytest.raises(ConfigError, match="HTTPS_PROXY"):
        Network(cfg, env={"HTTPS_PROXY": "socks5://p:1"})


def test_all_proxy_covers_every_scheme_without_its_own() -> None:
    """ALL_PROXY is the proxy of a scheme that has none of its own:
    with only HTTPS_PROXY set, http:// upstreams no longer go direct."""
    from yarl import URL

    cfg = Config(upstream="https://x")
    net = Network(cfg, env={"HTTPS_PROXY": "http://tls-proxy:1", "ALL_PROXY": "http://every:2"})
    assert net.proxy_for(URL("https://api.openai.com")).proxy == URL("http://tls-proxy:1")
    assert net.proxy_for(URL("http://plain.example")).proxy == URL("http://every:2")
    assert net.proxy_for(URL("ws://realtime.example")).proxy == URL("http://every:2")
    only_all = Network(cfg, env={"all_proxy": "http://every:2"})
    assert only_all.proxy_for(URL("https://a.example")).proxy == URL("http://every:2")
    with pytest.raises(ConfigError, match="HTTP_PROXY"):  # used, so checked
        Network(cfg, env={"HTTPS_PROXY": "http://p:1", "ALL_PROXY": "socks5://s:1"})


@pytest.mark.parametrize(
    ("host", "port", "no_proxy", "direct"),
    [
        ("10.1.2.3", 443, "10.0.0.0/8", True),
        ("10.1.2.3", 443, "192.168.0.0/16, 10.1.0.0/16", True),
        ("11.1.2.3", 443, "10.0.0.0/8", False),
        ("fd00::5", 443, "fd00::/8", True),
        ("[fd00::5]", 443, "[fd00::/8]", True),
        ("10.1.2.3", 443, "10.1.2.3", True),
        ("llm.internal", 443, "10.0.0.0/8", False),  # names are not resolved for a range
        ("api.corp.example", 443, ".corp.example", True),
        ("api.corp.example", 443, "*.corp.example", True),
        ("corp.example", 443, "corp.example", True),
        ("notcorp.example", 443, "corp.example", False),
        ("api.corp.example", 8443, "corp.example:443", False),
        ("api.corp.example", 443, "corp.example:443", True),
        ("anything", 80, "*", True),
        ("anything", 80, "", False),
    ],
)
def test_no_proxy_reads_names_addresses_and_cidr_ranges(
    host: str, port: int, no_proxy: str, direct: bool
) -> None:
    assert no_proxy_matches(host, port, no_proxy) is direct


def test_proxy_credentials_go_with_every_scheme() -> None:
    """In the CONNECT for https and wss; on the request itself for http and ws, where the
    request goes to the forward proxy."""
    from yarl import URL

    net = Network(Config(upstream="https://x"), env={"ALL_PROXY": "http://u:pw@fp:3128"})
    basic = "Basic dTpwdw=="
    for url in ("https://a.example", "wss://a.example"):
        hop = net.proxy_for(URL(url))
        assert hop == Hop(URL("http://fp:3128"), {"Proxy-Authorization": basic}, None), url
    for url in ("http://a.example", "ws://a.example"):
        hop = net.proxy_for(URL(url))
        assert hop == Hop(URL("http://fp:3128"), None, {"Proxy-Authorization": basic}), url


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", ["http", "websocket"])
async def test_plain_upstreams_authenticate_to_the_forward_proxy(
    mock_url: str,
    start: StartProxy,
    start_app: StartApp,
    session: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
    kind: str,
) -> None:
    """A forward proxy that asks every request for credentials (pproxy --auth 0) passes an
    http:// stream and a ws:// session: the sidecar sends them for plain upstreams too."""

    async def echo(request: web.Request) -> web.WebSocketResponse:
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for msg in ws:
            await ws.send_str(f"echo {msg.data}")
        return ws

    ws_app = web.Application()
    ws_app.router.add_get("/v1/realtime", echo)
    upstream = mock_url if kind == "http" else await start_app(ws_app)
    target = upstream.removeprefix("http://")
    with forward_proxy(auth="user:s3cret-pw") as fp:
        host_port = fp.url.removeprefix("http://")
        monkeypatch.setenv("HTTP_PROXY", f"http://user:s3cret-pw@{host_port}")
        proxy = await start(upstream)
        if kind == "http":
            status, body = await _stream(session, proxy)
            assert status == 200
            assert body == fixtures.clean_stream("openai")
        else:
            async with session.ws_connect(f"{proxy}/v1/realtime") as ws:
                await ws.send_str("ping")
                msg = await ws.receive(timeout=10)
                assert (msg.type, msg.data) == (aiohttp.WSMsgType.TEXT, "echo ping"), msg
        assert fp.wait_tunnelled(target) >= 1
