"""One exception map for opening the upstream: HTTP and WebSocket fail the same way.

Each failure is real: a port nothing listens on, a forward proxy that is not there, one
that refuses the tunnel. For each, a POST and a WebSocket upgrade must get the same reply
(status and error type), the same ``upstream.error`` line and the same counters.
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
from collections.abc import AsyncIterator, Awaitable, Callable

import aiohttp
import pytest

from sse_proxy.errors import ConfigError
from sse_proxy.server.run import start_proxy, stop_proxy
from sse_proxy.settings import Config
from tests.support.cli import run_cli
from tests.support.logs import LogEntries, metric_sum, named
from tests.support.net import dead_port, free_port
from tests.support.stack import StartProxy

Failure = Callable[[pytest.MonkeyPatch], Awaitable[str]]


@contextlib.asynccontextmanager
async def _refusing_proxy() -> AsyncIterator[str]:
    """A forward proxy on loopback that answers every request (CONNECT too) with 403."""

    async def refuse(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            await reader.readuntil(b"\r\n\r\n")
            writer.write(b"HTTP/1.1 403 Forbidden\r\nContent-Length: 0\r\n\r\n")
            await writer.drain()
        writer.close()

    server = await asyncio.start_server(refuse, "127.0.0.1", 0)
    try:
        yield f"http://127.0.0.1:{server.sockets[0].getsockname()[1]}"
    finally:
        server.close()
        await server.wait_closed()


def _clear_proxy_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("http_proxy", "https_proxy", "all_proxy", "no_proxy"):
        monkeypatch.delenv(name, raising=False)
        monkeypatch.delenv(name.upper(), raising=False)


async def _counter(session: aiohttp.ClientSession, proxy: str, kind: str) -> float:
    async with session.get(f"{proxy}/_sse-proxy/metrics") as resp:
        return metric_sum(await resp.text(), "sse_proxy_upstream_errors_total", kind=kind)


_UPGRADE = {
    "Upgrade": "websocket",
    "Connection": "Upgrade",
    "Sec-WebSocket-Key": "dGhlIHNhbXBsZSBub25jZQ==",
    "Sec-WebSocket-Version": "13",
}


async def _both_ways(
    session: aiohttp.ClientSession, proxy: str, logs: LogEntries, kind: str, status: int
) -> None:
    async with session.post(f"{proxy}/v1/chat/completions", json={"stream": True}) as resp:
        http = (resp.status, (await resp.json())["error"]["type"])
    async with session.get(f"{proxy}/v1/realtime", headers=_UPGRADE) as resp:
        websocket = (resp.status, (await resp.json())["error"]["type"])
    assert http == websocket == (status, kind)
    lines = {line["path"]: line for line in named(logs, "upstream.error")}
    assert sorted(lines) == ["/v1/chat/completions", "/v1/realtime"], lines
    assert {(line["kind"], line["status"]) for line in lines.values()} == {(kind, status)}
    assert await _counter(session, proxy, kind) == 2


@pytest.mark.asyncio
async def test_unreachable_upstream(start: StartProxy, logs: LogEntries) -> None:
    proxy = await start(f"http://127.0.0.1:{dead_port()}")
    async with aiohttp.ClientSession() as session:
        await _both_ways(session, proxy, logs, "upstream_unreachable", 502)


@pytest.mark.asyncio
async def test_unreachable_forward_proxy(
    start: StartProxy, logs: LogEntries, monkeypatch: pytest.MonkeyPatch
) -> None:
    _clear_proxy_env(monkeypatch)
    monkeypatch.setenv("HTTP_PROXY", f"http://127.0.0.1:{dead_port()}")
    proxy = await start(f"http://127.0.0.1:{dead_port()}")
    async with aiohttp.ClientSession() as session:
        await _both_ways(session, proxy, logs, "proxy_unreachable", 502)


@pytest.mark.asyncio
async def test_forward_proxy_that_refuses_the_tunnel(
    start: StartProxy, logs: LogEntries, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An https upstream is reached with CONNECT; a 403 to it is ``proxy_refused``."""
    _clear_proxy_env(monkeypatch)
    async with _refusing_proxy() as refusing:
        monkeypatch.setenv("HTTPS_PROXY", refusing)
        proxy = await start(f"https://127.0.0.1:{dead_port()}")
        async with aiohttp.ClientSession() as session:
            await _both_ways(session, proxy, logs, "proxy_refused", 502)


@pytest.mark.asyncio
@pytest.mark.parametrize("host", ["127.0.0.1", "localhost"])
async def test_an_upstream_that_is_the_proxy_itself_is_refused_at_start(host: str) -> None:
    """Forwarding to its own listener would loop until the process had no sockets left: the
    proxy refuses to start, says why, and leaves the port free; a neighbour on the same
    port of another loopback address is not the proxy and is accepted."""
    port = free_port()
    cfg = Config(upstream=f"http://{host}:{port}/v1", port=port)
    with pytest.raises(ConfigError, match="this proxy's own address"):
        await start_proxy(cfg)
    runner, url = await start_proxy(Config(upstream=f"http://127.0.0.2:{port}", port=port))
    try:
        assert url == f"http://127.0.0.1:{port}"
    finally:
        await stop_proxy(runner)
    with socket.socket() as again:  # the refused start let go of its listener
        again.bind(("127.0.0.1", port))


def test_serve_with_workers_refuses_its_own_address_before_any_worker_starts() -> None:
    port = free_port()
    done = run_cli(
        *("serve", "--upstream", f"http://127.0.0.1:{port}", "--port", str(port)),
        *("--workers", "2"),
        timeout=30,
    )
    assert done.returncode == 2, done.stderr
    err = done.stderr.decode()
    assert "this proxy's own address" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("host", "upstream", "loops"),
    [
        ("0.0.0.0", "http://127.0.0.1:8080", True),  # every address: loopback is the proxy
        ("::", "http://[::1]:8080/v1", True),
        ("0.0.0.0", "http://localhost:8080", True),
        ("127.0.0.1", "http://localhost:8080", True),
        ("127.0.0.1", "http://127.0.0.1:8081", False),  # another port
        ("127.0.0.1", "https://127.0.0.1:8080", False),  # TLS: not this plain listener
        ("127.0.0.1", "http://10.0.0.5:8080", False),
        ("::1", "http://127.0.0.1:8080", False),  # another address family's loopback
    ],
)
def test_which_upstreams_are_the_proxys_own_address(host: str, upstream: str, loops: bool) -> None:
    from sse_proxy.server.routes import RouteTable
    from sse_proxy.server.run import _refuse_own_address

    routes = RouteTable.from_config(Config(upstream=upstream)).routes
    if loops:
        with pytest.raises(ConfigError, match="own address"):
            _refuse_own_address(routes, host, 8080)
    else:
        _refuse_own_address(routes, host, 8080)
