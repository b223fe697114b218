"""``--admin-port``: health, metrics and the inspector on a listener of their own.

Real sockets on loopback throughout: the proxy in-process (both listeners, what answers
where, nothing forwarded from either), then ``sse-proxy serve`` as a real subprocess for
the drain (a real SIGTERM, a probe during it) and for ``--workers 2`` (health of the live
workers and metrics across them on the admin port).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import socket
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest

from sse_proxy.config import load_config
from sse_proxy.errors import ConfigError, UsageError
from sse_proxy.server.run import admin_url, start_proxy, stop_proxy
from sse_proxy.settings import Config
from sse_proxy.tools.mock_upstream import mock_upstream
from tests.support.cli import ServeProcess, cli_env, run_cli
from tests.support.logs import metric_sum
from tests.support.net import STREAM_ID, free_port, port_of
from tests.support.stack import AppStarter, ProxyStarter
from tests.support.upstreams import Seen, recording_app

PREFIX = "/_sse-proxy"
CHAT = {"model": "gpt-4o-mini", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


async def _get(url: str, method: str = "GET") -> tuple[int, Any]:
    """One request on a fresh connection: status and body (JSON when it is)."""
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.request(method, url) as resp,
    ):
        text = await resp.text()
        if resp.content_type == "application/json":
            return resp.status, json.loads(text)
        return resp.status, text


async def _refused(url: str) -> bool:
    host, port = url.removeprefix("http://").split("/", 1)[0].rsplit(":", 1)
    try:
        _reader, writer = await asyncio.open_connection(host, int(port))
    except ConnectionRefusedError:
        return True
    writer.close()
    await writer.wait_closed()
    return False


async def _refused_within(url: str, seconds: float) -> bool:
    deadline = asyncio.get_running_loop().time() + seconds
    while not await _refused(url):
        if asyncio.get_running_loop().time() > deadline:
            return False
        await asyncio.sleep(0.01)
    return True


@contextlib.asynccontextmanager
async def _chat(base: str, delay: float | None = None) -> AsyncIterator[aiohttp.ClientResponse]:
    """A streaming chat request through the proxy on a connection of its own; ``delay``:
    the mock upstream's pause between writes (0.2 s: a stream of about 20 s)."""
    headers = {} if delay is None else {"X-Mock-Delay": str(delay)}
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.post(base + "/v1/chat/completions", json=CHAT, headers=headers) as resp,
    ):
        assert resp.status == 200
        yield resp


# ----------------------------------------------------------------------- in-process


@pytest.mark.asyncio
async def test_each_listener_answers_its_own(mock_url: str, start: ProxyStarter) -> None:
    url = await start(mock_url, admin_port=0, ui=True)
    admin = admin_url(start.runner_for(url))
    assert port_of(admin) != port_of(url)
    # the admin listener: health, metrics, the inspector (and its favicon)
    status, health = await _get(admin + PREFIX + "/health")
    assert (status, health["status"]) == (200, "ok")
    status, metrics = await _get(admin + PREFIX + "/metrics")
    assert status == 200
    assert "sse_proxy_requests_total" in metrics
    assert (await _get(admin + PREFIX + "/ui"))[0] == 200
    assert (await _get(admin + "/favicon.ico"))[0] == 204
    # the traffic port: every reserved path is a 404, as an unknown one always was
    for path in ("/health", "/metrics", "/ui", "/ui/streams.json", "", "/anything"):
        status, body = await _get(url + PREFIX + path)
        assert status == 404, path
        assert body["error"]["type"] == "not_found", path
        assert "on the admin port" in body["error"]["message"], path
    # and traffic still flows there
    async with _chat(url) as resp:
        assert (await resp.read()).endswith(b"data: [DONE]\n\n")
        stream_id = resp.headers[STREAM_ID]
    # what the traffic port relayed is what the admin port reports
    text = (await _get(admin + PREFIX + "/metrics"))[1]
    assert metric_sum(text, "sse_proxy_requests_total", kind="sse") == 1
    assert metric_sum(text, "sse_proxy_streams_total", verdict="ok") == 1
    status, listed = await _get(admin + PREFIX + "/ui/streams.json")
    assert status == 200
    assert [row["id"] for row in listed["streams"]] == [stream_id]


@pytest.mark.asyncio
async def test_nothing_is_forwarded_from_either_listener(
    start: ProxyStarter, start_app: AppStarter
) -> None:
    seen: list[Seen] = []
    upstream = await start_app(recording_app(seen))
    url = await start(upstream, admin_port=0)
    admin = admin_url(start.runner_for(url))
    for method in ("GET", "POST", "DELETE"):
        for path in (PREFIX + "/health", PREFIX + "/metrics", PREFIX + "/x", PREFIX):
            assert (await _get(url + path, method))[0] == (404), (method, path)
        # the admin listener forwards nothing either: it has no upstream
        for path in ("/v1/chat/completions", "/", "/favicon.ico", PREFIX + "/nope"):
            status, body = await _get(admin + path, method)
            assert status == 404, (method, path)
            assert body["error"]["type"] == "not_found"
    assert seen == []
    # a path outside the prefix is forwarded as before (the recorder saw it)
    assert (await _get(url + "/v1/models"))[0] == 200
    assert [s.raw_path for s in seen] == ["/v1/models"]


@pytest.mark.asyncio
async def test_without_an_admin_port_the_traffic_port_serves_them(
    mock_url: str, start: ProxyStarter
) -> None:
    url = await start(mock_url)
    assert admin_url(start.runner_for(url)) == url
    assert (await _get(url + PREFIX + "/health"))[0] == 200
    assert (await _get(url + PREFIX + "/metrics"))[0] == 200


@pytest.mark.asyncio
async def test_admin_host_binds_the_admin_listener_elsewhere(mock_url: str) -> None:
    """--admin-host: traffic on 127.0.0.1, admin on 127.0.0.2 (both loopback) and not on
    127.0.0.1; health on the traffic port is still a 404."""
    port = free_port()
    cfg = Config(upstream=mock_url, port=0, admin_port=port, admin_host="127.0.0.2")
    runner, url = await start_proxy(cfg)
    try:
        assert admin_url(runner) == f"http://127.0.0.2:{port}"
        assert (await _get(f"http://127.0.0.2:{port}{PREFIX}/health"))[0] == 200
        assert await _refused(f"http://127.0.0.1:{port}")
        assert (await _get(url + PREFIX + "/health"))[0] == 404
    finally:
        await stop_proxy(runner)


@pytest.mark.asyncio
async def test_health_turns_503_at_once_and_the_admin_listener_outlives_the_drain(
    mock_url: str,
) -> None:
    """In-process stop_proxy: traffic refused at once, health 503 until the drain ends."""
    runner, url = await start_proxy(
        Config(upstream=mock_url, port=0, admin_port=0, shutdown_grace=1.0)
    )
    admin = admin_url(runner)
    async with _chat(url, delay=0.2) as resp:  # still open when the grace ends
        await resp.content.readuntil(b"\n\n")
        stopping = asyncio.create_task(stop_proxy(runner))
        try:
            await asyncio.sleep(0.1)
            assert not stopping.done()
            assert await _refused(url)
            status, health = await _get(admin + PREFIX + "/health")
            assert (status, health["status"], health["active_streams"]) == (
                503,
                "shutting_down",
                1,
            )
            assert (await _get(admin + PREFIX + "/metrics"))[0] == 200
        finally:
            await stopping
    assert await _refused(admin)


@pytest.mark.asyncio
async def test_a_taken_admin_port_is_a_clear_error_and_frees_the_traffic_port(
    mock_url: str,
) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        busy = taken.getsockname()[1]
        traffic = free_port()
        with pytest.raises(UsageError, match=rf"admin_port: cannot listen on 127.0.0.1:{busy}"):
            await start_proxy(Config(upstream=mock_url, port=traffic, admin_port=busy))
        # the traffic listener opened first is closed again
        assert await _refused(f"http://127.0.0.1:{traffic}")
        done = await asyncio.to_thread(
            run_cli,
            *("serve", "--upstream", mock_url, "--port", str(traffic)),
            *("--admin-port", str(busy)),
        )
    assert done.returncode == 2
    err = done.stderr.decode()
    assert err.count("\n") == 1, err
    assert f"admin_port: cannot listen on 127.0.0.1:{busy}" in err
    assert "Traceback" not in err


# ------------------------------------------------------------------------- settings


def test_admin_settings_from_every_source(tmp_path: Any) -> None:
    assert Config().admin_port is None
    assert load_config(env={"SSE_PROXY_ADMIN_PORT": "9787"}).admin_port == 9787
    file = tmp_path / "c.toml"
    file.write_text('[sse-proxy]\nadmin_port = 9797\nadmin_host = "0.0.0.0"\n')
    cfg = load_config(path=file)
    assert (cfg.admin_port, cfg.admin_listen_host, cfg.host) == (9797, "0.0.0.0", "127.0.0.1")
    cfg = load_config(flags={"admin_port": 9000}, env={"SSE_PROXY_ADMIN_PORT": "9787"})
    assert cfg.admin_port == 9000
    assert load_config(env={"SSE_PROXY_ADMIN_PORT": ""}).admin_port is None


@pytest.mark.parametrize(
    ("settings", "words"),
    [
        ({"admin_port": 8787}, ["admin_port", "must differ from port (8787)"]),
        ({"admin_port": 70000}, ["admin_port", "0..65535"]),
        ({"admin_host": "0.0.0.0"}, ["admin_host", "needs admin_port"]),
    ],
)
def test_bad_admin_settings_are_refused(settings: dict[str, Any], words: list[str]) -> None:
    with pytest.raises(ConfigError) as raised:
        load_config(flags=settings)
    for word in words:
        assert word in str(raised.value)


def test_bad_admin_port_flag_is_exit_2_in_one_line() -> None:
    done = run_cli("serve", "--upstream", "http://127.0.0.1:1", "--admin-port", "8787")
    assert done.returncode == 2
    assert done.stderr.decode().count("\n") == 1
    assert "flag --admin-port: admin_port: must differ from port (8787)" in done.stderr.decode()


# ------------------------------------------------------------------- real processes


@pytest.mark.asyncio
async def test_a_probe_during_the_drain_of_a_real_serve_gets_503() -> None:
    """SIGTERM to `sse-proxy serve --admin-port`: the traffic port closes at once, the
    admin port answers health 503 through the drain (not connection refused), and closes
    when the process exits 0; `sse-proxy health` (reading SSE_PROXY_ADMIN_PORT) follows."""
    port, admin_port = free_port(), free_port()
    traffic, admin = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}"
    async with mock_upstream() as upstream:
        with ServeProcess(
            *("--upstream", upstream, "--port", str(port), "--admin-port", str(admin_port)),
            *("--shutdown-grace", "5", "--log-format", "json"),
        ) as serve:
            started = (await asyncio.to_thread(serve.wait_for, "proxy.started"))[0]
            assert started["admin"] == admin
            assert started["health"] == admin + PREFIX + "/health"
            env = cli_env(SSE_PROXY_PORT=str(port), SSE_PROXY_ADMIN_PORT=str(admin_port))
            ok = await asyncio.to_thread(run_cli, "health", env=env)
            assert ok.returncode == 0, ok.stderr
            assert ok.stdout.decode().startswith(f"{admin}{PREFIX}/health: 200 ok")
            assert (await _get(traffic + PREFIX + "/health"))[0] == 404
            async with _chat(traffic, delay=0.2) as resp:  # far longer than the grace
                await resp.content.readuntil(b"\n\n")
                assert serve.proc is not None
                serve.proc.send_signal(signal.SIGTERM)
                await asyncio.to_thread(serve.wait_for, "proxy.stopping")
                # logged just before the listener closes: refused within moments, not 2 s
                assert await _refused_within(traffic, 2.0)
                status, health = await _get(admin + PREFIX + "/health")
                assert status == 503
                assert (health["status"], health["active_streams"]) == ("shutting_down", 1)
                down = await asyncio.to_thread(run_cli, "health", env=env)
                assert down.returncode == 1
                assert "503 shutting_down" in down.stderr.decode()
                for _ in range(2):  # still there later in the drain
                    await asyncio.sleep(0.3)
                    assert (await _get(admin + PREFIX + "/health"))[0] == 503
                code = await asyncio.to_thread(serve.proc.wait, 20)
            assert code == 0
            assert await _refused(admin)
            stopped = [e["event"] for e in serve.lines()]
            assert stopped[-1] == "proxy.stopped"
            assert any(
                e.get("event") == "stream.summary" and e["ended_by"] == "shutdown"
                for e in serve.lines()
            )


@pytest.mark.asyncio
@pytest.mark.skipif(not hasattr(socket, "SO_REUSEPORT"), reason="workers need SO_REUSEPORT")
async def test_with_two_workers_the_admin_port_reports_the_whole(tmp_path: Any) -> None:
    """Both workers listen on the admin port too: every probe (whichever worker answers)
    counts both workers, every scrape sums the streams of both, and the drain is 503."""
    port, admin_port = free_port(), free_port()
    traffic, admin = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{admin_port}"
    requests = 16
    async with mock_upstream() as upstream:
        with ServeProcess(
            *("--upstream", upstream, "--port", str(port), "--admin-port", str(admin_port)),
            *("--workers", "2", "--shutdown-grace", "2", "--log-format", "json"),
            env={"TMPDIR": str(tmp_path)},
        ) as serve:
            started = await asyncio.to_thread(serve.wait_for, "proxy.started", 2)
            assert {e["admin"] for e in started} == {admin}

            async def one() -> None:  # each on a fresh connection: spread over workers
                async with _chat(traffic) as resp:
                    assert (await resp.read()).endswith(b"data: [DONE]\n\n")

            await asyncio.gather(*(one() for _ in range(requests)))
            summaries = await asyncio.to_thread(serve.wait_for, "stream.summary", requests)
            assert len({e["pid"] for e in summaries}) == 2  # both workers served streams
            for _ in range(8):
                status, health = await _get(admin + PREFIX + "/health")
                assert status == 200
                assert health["workers"]["live"] == health["workers"]["configured"] == 2
                text = (await _get(admin + PREFIX + "/metrics"))[1]
                assert metric_sum(text, "sse_proxy_requests_total", kind="sse") == requests
                assert metric_sum(text, "sse_proxy_workers_live") == 2
            assert (await _get(traffic + PREFIX + "/metrics"))[0] == 404
            async with _chat(traffic, delay=0.2) as resp:
                await resp.content.readuntil(b"\n\n")
                assert serve.proc is not None
                serve.proc.send_signal(signal.SIGTERM)
                # the idle worker stops at once (its admin socket with it); the one with
                # the stream drains, and answers every probe meanwhile
                await asyncio.to_thread(serve.wait_for, "proxy.stopped")
                # and the draining one has had the signal too (on a loaded machine its
                # line can come after the idle one has stopped: a probe then saw it serving)
                await asyncio.to_thread(serve.wait_for, "proxy.stopping", 2)
                for _ in range(3):
                    status, health = await _get(admin + PREFIX + "/health")
                    assert (status, health["status"]) == (503, "shutting_down")
                    assert health["active_streams"] == 1
                    await asyncio.sleep(0.3)
                code = await asyncio.to_thread(serve.proc.wait, 20)
            assert code == 0
            assert await _refused(admin)


def test_sse_proxy_health_asks_the_admin_listener(monkeypatch: pytest.MonkeyPatch) -> None:
    """The container's HEALTHCHECK follows SSE_PROXY_ADMIN_PORT (and its host, on loopback
    when it listens on every interface)."""
    from sse_proxy.tools.health import health_url

    for name in ("SSE_PROXY_CONFIG", "SSE_PROXY_ADMIN_HOST", "SSE_PROXY_ADMIN_PREFIX"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("SSE_PROXY_HOST", "0.0.0.0")
    monkeypatch.setenv("SSE_PROXY_PORT", "8787")
    monkeypatch.delenv("SSE_PROXY_ADMIN_PORT", raising=False)
    assert health_url(config=None) == "http://127.0.0.1:8787/_sse-proxy/health"
    monkeypatch.setenv("SSE_PROXY_ADMIN_PORT", "9787")
    assert health_url(config=None) == "http://127.0.0.1:9787/_sse-proxy/health"
    monkeypatch.setenv("SSE_PROXY_HOST", "127.0.0.1")
    monkeypatch.setenv("SSE_PROXY_ADMIN_HOST", "::")
    assert health_url(config=None) == "http://[::1]:9787/_sse-proxy/health"
