"""WebSocket pass-through over real sockets: a real aiohttp WebSocket echo upstream."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest
from aiohttp import WSMsgType, web

from sse_proxy.server.run import start_proxy, stop_proxy
from sse_proxy.settings import Config, RouteSpec
from sse_proxy.tools import fixtures
from tests.support.logs import LogEntries, named, wait_for
from tests.support.peers import forward_proxy, private_ca
from tests.support.stack import StartApp, StartProxy

SECRET = "sk-ws-held-key-0123456789"
_CLOSES = web.AppKey("closes", list)
_CLOSED = web.AppKey("closed", asyncio.Event)


async def _echo_ws(request: web.Request) -> web.StreamResponse:
    """Echo each message as it came; ``headers`` answers with what the upstream saw;
    ``close:CODE:REASON`` closes with that code; ``vanish`` drops the connection."""
    ws = web.WebSocketResponse(protocols=("realtime.v1",))
    await ws.prepare(request)
    async for msg in ws:
        if msg.type is WSMsgType.TEXT:
            text: str = msg.data
            if text == "headers":
                await ws.send_str(
                    json.dumps(
                        {
                            "path": request.path,
                            "query": request.query_string,
                            "headers": {k.lower(): v for k, v in request.headers.items()},
                        }
                    )
                )
            elif text.startswith("close:"):
                _, code, reason = text.split(":", 2)
                await ws.close(code=int(code), message=reason.encode())
            elif text == "vanish":
                assert request.transport is not None
                request.transport.abort()
            else:
                await ws.send_str(text)
        elif msg.type is WSMsgType.BINARY:
            await ws.send_bytes(msg.data)
    request.app[_CLOSES].append(ws.close_code)
    request.app[_CLOSED].set()
    return ws


def _upstream_app() -> web.Application:
    app = web.Application()
    app[_CLOSES] = []
    app[_CLOSED] = asyncio.Event()
    app.router.add_get("/v1/realtime", _echo_ws)
    return app


async def _start_pair(
    start_app: StartApp, start: StartProxy, monkeypatch: pytest.MonkeyPatch
) -> tuple[str, web.Application]:
    app = _upstream_app()
    upstream = await start_app(app)
    monkeypatch.setenv("TEST_WS_KEY", SECRET)
    proxy = await start(
        "",
        routes=(
            RouteSpec(
                prefix="/openai",
                upstream=upstream + "/v1",
                headers=(("Authorization", "Bearer ${TEST_WS_KEY}"),),
                drop_client_auth=True,
            ),
        ),
    )
    return proxy, app


@pytest.mark.asyncio
async def test_websocket_messages_pass_byte_exact_both_ways(
    start_app: StartApp,
    start: StartProxy,
    logs: LogEntries,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy, _ = await _start_pair(start_app, start, monkeypatch)
    blob = fixtures.pattern_bytes(70_000)
    big_text = fixtures.MESSAGE * 2000  # ~1 MB of 1- to 4-byte characters
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(
            f"{proxy}/openai/v1/realtime?model=gpt-realtime",
            protocols=("realtime.v1",),
            headers={"Authorization": "Bearer app-side-key"},
        ) as ws,
    ):
        assert ws.protocol == "realtime.v1"
        await ws.send_str(fixtures.MESSAGE)
        msg = await ws.receive()
        assert (msg.type, msg.data) == (WSMsgType.TEXT, fixtures.MESSAGE)
        await ws.send_bytes(blob)
        msg = await ws.receive()
        assert (msg.type, msg.data) == (WSMsgType.BINARY, blob)
        await ws.send_str(big_text)
        msg = await ws.receive()
        assert msg.type is WSMsgType.TEXT
        assert msg.data == big_text
        await ws.send_bytes(b"")
        msg = await ws.receive()
        assert (msg.type, msg.data) == (WSMsgType.BINARY, b"")
        await ws.send_str("headers")
        raw_seen: str = (await ws.receive()).data
        seen = json.loads(raw_seen)
        assert seen["path"] == "/v1/realtime"
        assert seen["query"] == "model=gpt-realtime"
        assert seen["headers"]["authorization"] == f"Bearer {SECRET}"
        await ws.send_str("close:4001:bye now")
        msg = await ws.receive()
        assert msg.type is WSMsgType.CLOSE
        assert msg.data == 4001
        assert msg.extra == "bye now"
    line = await wait_for(logs, "ws.summary")
    assert line["route"] == "/openai"
    assert line["close_code"] == 4001
    assert line["closed_by"] == "upstream"
    assert line["messages_to_upstream"] == 6
    assert line["messages_to_client"] == 5
    assert line["binary_messages"] == 4
    assert line["bytes_to_client"] == sum(
        len(x) for x in (fixtures.MESSAGE.encode(), blob, big_text.encode(), raw_seen.encode())
    )
    assert SECRET not in json.dumps(logs, default=str)


@pytest.mark.asyncio
async def test_a_key_in_the_subprotocol_list_is_dropped_with_drop_client_auth(
    start_app: StartApp,
    start: StartProxy,
    logs: LogEntries,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """A browser's only way to send a key on a WebSocket is a subprotocol
    (``openai-insecure-api-key.KEY``): with --drop-client-auth it never reaches the
    upstream, the other subprotocols do."""
    proxy, _ = await _start_pair(start_app, start, monkeypatch)
    offered = (
        "realtime.v1",
        "openai-insecure-api-key.sk-app-own-key-77",
        "openai-beta.realtime-v1",
    )
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(f"{proxy}/openai/v1/realtime", protocols=offered) as ws,
    ):
        await ws.send_str("headers")
        seen = json.loads((await ws.receive()).data)["headers"]
        assert ws.protocol == "realtime.v1"
    assert "sk-app-own-key-77" not in json.dumps(seen)
    assert seen["sec-websocket-protocol"].replace(" ", "") == "realtime.v1,openai-beta.realtime-v1"
    assert seen["authorization"] == f"Bearer {SECRET}"


@pytest.mark.asyncio
async def test_client_close_code_reaches_the_upstream(
    start_app: StartApp,
    start: StartProxy,
    logs: LogEntries,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy, app = await _start_pair(start_app, start, monkeypatch)
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(f"{proxy}/openai/v1/realtime") as ws,
    ):
        await ws.send_str("hi")
        assert (await ws.receive()).data == "hi"
        await ws.close(code=4002, message=b"client done")
    line = await wait_for(logs, "ws.summary")
    assert (line["close_code"], line["closed_by"]) == (4002, "client")
    async with asyncio.timeout(10):
        await app[_CLOSED].wait()
    assert app[_CLOSES] == [4002]


@pytest.mark.asyncio
async def test_upstream_that_vanishes_gets_1014_and_a_refusal_keeps_its_status(
    start_app: StartApp,
    start: StartProxy,
    logs: LogEntries,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    proxy, _ = await _start_pair(start_app, start, monkeypatch)
    async with (
        aiohttp.ClientSession() as session,
        session.ws_connect(f"{proxy}/openai/v1/realtime") as ws,
    ):
        await ws.send_str("vanish")
        msg = await ws.receive()
        assert msg.type is WSMsgType.CLOSE
        assert msg.data == 1014
    line = await wait_for(logs, "ws.summary")
    assert line["closed_by"] == "upstream"
    async with aiohttp.ClientSession() as session:
        with pytest.raises(aiohttp.WSServerHandshakeError) as info:
            await session.ws_connect(f"{proxy}/openai/v1/not-there")
    assert info.value.status == 404
    assert named(logs, "upstream.error")[-1]["kind"] == "websocket_refused"


@pytest.mark.asyncio
async def test_plain_requests_still_drop_upgrade(
    mock_url: str, start: StartProxy, session: aiohttp.ClientSession
) -> None:
    """Only a websocket upgrade is passed on: other Upgrade requests stay plain HTTP."""
    proxy = await start(mock_url)
    async with session.get(
        f"{proxy}/echo/x", headers={"Upgrade": "h2c", "Connection": "Upgrade"}
    ) as resp:
        echo = json.loads(await resp.read())
    assert "upgrade" not in echo["headers"]


@pytest.mark.asyncio
async def test_shutdown_closes_open_websockets_with_1001(
    start_app: StartApp, logs: LogEntries
) -> None:
    upstream = await start_app(_upstream_app())
    runner, proxy = await start_proxy(Config(upstream=upstream, port=0, shutdown_grace=0.2))
    stopped = False
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.ws_connect(f"{proxy}/v1/realtime") as ws,
        ):
            await ws.send_str("hi")
            assert (await ws.receive()).data == "hi"
            stopping = asyncio.create_task(stop_proxy(runner))
            msg = await ws.receive()
            assert msg.type is WSMsgType.CLOSE
            assert msg.data == 1001
            await stopping
            stopped = True
    finally:
        if not stopped:
            await stop_proxy(runner)
    line = await wait_for(logs, "ws.summary")
    assert (line["close_code"], line["closed_by"]) == (1001, "proxy")


@pytest.mark.asyncio
async def test_websocket_goes_through_the_forward_proxy(
    start_app: StartApp, start: StartProxy, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A wss upstream with a private CA, reached through pproxy with CONNECT."""
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)
    pki = private_ca(tmp_path)
    runner = web.AppRunner(_upstream_app(), shutdown_timeout=0.5)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=pki.server_ctx)
        await site.start()
        upstream = f"https://127.0.0.1:{runner.addresses[0][1]}"
        with forward_proxy() as fp:
            monkeypatch.setenv("HTTPS_PROXY", fp.url)
            proxy = await start(upstream, upstream_ca=str(pki.ca_file))
            async with (
                aiohttp.ClientSession() as session,
                session.ws_connect(f"{proxy}/v1/realtime") as ws,
            ):
                await ws.send_bytes(b"\x00\xff binary")
                assert (await ws.receive()).data == b"\x00\xff binary"
            assert fp.wait_tunnelled(upstream.removeprefix("https://")) >= 1
    finally:
        await runner.cleanup()
