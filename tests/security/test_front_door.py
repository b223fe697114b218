"""The front door: the held key belongs to the app, not to every web page. Requests shaped
as an attacker's browser sends them (cross-site, rebound, a WebSocket upgrade from a foreign
origin) must not reach a recording upstream that the sidecar holds a key for; SDK-shaped
requests, a same-origin page and an allowed origin still get through.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import anthropic
import openai
import pytest
from aiohttp import web

from sse_proxy.hosts import parse_host, parse_origin
from sse_proxy.server.front_door import FrontDoor
from sse_proxy.settings import Config
from sse_proxy.tools import fixtures
from tests.support.logs import LogEntries, named
from tests.support.net import free_port, port_of, raw_exchange, running_app, running_proxy
from tests.support.stack import StartProxy
from tests.support.upstreams import Seen, recording_app

KEY = "sk-front-door-held-0123456789"
ATTACKER = "https://attacker.invalid"
CROSS = f"Origin: {ATTACKER}\r\nSec-Fetch-Site: cross-site\r\n"


def _held(**overrides: Any) -> dict[str, Any]:
    return {"upstream_headers": (("Authorization", f"Bearer {KEY}"),), **overrides}


def _request(method: str, path: str, host: str, extra: str = "", body: bytes = b"") -> bytes:
    length = f"Content-Length: {len(body)}\r\n" if body or method == "POST" else ""
    return (
        f"{method} {path} HTTP/1.1\r\nHost: {host}\r\n{extra}{length}Connection: close\r\n\r\n"
    ).encode() + body


def _reached_with_key(seen: list[Seen]) -> list[Seen]:
    return [s for s in seen if any(KEY in v for _, v in s.headers)]


# ------------------------------------------------------------------ 1. cross-site requests


CSRF = {
    "text/plain form POST": (
        "POST",
        "/v1/chat/completions",
        "Content-Type: text/plain;charset=UTF-8\r\n" + CROSS,
        b'{"model":"gpt-4o","messages":[{"role":"user","content":"spend"}]}',
    ),
    "CORS preflight": (
        "OPTIONS",
        "/v1/chat/completions",
        CROSS + "Access-Control-Request-Method: POST\r\n"
        "Access-Control-Request-Headers: content-type\r\n",
        b"",
    ),
    "fetch() JSON POST": (
        "POST",
        "/v1/chat/completions",
        "Content-Type: application/json\r\nSec-Fetch-Mode: cors\r\n" + CROSS,
        b'{"model":"gpt-4o"}',
    ),
    "GET": ("GET", "/v1/models", CROSS + "Sec-Fetch-Mode: no-cors\r\n", b""),
    "navigation without Origin": ("GET", "/v1/models", "Sec-Fetch-Site: cross-site\r\n", b""),
    "same-site page of another port": (
        "GET",
        "/v1/models",
        "Origin: http://127.0.0.1:3000\r\nSec-Fetch-Site: same-site\r\n",
        b"",
    ),
    "opaque origin (sandboxed iframe)": ("POST", "/v1/responses", "Origin: null\r\n", b"{}"),
    # a page on another port of this machine is same-site; its <img> and <script> send no
    # Origin
    "same-site <img> without Origin": (
        "GET",
        "/v1/models",
        "Sec-Fetch-Site: same-site\r\nSec-Fetch-Mode: no-cors\r\nSec-Fetch-Dest: image\r\n",
        b"",
    ),
    "same-site <script> without Origin": (
        "GET",
        "/v1/models",
        "Sec-Fetch-Site: Same-Site\r\nSec-Fetch-Mode: no-cors\r\nSec-Fetch-Dest: script\r\n",
        b"",
    ),
    "an unknown Sec-Fetch-Site": ("GET", "/v1/models", "Sec-Fetch-Site: same-party\r\n", b""),
}


@pytest.mark.asyncio
@pytest.mark.parametrize("shape", list(CSRF))
async def test_cross_site_requests_are_refused_before_anything_is_forwarded(
    shape: str, logs: LogEntries
) -> None:
    method, path, extra, body = CSRF[shape]
    seen: list[Seen] = []
    async with (
        running_app(recording_app(seen)) as upstream,
        running_proxy(upstream, **_held()) as proxy,
    ):
        port = port_of(proxy)
        reply = await raw_exchange(port, _request(method, path, f"127.0.0.1:{port}", extra, body))
    assert reply.status == 403, reply
    error = reply.json()["error"]
    assert error["setting"] == "allow_origins"
    assert "--allow-origin" in error["message"]
    assert reply.header("Access-Control-Allow-Origin") is None  # the page reads nothing
    assert seen == []
    (line,) = named(logs, "frontdoor.refused")
    assert (line["status"], line["setting"], line["method"]) == (403, "allow_origins", method)


# ------------------------------------------------------------------------ 2. DNS rebinding


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("GET", "/_sse-proxy/ui"),
        ("GET", "/_sse-proxy/ui/streams.json"),
        ("GET", "/_sse-proxy/ui/events"),
        ("GET", "/favicon.ico"),
        ("DELETE", "/_sse-proxy/health"),
        ("GET", "/_sse-proxy/no-such-endpoint"),
    ],
)
async def test_every_route_of_the_proxy_is_behind_the_front_door(
    method: str, path: str, logs: LogEntries
) -> None:
    """The inspector's pages and feed, the favicon the proxy answers itself, a method no
    endpoint takes and the admin prefix's catch-all: a rebound Host gets 421 on each, as on
    a forwarded path (the front door is in every handler, not only the forwarding one)."""
    seen: list[Seen] = []
    async with (
        running_app(recording_app(seen)) as upstream,
        running_proxy(upstream, ui=True, **_held()) as proxy,
    ):
        reply = await raw_exchange(
            port_of(proxy), _request(method, path, f"attacker.invalid:{port_of(proxy)}")
        )
    assert reply.status == 421, reply
    assert reply.json()["error"]["type"] == "host_not_served"
    assert seen == []
    assert named(logs, "frontdoor.refused")[0]["path"] == path


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "host",
    [
        "attacker.invalid:{port}",
        "attacker.invalid",
        "127.0.0.1.attacker.invalid:{port}",
        "localhost.attacker.invalid:{port}",
        "0.0.0.0:{port}",
        "10.0.0.1:{port}",  # an address, but not a loopback one: not on a loopback listener
    ],
)
@pytest.mark.parametrize(
    "path", ["/v1/chat/completions", "/_sse-proxy/health", "/_sse-proxy/metrics"]
)
async def test_rebound_hosts_are_misdirected(host: str, path: str, logs: LogEntries) -> None:
    """After rebinding, the attacker's page is same-origin with the proxy (no Origin check
    can catch it): its Host is the attacker's name, and that is refused (421), for the
    proxy's own endpoints too (health lists the upstreams)."""
    seen: list[Seen] = []
    async with (
        running_app(recording_app(seen)) as upstream,
        running_proxy(upstream, **_held()) as proxy,
    ):
        port = port_of(proxy)
        wire = host.format(port=port)
        same_origin = f"Origin: http://{wire}\r\nSec-Fetch-Site: same-origin\r\n"
        reply = await raw_exchange(port, _request("POST", path, wire, same_origin, b"{}"))
    assert reply.status == 421, reply
    error = reply.json()["error"]
    assert (error["type"], error["setting"]) == ("host_not_served", "allowed_hosts")
    assert "--allowed-host" in error["message"]
    assert upstream not in reply.body.decode()
    assert seen == []
    assert named(logs, "frontdoor.refused")[0]["status"] == 421


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "host",
    ["127.0.0.1:{port}@attacker.invalid", "127.0.0.1:{port}, attacker.invalid", "[::1", ""],
)
async def test_malformed_hosts_are_bad_requests(host: str) -> None:
    seen: list[Seen] = []
    async with running_app(recording_app(seen)) as upstream, running_proxy(upstream) as proxy:
        port = port_of(proxy)
        reply = await raw_exchange(port, _request("GET", "/v1/models", host.format(port=port)))
    assert reply.status == 400, reply
    assert reply.json()["error"]["type"] == "bad_host"
    assert seen == []


# ------------------------------------------------------- 3. cross-site WebSocket hijacking


def _ws_upstream(seen: list[dict[str, str]]) -> web.Application:
    async def realtime(request: web.Request) -> web.WebSocketResponse:
        seen.append(dict(request.headers))
        ws = web.WebSocketResponse()
        await ws.prepare(request)
        async for msg in ws:
            await ws.send_str(msg.data)
        return ws

    app = web.Application()
    app.router.add_get("/v1/realtime", realtime)
    return app


@pytest.mark.asyncio
async def test_a_websocket_upgrade_from_a_foreign_origin_is_refused() -> None:
    """A real WebSocket handshake from a page of another site (browsers send its Origin
    and nothing else can stop it: WebSockets have no CORS) is refused: no 101, and the
    upstream never sees the held key. The same handshake without Origin (an SDK) works."""
    seen: list[dict[str, str]] = []
    async with (
        running_app(_ws_upstream(seen)) as upstream,
        running_proxy(upstream, **_held()) as proxy,
        aiohttp.ClientSession() as session,
    ):
        for origin in (ATTACKER, "http://127.0.0.1:1", "null"):
            with pytest.raises(aiohttp.WSServerHandshakeError) as info:
                await session.ws_connect(f"{proxy}/v1/realtime", origin=origin)
            assert info.value.status == 403, origin
        assert seen == []
        async with session.ws_connect(f"{proxy}/v1/realtime") as ws:
            await ws.send_str("hello")
            assert (await ws.receive()).data == "hello"
    assert [h.get("Authorization") for h in seen] == [f"Bearer {KEY}"]


@pytest.mark.asyncio
async def test_the_admin_listener_has_the_front_door_too() -> None:
    """With --admin-port, health, metrics and the inspector on their own listener are
    behind the same front door (a rebound page must not read what streams there were)."""
    seen: list[Seen] = []
    admin = free_port()
    async with (
        running_app(recording_app(seen)) as upstream,
        running_proxy(upstream, admin_port=admin, ui=True) as _proxy,
    ):
        for path in ("/_sse-proxy/health", "/_sse-proxy/metrics", "/_sse-proxy/ui"):
            rebound = await raw_exchange(admin, _request("GET", path, f"attacker.invalid:{admin}"))
            assert rebound.status == 421, (path, rebound)
            foreign = await raw_exchange(admin, _request("GET", path, f"127.0.0.1:{admin}", CROSS))
            assert foreign.status == 403, (path, foreign)
            ok = await raw_exchange(admin, _request("GET", path, f"127.0.0.1:{admin}"))
            assert ok.status == 200, (path, ok)


# --------------------------------------------------------------- what still gets through


@pytest.mark.asyncio
async def test_sdk_shaped_requests_and_the_proxys_own_origin_get_through() -> None:
    """No Origin, no Sec-Fetch-Site (every SDK); a page of the proxy's own origin (the
    inspector, curl with an Origin of the proxy); loopback names and addresses."""
    seen: list[Seen] = []
    async with (
        running_app(recording_app(seen)) as upstream,
        running_proxy(upstream, **_held()) as proxy,
    ):
        port = port_of(proxy)
        for host, extra in (
            (f"127.0.0.1:{port}", ""),
            (f"localhost:{port}", ""),
            ("localhost", ""),
            (f"app.localhost:{port}", ""),
            (f"127.0.0.2:{port}", ""),
            (
                f"localhost:{port}",
                f"Origin: http://localhost:{port}\r\nSec-Fetch-Site: same-origin\r\n",
            ),
            (f"127.0.0.1:{port}", "Sec-Fetch-Site: none\r\n"),
        ):
            reply = await raw_exchange(port, _request("GET", "/v1/models", host, extra))
            assert reply.status == 200, (host, extra, reply)
    assert len(_reached_with_key(seen)) == 7


@pytest.mark.asyncio
async def test_an_allowed_origin_works_preflight_and_all() -> None:
    """``--allow-origin http://localhost:5173``: the local web app's preflight is answered
    by the proxy (never forwarded), its requests reach the upstream with the held key, and
    the answers say the app may read them; another origin is still refused."""
    app = "http://localhost:5173"
    seen: list[Seen] = []
    async with (
        running_app(recording_app(seen)) as upstream,
        running_proxy(upstream, **_held(allow_origins=(app,))) as proxy,
    ):
        port = port_of(proxy)
        host = f"127.0.0.1:{port}"
        cross = f"Origin: {app}\r\nSec-Fetch-Site: cross-site\r\n"
        preflight = await raw_exchange(
            port,
            _request(
                "OPTIONS",
                "/v1/chat/completions",
                host,
                cross + "Access-Control-Request-Method: POST\r\n"
                "Access-Control-Request-Headers: content-type, x-stainless-os\r\n",
            ),
        )
        assert preflight.status == 204, preflight
        assert preflight.header("Access-Control-Allow-Origin") == app
        assert preflight.header("Access-Control-Allow-Methods") == "POST"
        assert preflight.header("Access-Control-Allow-Headers") == "content-type, x-stainless-os"
        assert seen == []  # answered by the proxy
        post = await raw_exchange(
            port,
            _request(
                "POST",
                "/v1/chat/completions",
                host,
                cross + "Content-Type: application/json\r\n",
                b'{"model":"m"}',
            ),
        )
        assert post.status == 200, post
        assert post.header("Access-Control-Allow-Origin") == app
        assert "X-SSE-Proxy-Stream-Id" in (post.header("Access-Control-Expose-Headers") or "")
        # the app on another port of this machine: same-site, and allowed by its Origin
        same_site = await raw_exchange(
            port,
            _request(
                "POST",
                "/v1/chat/completions",
                host,
                f"Origin: {app}\r\nSec-Fetch-Site: same-site\r\nContent-Type: application/json\r\n",
                b'{"model":"m"}',
            ),
        )
        assert same_site.status == 200, same_site
        other = await raw_exchange(
            port, _request("GET", "/v1/models", host, "Origin: http://localhost:5174\r\n")
        )
        assert other.status == 403
    assert [s.method for s in _reached_with_key(seen)] == ["POST", "POST"]


@pytest.mark.asyncio
async def test_allowed_hosts_serve_a_name_and_a_domain() -> None:
    seen: list[Seen] = []
    async with (
        running_app(recording_app(seen)) as upstream,
        running_proxy(upstream, allowed_hosts=("sidecar", ".corp.example")) as proxy,
    ):
        port = port_of(proxy)
        statuses = {}
        for host in ("sidecar:8787", "llm.corp.example", "corp.example", "evil.example"):
            reply = await raw_exchange(port, _request("GET", "/v1/models", host))
            statuses[host] = reply.status
    assert statuses == {
        "sidecar:8787": 200,
        "llm.corp.example": 200,
        "corp.example": 200,
        "evil.example": 421,
    }


def test_beyond_loopback_addresses_are_served_and_names_are_not() -> None:
    """Listening beyond loopback, a Host that is an IP address cannot be a rebound name:
    served; a name must be allowed."""
    door = FrontDoor.for_config(Config(upstream="http://x", host="0.0.0.0"))
    for host, served in (
        ("10.0.0.7:8787", True),
        ("[fd00::7]:8787", True),
        ("localhost", True),
        ("sidecar:8787", False),
        ("attacker.invalid", False),
    ):
        parsed = parse_host(host)
        assert parsed is not None
        assert door.serves(parsed) is served, host
    named_host = FrontDoor.for_config(Config(upstream="http://x", host="sidecar.local"))
    assert named_host.serves(parse_host("sidecar.local:8787"))  # type: ignore[arg-type]


@pytest.mark.parametrize(
    ("value", "parsed"),
    [
        ("127.0.0.1:8787", "127.0.0.1:8787"),
        ("LOCALHOST.", "localhost"),
        ("[::1]:80", "[::1]:80"),
        ("[0:0:0:0:0:0:0:1]", "[::1]"),
        ("127.0.0.1:8787@evil", None),
        ("127.0.0.1:8787, evil", None),
        ("127.0.0.1:", None),
        ("127.0.0.1:0", None),
        ("127.0.0.1:70000", None),
        ("127.1", None),
        ("0x7f.0.0.1", None),
        ("[fe80::1%25eth0]", None),
        ("a..b", None),
        ("host name", None),
        ("h/x", None),
        ("", None),
    ],
)
def test_host_is_parsed_strictly(value: str, parsed: str | None) -> None:
    got = parse_host(value)
    assert (None if got is None else str(got)) == parsed


def test_origins_compare_as_browsers_serialise_them() -> None:
    origin = parse_origin("HTTP://LocalHost:80")
    assert origin is not None
    assert str(origin) == "http://localhost"
    assert origin.same_as(parse_host("localhost"))  # type: ignore[arg-type]
    assert not origin.same_as(parse_host("localhost:8787"))  # type: ignore[arg-type]
    assert parse_origin("null") is None
    assert parse_origin("http://localhost:5173/path") is None
    assert json.dumps(str(parse_origin("https://[::1]:443"))) == '"https://[::1]"'


@pytest.mark.asyncio
async def test_the_openai_and_anthropic_sdks_are_unaffected(
    mock_url: str, start: StartProxy, logs: LogEntries
) -> None:
    """The vendors' SDKs, unchanged, stream through the front door (they send no Origin and
    no Sec-Fetch-Site); nothing is refused."""
    proxy = await start(mock_url, **_held())
    oai = openai.AsyncOpenAI(base_url=f"{proxy}/v1", api_key="app-key", max_retries=0)
    async with oai:
        stream = await oai.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        text = "".join([c.choices[0].delta.content or "" async for c in stream if c.choices])
    assert text == fixtures.MESSAGE
    ant = anthropic.AsyncAnthropic(base_url=proxy, api_key="app-key", max_retries=0)
    async with (
        ant,
        ant.messages.stream(
            model="claude-3-5-sonnet-20241022",
            max_tokens=64,
            messages=[{"role": "user", "content": "hi"}],
        ) as stream_,
    ):
        assert "".join([t async for t in stream_.text_stream]) == fixtures.MESSAGE
    assert named(logs, "frontdoor.refused") == []
