"""`serve --workers N`: N processes share one port, metrics add up, SIGTERM stops them all,
a worker that dies is logged and replaced (and too many deaths stop the parent)."""

from __future__ import annotations

import asyncio
import gc
import os
import re
import signal
import socket
import time
from collections import Counter
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sse_proxy.tools.mock_upstream import mock_upstream
from tests.support.cli import ServeProcess
from tests.support.logs import metric_sum
from tests.support.net import free_port
from tests.support.timing import assert_did_not_wait

pytestmark = pytest.mark.skipif(
    not hasattr(socket, "SO_REUSEPORT"), reason="workers need SO_REUSEPORT"
)

REQUESTS = 60


def _metric(text: str, name: str, labels: str = "") -> float:
    """One sample's value from the exposition text (0 when absent)."""
    pattern = re.escape(name + (f"{{{labels}}}" if labels else "")) + r" ([0-9.e+]+)$"
    found = re.search(pattern, text, re.MULTILINE)
    return float(found.group(1)) if found else 0.0


async def _stream(session: aiohttp.ClientSession, base: str) -> None:
    async with session.post(base + "/v1/chat/completions", json={"stream": True}) as resp:
        assert resp.status == 200
        assert (await resp.read()).endswith(b"data: [DONE]\n\n")


async def _fresh_connections(base: str, n: int, concurrency: int = 6) -> None:
    """``n`` streams, each on its own connection, so the kernel spreads them over workers."""
    sem = asyncio.Semaphore(concurrency)
    connector = aiohttp.TCPConnector(force_close=True)
    async with aiohttp.ClientSession(connector=connector) as session:

        async def one() -> None:
            async with sem:
                await _stream(session, base)

        await asyncio.gather(*(one() for _ in range(n)))


async def _scrape(base: str) -> str:
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.get(base + "/_sse-proxy/metrics") as resp,
    ):
        assert resp.status == 200
        return await resp.text()


def _metric_dirs(tmp: Path) -> list[Path]:
    """The multiprocess metric directories a server made under ``tmp`` (its TMPDIR)."""
    return list(tmp.glob("sse-proxy-metrics-*"))


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def _running(pid: int) -> bool:
    """Alive and not a zombie: a killed worker's files (its socket) are closed at once,
    but the parent reaps it only when it gets to it."""
    try:
        with open(f"/proc/{pid}/stat", encoding="ascii") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False
    except OSError:
        return _alive(pid)


@pytest.mark.asyncio
async def test_two_workers_share_the_port_and_metrics_add_up(tmp_path: Path) -> None:
    """Both workers serve streams; every scrape (whichever worker answers) shows the total."""
    port = free_port()
    async with mock_upstream() as upstream:
        with ServeProcess(
            "--upstream", upstream, "--port", str(port), "--workers", "2",
            env={"TMPDIR": str(tmp_path)},
        ) as serve:  # fmt: skip
            started = await asyncio.to_thread(serve.wait_for, "proxy.started", 2)
            pids = {e["pid"] for e in started}
            assert len(pids) == 2
            assert {e["listen"] for e in started} == {f"http://127.0.0.1:{port}"}
            base = f"http://127.0.0.1:{port}"
            await _fresh_connections(base, REQUESTS)
            summaries = await asyncio.to_thread(serve.wait_for, "stream.summary", REQUESTS)
            per_worker = Counter(e["pid"] for e in summaries)
            # Both processes accepted connections on the one port.
            assert set(per_worker) == pids, per_worker
            assert sum(per_worker.values()) == REQUESTS
            assert max(per_worker.values()) < REQUESTS
            # Each worker alone counted fewer than REQUESTS: a scrape that shows all of
            # them aggregated across processes, whichever worker answered it.
            for _ in range(8):
                text = await _scrape(base)
                assert _metric(text, "sse_proxy_requests_total", 'kind="sse"') == REQUESTS
                assert (
                    metric_sum(text, "sse_proxy_streams_total", ended_by="upstream_eof") == REQUESTS
                )
                assert _metric(text, "sse_proxy_streams_active") == 0
                assert metric_sum(text, "sse_proxy_stream_duration_seconds_count") == REQUESTS
            # The per-process metric files are in the multiprocess directory meanwhile.
            dirs = _metric_dirs(tmp_path)
            assert len(dirs) == 1
            assert {p.name for p in dirs[0].glob("counter_*.db")} == {
                f"counter_{pid}.db" for pid in pids
            }
        serve.stop()
    assert serve.proc is not None
    assert serve.proc.returncode == 0
    # The directory the server made for its workers' metrics is gone with it.
    assert not _metric_dirs(tmp_path)


@pytest.mark.asyncio
async def test_sigterm_stops_every_worker_and_frees_the_port() -> None:
    """SIGTERM to the parent: every worker logs proxy.stopped and exits, the port is free."""
    port = free_port()
    async with mock_upstream() as upstream:
        with ServeProcess("--upstream", upstream, "--port", str(port), "--workers", "2") as serve:
            started = await asyncio.to_thread(serve.wait_for, "proxy.started", 2)
            pids = [e["pid"] for e in started]
            await _fresh_connections(f"http://127.0.0.1:{port}", 10)
            begun = time.monotonic()
            text = await asyncio.to_thread(serve.stop)
            took = time.monotonic() - begun
    assert serve.proc is not None
    assert serve.proc.returncode == 0
    assert_did_not_wait(took, 10.0, "idle workers stopped (default grace 10 s)")
    assert {e["pid"] for e in serve.lines() if e["event"] == "proxy.stopped"} == set(pids)
    assert "proxy.stopping" in text
    assert not [pid for pid in pids if _alive(pid)]
    with socket.socket() as sock:  # nobody listens there any more (TIME_WAIT is fine)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen()


async def _health(base: str) -> dict[str, Any]:
    connector = aiohttp.TCPConnector(force_close=True)
    async with (
        aiohttp.ClientSession(connector=connector) as session,
        session.get(base + "/_sse-proxy/health") as resp,
    ):
        assert resp.status == 200
        body: dict[str, Any] = await resp.json()
        return body


@pytest.mark.asyncio
async def test_a_killed_worker_is_logged_and_replaced() -> None:
    """SIGKILL a worker: worker.exited names its pid and signal, a new worker takes its
    place, the port keeps serving, health and metrics count the live workers again."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    async with mock_upstream() as upstream:
        with ServeProcess("--upstream", upstream, "--port", str(port), "--workers", "2") as serve:
            started = await asyncio.to_thread(serve.wait_for, "proxy.started", 2)
            victim, survivor = (e["pid"] for e in started)
            health = await _health(base)
            assert health["workers"] == {"live": 2, "configured": 2, "restarts": 0}
            assert health["status"] == "ok"
            os.kill(victim, signal.SIGKILL)
            (exited,) = await asyncio.to_thread(serve.wait_for, "worker.exited")
            assert exited["worker_pid"] == victim
            assert (exited["signal"], exited["exit_code"]) == ("SIGKILL", None)
            assert exited["level"] == "error"
            assert exited["restart_in_s"] == 0.5  # the first back-off
            assert exited["pid"] not in (victim, survivor)  # the parent says it
            started = await asyncio.to_thread(serve.wait_for, "proxy.started", 3)
            (replacement,) = {e["pid"] for e in started} - {victim, survivor}
            (announced,) = await asyncio.to_thread(serve.wait_for, "worker.started")
            assert announced["worker_pid"] == replacement
            assert not _running(victim)  # reaped: no <defunct> left behind
            # A connection the kernel queued on the victim's socket just before it died is
            # reset with it; from the first stream that completes on, the port serves.
            for _ in range(20):
                try:
                    await _fresh_connections(base, 1)
                    break
                except aiohttp.ClientOSError:
                    await asyncio.sleep(0.05)
            await _fresh_connections(base, 20)
            summaries = await asyncio.to_thread(serve.wait_for, "stream.summary", 21)
            assert {e["pid"] for e in summaries} <= {survivor, replacement}
            for _ in range(4):  # whichever worker answers
                health = await _health(base)
                assert health["workers"] == {"live": 2, "configured": 2, "restarts": 1}
                text = await _scrape(base)
                assert _metric(text, "sse_proxy_worker_restarts") == 1
                assert _metric(text, "sse_proxy_workers_live") == 2
                assert _metric(text, "sse_proxy_workers_configured") == 2
                assert _metric(text, "sse_proxy_streams_active") == 0
            await asyncio.to_thread(serve.stop)
    assert serve.proc is not None
    assert serve.proc.returncode == 0  # the exit was handled; the shutdown was clean
    assert {e["pid"] for e in serve.lines() if e["event"] == "proxy.stopped"} == {
        survivor,
        replacement,
    }


@pytest.mark.asyncio
async def test_too_many_exits_in_the_window_stop_the_parent_with_exit_1() -> None:
    """Past worker_max_restarts exits in the window: workers.failing, the other workers
    stopped, exit status 1 (the orchestrator restarts the pod), the port free."""
    port = free_port()
    env = {"SSE_PROXY_WORKER_MAX_RESTARTS": "1", "SSE_PROXY_WORKER_RESTART_WINDOW": "600"}
    async with mock_upstream() as upstream:
        with ServeProcess(
            "--upstream", upstream, "--port", str(port), "--workers", "2", env=env
        ) as serve:  # fmt: skip
            started = await asyncio.to_thread(serve.wait_for, "proxy.started", 2)
            first, second = (e["pid"] for e in started)
            os.kill(first, signal.SIGKILL)
            started = await asyncio.to_thread(serve.wait_for, "proxy.started", 3)
            (replacement,) = {e["pid"] for e in started} - {first, second}
            os.kill(replacement, signal.SIGTERM)  # it drains, exits 0: still an exit
            assert serve.proc is not None
            code = await asyncio.to_thread(serve.proc.wait, 30)
    assert code == 1
    lines = serve.lines()
    exits = [e for e in lines if e["event"] == "worker.exited"]
    assert [(e["worker_pid"], e["signal"], e["exit_code"]) for e in exits] == [
        (first, "SIGKILL", None),
        (replacement, None, 0),
    ]
    assert exits[1]["restart_in_s"] is None
    (failing,) = [e for e in lines if e["event"] == "workers.failing"]
    assert (failing["exits"], failing["limit"], failing["level"]) == (2, 1, "error")
    # the replacement drained on its SIGTERM, the other one when the parent gave up
    assert {e["pid"] for e in lines if e["event"] == "proxy.stopped"} == {replacement, second}
    assert not [pid for pid in (first, second, replacement) if _alive(pid)]
    with socket.socket() as sock:  # nobody listens there any more
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen()


@pytest.mark.asyncio
async def test_health_and_metrics_say_when_a_worker_is_missing() -> None:
    """With fewer live workers than configured, health says degraded (still 200: the
    others serve) and the gauges say how many."""
    from sse_proxy.server.run import start_proxy, stop_proxy
    from sse_proxy.server.workers import WorkerCounts
    from sse_proxy.settings import Config

    live = [1]
    async with mock_upstream() as upstream:
        runner, url = await start_proxy(
            Config(upstream=upstream, port=0), workers=WorkerCounts(3, lambda: live[0])
        )
        try:
            health = await _health(url)
            assert (health["status"], health["workers"]) == (
                "degraded",
                {"live": 1, "configured": 3, "restarts": 0},
            )
            text = await _scrape(url)
            assert _metric(text, "sse_proxy_workers_live") == 1
            assert _metric(text, "sse_proxy_workers_configured") == 3
            live[0] = 3
            assert (await _health(url))["status"] == "ok"
            assert _metric(await _scrape(url), "sse_proxy_workers_live") == 3
        finally:
            await stop_proxy(runner)


class _CountingStream:
    """A text stream that records each write() call separately."""

    def __init__(self) -> None:
        self.writes: list[str] = []

    def write(self, text: str) -> int:
        self.writes.append(text)
        return len(text)

    def flush(self) -> None:
        pass

    def isatty(self) -> bool:
        return False


def test_each_log_line_is_one_write_so_workers_cannot_interleave() -> None:
    """Workers share stderr: every line (ours and stdlib's) must reach it in one write()."""
    import logging

    import structlog

    from sse_proxy.obs.logs import configure_logging, get_logger

    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    stream = _CountingStream()
    try:
        configure_logging(stream=stream)  # type: ignore[arg-type]
        get_logger(stream_id="s").info("stream.summary", bytes=1)
        logging.getLogger("aiohttp.server").error("Error handling request")
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        structlog.configure(**saved)
    assert len(stream.writes) == 2, stream.writes
    assert all(w.endswith("\n") and w.count("\n") == 1 for w in stream.writes)


def _wait_until(done: Any, within: float, what: str) -> None:
    """Poll ``done()`` (a process state, which no event reports here) up to ``within`` s."""
    deadline = time.monotonic() + within
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"not within {within} s: {what}")
        time.sleep(0.05)


@pytest.mark.asyncio
async def test_workers_die_with_a_killed_parent() -> None:
    """SIGKILL of the parent (no handler runs, nothing is forwarded): each worker gets the
    kernel's parent-death signal, drains (proxy.stopped) and exits; the port is free."""
    port = free_port()
    async with mock_upstream() as upstream:
        with ServeProcess("--upstream", upstream, "--port", str(port), "--workers", "2") as serve:
            started = await asyncio.to_thread(serve.wait_for, "proxy.started", 2)
            pids = [e["pid"] for e in started]
            assert serve.proc is not None
            try:
                serve.proc.kill()
                await asyncio.to_thread(serve.proc.wait, 10)
                await asyncio.to_thread(
                    _wait_until,
                    lambda: not any(_running(pid) for pid in pids),
                    20.0,
                    "the orphaned workers exited",
                )
            finally:
                for pid in pids:  # whatever happened, no worker outlives the test
                    if _running(pid):
                        os.kill(pid, signal.SIGKILL)
            lines = serve.lines()
    assert {e["pid"] for e in lines if e["event"] == "proxy.stopped"} == set(pids)
    with socket.socket() as sock:  # nobody listens there any more
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind(("127.0.0.1", port))
        sock.listen()


@pytest.mark.asyncio
async def test_a_worker_stops_when_its_parent_is_gone() -> None:
    """The fallback where no parent-death signal comes: a worker that finds another
    parent than the one it was started by (orphaned, reparented) logs worker.orphaned
    and drains."""
    import logging

    import structlog

    from sse_proxy.obs.logs import configure_logging
    from sse_proxy.server.run import serve
    from sse_proxy.settings import Config

    saved = structlog.get_config()
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    thresholds = gc.get_threshold()
    stream = _CountingStream()
    configure_logging(stream=stream)  # type: ignore[arg-type]
    try:
        async with mock_upstream() as upstream:
            not_the_parent = os.getppid() + 1_000_000  # (no process has that pid)
            await asyncio.wait_for(
                serve(Config(upstream=upstream, port=0), reuse_port=False, parent=not_the_parent),
                20,
            )
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)
        structlog.configure(**saved)
        gc.unfreeze()  # (serve froze the start-up heap: this process's, the suite's)
        gc.set_threshold(*thresholds)
    events = [line.split('"event":"', 1)[1].split('"', 1)[0] for line in stream.writes]
    assert events[-4:] == ["worker.orphaned", "proxy.stopping", "proxy.totals", "proxy.stopped"]


def _second_instance(*args: str) -> tuple[int | None, str]:
    """Another `sse-proxy serve ARGS`: its exit code (None: still running after 30 s, then
    stopped) and its stderr."""
    import subprocess

    from tests.support.cli import SSE_PROXY, cli_env

    proc = subprocess.Popen(
        [SSE_PROXY, "serve", *args],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        env=cli_env(),
    )
    try:
        _, err = proc.communicate(timeout=30)
    except subprocess.TimeoutExpired:
        proc.terminate()
        _, err = proc.communicate(timeout=30)
        return None, err.decode()
    return proc.returncode, err.decode()


@pytest.mark.asyncio
@pytest.mark.parametrize("first_workers", ["2", "1"])
async def test_a_port_another_instance_serves_is_refused(first_workers: str) -> None:
    """`serve --workers 2 --port P` while another instance (of workers, or one process)
    listens on P: one line, exit 2, as one process is refused; the first keeps every
    request."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    async with mock_upstream() as upstream:
        with ServeProcess(
            "--upstream", upstream, "--port", str(port), "--workers", first_workers
        ) as serve:  # fmt: skip
            await asyncio.to_thread(serve.wait_for, "proxy.started", int(first_workers))
            args = ("--upstream", "http://127.0.0.1:9", "--port", str(port))
            code, err = await asyncio.to_thread(_second_instance, *args, "--workers", "2")
            single, single_err = await asyncio.to_thread(_second_instance, *args)
            await _fresh_connections(base, 12)
            summaries = await asyncio.to_thread(serve.wait_for, "stream.summary", 12)
    assert (code, err) == (2, f"sse-proxy: error: cannot listen on 127.0.0.1:{port}: {_IN_USE}\n")
    assert single == 2, single_err
    assert single_err.count("\n") == 1, single_err
    assert "address already in use" in single_err
    assert len(summaries) == 12


_IN_USE = "address already in use"
