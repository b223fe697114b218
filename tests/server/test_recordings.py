"""`serve --record DIR`: recordings are private, and a recording that cannot be written
never touches the client's stream.

A real `sse-proxy serve` under a real file-size limit (``prlimit --fsize``, standing in for
a full disk; Python ignores SIGXFSZ, so the write fails with EFBIG) in front of a real
`sse-proxy mock-upstream`.
"""

from __future__ import annotations

import asyncio
import os
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from tests.support.cli import CLI, ServeProcess, cli_env, http_get
from tests.support.net import free_port
from tests.support.recordings import record_stream

FILE_LIMIT = 64 << 10
"""Bytes any file of the serve process may grow to: the log stays far under it, a recording
of the stream below (base64 in JSON lines) far over."""

# ~630 KB of SSE events, streamed back by the mock in 4 KiB writes
BODY = b"".join(b"data: %06d %s\n\n" % (i, b"x" * 90) for i in range(6000))


@pytest.fixture
def mock_upstream() -> Iterator[str]:
    port = free_port()
    proc = subprocess.Popen(
        [*CLI, "mock-upstream", "--port", str(port)],
        env=cli_env(),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(400):
            try:
                if http_get(url + "/healthz", timeout=1.0)[0] == 200:
                    break
            except OSError:
                pass
            if proc.poll() is not None:
                raise AssertionError(f"mock-upstream exited {proc.returncode}")
            time.sleep(0.05)
        yield url
    finally:
        proc.terminate()
        proc.wait(10)


async def _stream_through(proxy: str) -> tuple[int, bytes]:
    async with (
        aiohttp.ClientSession(trust_env=False) as session,
        session.post(f"{proxy}/sse/raw?chunk=4096", data=BODY) as resp,
    ):
        return resp.status, await resp.read()  # a broken chunked end raises here


def test_a_recording_that_cannot_grow_leaves_the_stream_untouched(
    tmp_path: Path, mock_upstream: str
) -> None:
    port = free_port()
    record = tmp_path / "recordings"
    serve = ServeProcess("--port", str(port), "--upstream", mock_upstream, "--record", str(record))
    serve.args = ["prlimit", f"--fsize={FILE_LIMIT}", "--", *serve.args]
    with serve:
        serve.wait_for("proxy.started")
        status, got = asyncio.run(_stream_through(f"http://127.0.0.1:{port}"))
        serve.wait_for("stream.summary")
        log = serve.lines()
    assert status == 200
    assert len(got) == len(BODY)
    assert got == BODY  # every byte, and a clean end
    (failed,) = [e for e in log if e["event"] == "recording.failed"]
    assert failed["error"] == "File too large", failed
    assert failed["path"].startswith(str(record))
    (summary,) = [e for e in log if e["event"] == "stream.summary"]
    assert summary["ended_by"] == "upstream_eof", summary
    assert summary["verdict"] == "ok", summary
    assert not [e for e in log if "upstream" in e["event"] and e.get("level") == "error"], log
    (file,) = record.glob("*.ssrec")
    assert file.stat().st_size <= FILE_LIMIT


def test_recordings_are_private_whatever_the_umask(tmp_path: Path) -> None:
    """Under umask 000, a folder the proxy creates is 0700 and each recording 0600; a folder
    that exists keeps its mode, and its recordings are 0600 too."""
    made = tmp_path / "new" / "recordings"
    existing = tmp_path / "shared"
    existing.mkdir()
    existing.chmod(0o755)
    old = os.umask(0)
    try:
        asyncio.run(record_stream(made))
        asyncio.run(record_stream(existing))
    finally:
        os.umask(old)
    assert stat.S_IMODE(made.stat().st_mode) == 0o700
    assert stat.S_IMODE(existing.stat().st_mode) == 0o755
    files = [*made.glob("*.ssrec"), *existing.glob("*.ssrec")]
    assert len(files) == 2
    assert {stat.S_IMODE(f.stat().st_mode) for f in files} == {0o600}
