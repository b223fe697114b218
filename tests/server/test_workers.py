"""`serve --workers N`: N processes share one port, metrics add up, SIGTERM stops them all."""

from __future__ import annotations

import asyncio
import os
import re
import signal
import socket
import time
from collections import Counter
from pathlib import Path

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


@pytest.mark.asyncio
async def test_a_killed_worker_leaves_the_other_serving_and_fails_the_exit_code() -> None:
    """SIGKILL one worker: the other keeps serving the port; the parent reports failure."""
    port = free_port()
    async with mock_upstream() as upstream:
        with ServeProcess("--upstream", upstream, "--port", str(port), "--workers", "2") as serve:
            started = await asyncio.to_thread(serve.wait_for, "proxy.started", 2)
            victim, survivor = (e["pid"] for e in started)
            os.kill(victim, signal.SIGKILL)
            for _ in range(500):  # gone, its listening socket with it
                if not _running(victim):
                    break
                await asyncio.sleep(0.01)
            assert not _running(victim)
            # A connection the kernel queued on the victim's socket just before it died is
            # reset with it; from the first stream that completes on, the survivor serves.
            for _ in range(20):
                try:
                    await _fresh_connections(f"http://127.0.0.1:{port}", 1)
                    break
                except aiohttp.ClientOSError:
                    await asyncio.sleep(0.05)
            await _fresh_connections(f"http://127.0.0.1:{port}", 10)
            summaries = await asyncio.to_thread(serve.wait_for, "stream.summary", 11)
            assert {e["pid"] for e in summaries} == {survivor}
            await asyncio.to_thread(serve.stop)
    assert serve.proc is not None
    assert serve.proc.returncode == 1


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
