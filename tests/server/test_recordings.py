"""`serve --record DIR`: recordings are private, a recording that cannot be written never
touches the client's stream, and the flight recorder (``--record-on``) writes the streams
that went wrong, replayable exactly, in a folder kept within its bounds.

Real `sse-proxy serve` processes (one under a real file-size limit, ``prlimit --fsize``,
standing in for a full disk; Python ignores SIGXFSZ, so the write fails with EFBIG) in
front of a real `sse-proxy mock-upstream`, and `sse-proxy replay` serving what was
recorded; the in-process proxy on loopback sockets where a test reads its logs and metrics.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import signal
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import pytest

from sse_proxy.names import MOCK_FAULT_HEADER, STREAM_ID_HEADER
from sse_proxy.recording import load_recording
from sse_proxy.tools import fixtures
from sse_proxy.tools.replay import start_replay
from tests.support.cli import CLI, ServeProcess, cli_env, http_get, run_cli
from tests.support.logs import LogEntries, metric_sum, named, wait_for
from tests.support.net import free_port
from tests.support.recordings import raw_chunks, record_stream
from tests.support.stack import StartProxy

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
        serve.wait_for("recording.failed")  # (the recorder's thread writes after the end)
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


# ------------------------------------------------------------------- the flight recorder


async def _post(url: str, fault: str | None = None) -> tuple[str, bytes]:
    """One OpenAI stream through the proxy (with a mock fault): its id and what came."""
    headers = {MOCK_FAULT_HEADER: fault} if fault else {}
    got = b""
    async with (
        aiohttp.ClientSession(trust_env=False) as session,
        session.post(f"{url}/v1/chat/completions", json={"stream": True}, headers=headers) as resp,
    ):
        sid = resp.headers[STREAM_ID_HEADER]
        try:
            async for chunk in resp.content.iter_any():
                got += chunk
        except aiohttp.ClientPayloadError:
            pass  # the reset: the proxy cuts the client off too
    return sid, got


def _replayed(path: Path) -> list[bytes]:
    """The HTTP chunks `sse-proxy replay FILE` serves, one per recorded read."""
    with subprocess.Popen(
        [*CLI, "replay", str(path), "--port", "0", "--no-timing"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=cli_env(),
    ) as proc:
        try:
            assert proc.stdout is not None
            line = proc.stdout.readline().decode()
            match = re.search(r"http://127\.0\.0\.1:\d+", line)
            assert match, line
            _, chunks = asyncio.run(raw_chunks(match.group(0)))
        finally:
            proc.send_signal(signal.SIGINT)
            proc.wait(timeout=15)
    return chunks


def test_broken_streams_are_written_and_replay_exactly_clean_ones_are_not(
    tmp_path: Path, mock_upstream: str
) -> None:
    """`--record DIR --record-on broken`: a stream that ends without its terminal marker
    and one whose connection is reset are on disk, private, with their verdict, and
    `sse-proxy replay` serves each one's reads as they came (the same bytes the upstream
    sent, chunk for chunk); the clean streams are never written."""
    port = free_port()
    record = tmp_path / "flight"
    url = f"http://127.0.0.1:{port}"
    with ServeProcess(
        "--port", str(port), "--upstream", mock_upstream, "--record", str(record),
        "--record-on", "broken",
    ) as serve:  # fmt: skip
        serve.wait_for("proxy.started")
        clean = [asyncio.run(_post(url))[0] for _ in range(2)]
        broken = {fault: asyncio.run(_post(url, fault)) for fault in ("no_terminal", "reset")}
        serve.wait_for("stream.summary", count=4)
        written = serve.wait_for("recording.written", count=2)
        log = serve.stop()
    assert "recording.failed" not in log
    by_sid = {json.loads(p.read_text().splitlines()[0])["stream_id"]: p for p in record.iterdir()}
    assert set(by_sid) == {sid for sid, _ in broken.values()}, "only the broken ones"
    assert not set(clean) & set(by_sid)
    assert {e["path"] for e in written} == {str(p) for p in by_sid.values()}
    assert stat.S_IMODE(record.stat().st_mode) == 0o700
    for fault, (sid, got) in broken.items():
        path = by_sid[sid]
        assert stat.S_IMODE(path.stat().st_mode) == 0o600
        recording = load_recording(path)
        assert recording.meta["verdict"] == "broken"
        assert recording.truncated is None
        assert recording.body == fixtures.faulty_stream(fault, "openai") == got
        chunks = _replayed(path)
        assert chunks == [data for _, data in recording.reads], fault
        assert len(chunks) > 1  # the mock's pieces: read boundaries to keep


@pytest.mark.asyncio
async def test_record_on_degraded_writes_degraded_and_broken_streams(
    tmp_path: Path, mock_url: str, start: StartProxy, logs: LogEntries
) -> None:
    url = await start(mock_url, record_dir=str(tmp_path), record_on="degraded")
    clean, _ = await _post(url)
    degraded, _ = await _post(url, "invalid_json")
    broken, _ = await _post(url, "error_event")
    for sid in (degraded, broken):
        await wait_for(logs, "recording.written", sid)
    await wait_for(logs, "stream.summary", clean)
    verdicts = {
        load_recording(p).meta["stream_id"]: load_recording(p).meta["verdict"]
        for p in await _listing(tmp_path)
    }
    assert verdicts == {degraded: "degraded", broken: "broken"}


async def _listing(folder: Path) -> list[Path]:
    return await asyncio.to_thread(lambda: sorted(folder.iterdir()))


async def _scrape(url: str) -> str:
    async with aiohttp.ClientSession() as session, session.get(url + "/_sse-proxy/metrics") as r:
        return await r.text()


@pytest.mark.asyncio
async def test_a_full_folder_drops_its_oldest_recordings_with_a_line_and_a_count(
    tmp_path: Path, mock_url: str, start: StartProxy, logs: LogEntries
) -> None:
    """`--record-max-files 2`: each recording past two deletes the oldest, said in a
    `recording.dropped` line naming it, and counted in the metrics."""
    url = await start(mock_url, record_dir=str(tmp_path), record_max_files=2)
    sids = []
    for _ in range(4):  # one at a time: each written before the next
        sid, _ = await _post(url)
        await wait_for(logs, "recording.written", sid)
        sids.append(sid)
    paths = {e["stream_id"]: e["path"] for e in named(logs, "recording.written")}
    dropped = named(logs, "recording.dropped")
    assert [e["path"] for e in dropped] == [paths[sids[0]], paths[sids[1]]]
    assert {e["reason"] for e in dropped} == {"max_files"}
    kept = sorted(str(p) for p in await _listing(tmp_path))
    assert kept == sorted([paths[sids[2]], paths[sids[3]]])
    text = await _scrape(url)
    assert metric_sum(text, "sse_proxy_recordings_dropped_total", reason="max_files") == 2
    assert metric_sum(text, "sse_proxy_recordings_written_total") == 4


@pytest.mark.asyncio
async def test_the_folders_byte_bound_counts_the_recordings_already_there(
    tmp_path: Path, mock_url: str, start: StartProxy, logs: LogEntries
) -> None:
    """`--record-max-bytes`: a recording left by an earlier run counts, and goes first."""
    old = tmp_path / "20000101T000000.000000Z-old.ssrec"
    old.write_bytes(b"x" * 40_000)
    os.utime(old, (946_684_800, 946_684_800))
    url = await start(
        mock_url,
        record_dir=str(tmp_path),
        record_max_bytes=41_000,  # the old file and any recording (over 1 KB) are over it
        record_max_stream_bytes=16_384,
    )
    sid, _ = await _post(url)
    written = await wait_for(logs, "recording.written", sid)
    (dropped,) = named(logs, "recording.dropped")
    assert dropped["path"] == str(old)
    assert dropped["reason"] == "max_bytes"
    assert dropped["max_bytes"] == 41_000
    assert [str(p) for p in await _listing(tmp_path)] == [written["path"]]
    text = await _scrape(url)
    assert metric_sum(text, "sse_proxy_recordings_dropped_total", reason="max_bytes") == 1


FRAMES = [b"data: %05d %s\n\n" % (i, b"y" * 80) for i in range(400)]
"""A 36 KB stream of raw-text frames, each numbered."""


@pytest.mark.asyncio
async def test_a_stream_over_the_bound_is_kept_as_its_head_and_tail_and_says_so(
    tmp_path: Path, mock_url: str, start: StartProxy, logs: LogEntries
) -> None:
    """`--record-max-stream-bytes 4096` on a 36 KB stream: the recording keeps at most that
    many bytes, the first reads and the last, cut between whole frames; it says it was
    truncated and by how much, and replays exactly what it kept."""
    body = b"".join(FRAMES)
    url = await start(mock_url, record_dir=str(tmp_path), record_max_stream_bytes=4096)
    async with (
        aiohttp.ClientSession() as session,
        session.post(f"{url}/sse/raw", params={"chunk": "300"}, data=body) as resp,
    ):
        assert await resp.read() == body  # the client's stream is whole
        sid = resp.headers[STREAM_ID_HEADER]
    written = await wait_for(logs, "recording.written", sid)
    assert written["truncated"] is True
    path = Path(written["path"])
    recording = load_recording(path)
    cut = recording.truncated
    assert cut is not None
    kept = recording.body
    assert cut["kept"] == len(kept) <= 4096
    assert cut["dropped"] == len(body) - len(kept)
    assert cut["max_stream_bytes"] == 4096
    text = await asyncio.to_thread(path.read_text)
    lines = [json.loads(line) for line in text.splitlines()]
    (gap,) = [line for line in lines if "gap" in line]
    assert gap["gap"] == cut["dropped"]
    assert lines[-1]["bytes"] == len(body)  # what the stream had in all
    gap_at = lines.index(gap) - 1  # reads before the gap line (the header is line 0)
    head = b"".join(data for _, data in recording.reads[:gap_at])
    tail = b"".join(data for _, data in recording.reads[gap_at:])
    assert head
    assert tail
    assert body.startswith(head)
    assert body.endswith(tail)
    assert head.endswith(b"\n\n")
    assert tail.startswith(b"data: ")
    assert FRAMES[0] in head
    assert FRAMES[-1] in tail
    runner, replay = await start_replay(recording, timing=False)
    try:
        _, chunks = await raw_chunks(replay)
    finally:
        await runner.cleanup()
    assert chunks == [data for _, data in recording.reads]
    checked = await asyncio.to_thread(run_cli, "check", "--text", str(path))
    assert checked.returncode == 0, checked.stderr  # no alert: whole frames either side
    (line,) = [json.loads(ln) for ln in checked.stderr.splitlines() if b"truncated" in ln]
    assert line["event"] == "check.recording_truncated"
    assert line["dropped"] == cut["dropped"]
