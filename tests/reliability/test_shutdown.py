"""Graceful shutdown of a real `sse-proxy serve` process on SIGTERM / SIGINT.

The upstream runs in the test's event loop; the proxy is a subprocess whose stderr JSON
lines are collected as they come, so the test sees exactly what an operator would.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import signal
import sys
import time
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from sse_proxy.server.keys import STATE
from sse_proxy.server.run import start_proxy, stop_proxy
from sse_proxy.settings import Config
from tests.support.logs import eventually, wait_for
from tests.support.net import STREAM_ID, free_port
from tests.support.timing import assert_did_not_wait, assert_fired_on_time
from tests.support.upstreams import UpstreamConn

pytestmark = pytest.mark.asyncio

GRACE = 2.0
SHORT_EVENTS = 12  # x 0.1 s: the short stream ends ~1.2 s after it starts, inside the grace
EVENT_GAP = 0.1


async def _sse(request: web.Request, events: int | None) -> web.StreamResponse:
    """``events`` OpenAI-shaped events ``EVENT_GAP`` apart, then [DONE]; None: forever."""
    resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
    await resp.prepare(request)
    i = 0
    with contextlib.suppress(ConnectionError):
        while events is None or i < events:
            delta = json.dumps({"choices": [{"index": 0, "delta": {"content": f"t{i}"}}]})
            await resp.write(f"data: {delta}\n\n".encode())
            i += 1
            await asyncio.sleep(EVENT_GAP)
        await resp.write(b"data: [DONE]\n\n")
        await resp.write_eof()
    return resp


async def _short(request: web.Request) -> web.StreamResponse:
    return await _sse(request, SHORT_EVENTS)


async def _endless(request: web.Request) -> web.StreamResponse:
    return await _sse(request, None)


async def _fetch(client: aiohttp.ClientSession, url: str) -> bytes:
    async with client.get(url) as resp:
        return await resp.read()


async def _silent_upstream(conn: UpstreamConn) -> None:
    """Read the request, never answer."""
    await conn.until_closed()


@pytest_asyncio.fixture
async def upstream() -> AsyncIterator[str]:
    app = web.Application()
    app.router.add_get("/v1/short", _short)
    app.router.add_get("/v1/endless", _endless)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.2)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        yield f"http://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()


class ProxyProcess:
    """`sse-proxy serve` as a child process; its stderr parsed line by line."""

    def __init__(self, upstream: str, grace: float) -> None:
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.args = [
            *(sys.executable, "-m", "sse_proxy", "serve"),
            *("--upstream", upstream, "--port", str(self.port)),
            *("--shutdown-grace", str(grace), "--log-level", "info"),
        ]
        self.lines: list[dict[str, Any]] = []
        self.proc: asyncio.subprocess.Process | None = None
        self._reader: asyncio.Task[None] | None = None

    async def start(self) -> None:
        self.proc = await asyncio.create_subprocess_exec(
            *self.args, stdin=asyncio.subprocess.DEVNULL, stderr=asyncio.subprocess.PIPE
        )
        self._reader = asyncio.create_task(self._read())
        await self.wait_for("proxy.started", within=15.0)

    async def _read(self) -> None:
        assert self.proc is not None
        assert self.proc.stderr is not None
        async for raw in self.proc.stderr:
            try:
                line = json.loads(raw)
            except ValueError:
                line = {"event": "<not json>", "raw": raw.decode(errors="replace")}
            self.lines.append(line)

    def named(self, name: str) -> list[dict[str, Any]]:
        return [line for line in self.lines if line.get("event") == name]

    async def wait_for(self, name: str, within: float = 5.0) -> dict[str, Any]:
        async with asyncio.timeout(within):
            while not self.named(name):
                assert self.proc is not None
                if self.proc.returncode is not None:
                    raise AssertionError(f"proxy exited before {name}: {self.lines}")
                await asyncio.sleep(0.02)
        return self.named(name)[-1]

    def signal(self, signum: int) -> None:
        assert self.proc is not None
        self.proc.send_signal(signum)

    async def wait_exit(self, within: float) -> int:
        assert self.proc is not None
        async with asyncio.timeout(within):
            code = await self.proc.wait()
        if self._reader is not None:
            await self._reader
        return code

    async def stop(self) -> None:
        """Make sure the child is gone (tests normally see it exit on their signal)."""
        if self.proc is not None and self.proc.returncode is None:
            self.proc.kill()
            await self.proc.wait()
        if self._reader is not None:
            self._reader.cancel()
            await asyncio.gather(self._reader, return_exceptions=True)


@pytest_asyncio.fixture
async def proxy_process(upstream: str) -> AsyncIterator[ProxyProcess]:
    proc = ProxyProcess(upstream, GRACE)
    await proc.start()
    try:
        yield proc
    finally:
        await proc.stop()


async def _refused(url: str) -> bool:
    host, port = url.removeprefix("http://").rsplit(":", 1)
    try:
        _reader, writer = await asyncio.open_connection(host, int(port))
    except ConnectionRefusedError:
        return True
    writer.close()
    await writer.wait_closed()
    return False


async def _read_stream(resp: aiohttp.ClientResponse) -> tuple[bytes, str | None]:
    """The body read to its end, and the name of the error that ended it, if any."""
    body = b""
    try:
        async for piece in resp.content.iter_any():
            body += piece
    except aiohttp.ClientPayloadError as exc:
        return body, type(exc).__name__
    return body, None


async def test_sigterm_drains_then_closes_streams(proxy_process):
    """On SIGTERM the proxy refuses new connections, finishes streams within the grace,
    closes those that outlast it, logs every summary, and exits 0 right after the grace."""
    url = proxy_process.url
    async with asyncio.timeout(20), aiohttp.ClientSession() as client:
        short = await client.get(url + "/v1/short")
        endless = await client.get(url + "/v1/endless")
        for resp in (short, endless):
            assert resp.status == 200
            await resp.content.readuntil(b"\n\n")  # both are really in flight
        ids = {"short": short.headers[STREAM_ID], "endless": endless.headers[STREAM_ID]}
        readers = {
            "short": asyncio.create_task(_read_stream(short)),
            "endless": asyncio.create_task(_read_stream(endless)),
        }

        proxy_process.signal(signal.SIGTERM)
        signalled = time.monotonic()
        await proxy_process.wait_for("proxy.stopping")
        refused = False
        for _ in range(50):  # the listener closes right after proxy.stopping
            if refused := await _refused(url):
                break
            await asyncio.sleep(0.02)
        assert refused, "new connections still accepted after SIGTERM"
        assert not readers["short"].done(), "refusal must come before in-flight streams end"

        short_body, short_error = await readers["short"]
        endless_body, endless_error = await readers["endless"]
        endless_done = time.monotonic() - signalled
        code = await proxy_process.wait_exit(within=GRACE + 5)
        exited = time.monotonic() - signalled
        short.release()
        endless.release()

    assert short_error is None
    assert short_body.endswith(b"data: [DONE]\n\n")
    assert short_body.count(b"data:") == SHORT_EVENTS  # + [DONE], minus the first one read
    assert endless_error is not None, "the stream outlasting the grace must end as cut off"
    assert b"[DONE]" not in endless_body
    assert_fired_on_time(endless_done, GRACE, "the stream outlasting the grace was cut")
    assert code == 0
    assert_fired_on_time(exited, GRACE, "the proxy exited after the grace")

    summaries = {line["stream_id"]: line for line in proxy_process.named("stream.summary")}
    assert set(summaries) == set(ids.values()), "every stream gets exactly its summary"
    assert summaries[ids["short"]]["ended_by"] == "upstream_eof"
    assert summaries[ids["endless"]]["ended_by"] == "shutdown"
    assert proxy_process.named("proxy.stopped")
    stopping = proxy_process.named("proxy.stopping")[-1]
    assert stopping["active"] == 2
    assert not proxy_process.named("<not json>"), "every stderr line is a JSON log line"


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT])
async def test_idle_proxy_stops_at_once(signum, proxy_process):
    """With no stream in flight, SIGTERM or SIGINT stops the proxy at once with status 0."""
    async with asyncio.timeout(10):
        proxy_process.signal(signum)
        signalled = time.monotonic()
        code = await proxy_process.wait_exit(within=5.0)
        exited = time.monotonic() - signalled
    assert code == 0
    assert_did_not_wait(exited, GRACE, "an idle proxy stopped")
    assert proxy_process.named("proxy.stopped")
    assert not proxy_process.named("<not json>")


async def test_stop_proxy_closes_streams_at_the_grace_not_twice_it(upstream, logs):
    """stop_proxy cancels a stream that outlasts shutdown_grace at the grace (aiohttp alone
    would wait twice the grace), and the stream's summary says ended_by=shutdown."""
    grace = 1.0
    runner, url = await start_proxy(Config(upstream=upstream, port=0, shutdown_grace=grace))
    stopper: asyncio.Task[None] | None = None
    try:
        async with asyncio.timeout(10), aiohttp.ClientSession() as client:
            async with client.get(url + "/v1/endless") as resp:
                await resp.content.readuntil(b"\n\n")
                started = time.monotonic()
                stopper = asyncio.create_task(stop_proxy(runner))
                _body, error = await _read_stream(resp)
            await stopper
            took = time.monotonic() - started
    finally:
        if stopper is None:
            await stop_proxy(runner)
    assert error is not None
    assert_fired_on_time(took, grace, "stop_proxy with a stream", before=2 * grace)
    summary = await wait_for(logs, "stream.summary", resp.headers[STREAM_ID])
    assert summary["ended_by"] == "shutdown"


async def test_client_leaving_during_the_grace_is_client_disconnect(upstream, logs):
    """A client that hangs up while the proxy drains is logged as client_disconnect."""
    runner, url = await start_proxy(Config(upstream=upstream, port=0, shutdown_grace=3.0))
    stopper: asyncio.Task[None] | None = None
    try:
        async with asyncio.timeout(10), aiohttp.ClientSession() as client:
            resp = await client.get(url + "/v1/endless")
            await resp.content.readuntil(b"\n\n")
            stopping = time.monotonic()
            stopper = asyncio.create_task(stop_proxy(runner))
            assert await eventually(lambda: runner.app[STATE].shutting_down)
            resp.close()  # the client hangs up mid-drain
            summary = await wait_for(logs, "stream.summary", resp.headers[STREAM_ID])
            await stopper
            stopped = time.monotonic() - stopping
    finally:
        if stopper is None:
            await stop_proxy(runner)
    assert summary["ended_by"] == "client_disconnect"
    assert_did_not_wait(stopped, 3.0, "with no stream left, stop_proxy")


async def test_request_waiting_for_upstream_headers_is_closed_at_the_grace(raw_upstream, logs):
    """A request still waiting for the upstream's headers is cut at the grace, not after
    twice the grace, and its upstream connection is closed."""
    grace = 1.0
    upstream = await raw_upstream(_silent_upstream)
    runner, url = await start_proxy(
        Config(upstream=upstream.url, port=0, shutdown_grace=grace, idle_timeout=30.0)
    )
    stopper: asyncio.Task[None] | None = None
    try:
        async with asyncio.timeout(10), aiohttp.ClientSession() as client:
            request = asyncio.create_task(_fetch(client, url + "/v1/chat/completions"))
            await upstream.accepted.wait()
            started = time.monotonic()
            stopper = asyncio.create_task(stop_proxy(runner))
            with pytest.raises(aiohttp.ClientError):
                await request
            await stopper
            took = time.monotonic() - started
            await upstream.conn.closed.wait()
    finally:
        if stopper is None:
            await stop_proxy(runner)
    assert_fired_on_time(took, grace, "stop_proxy with a request", before=2 * grace)
