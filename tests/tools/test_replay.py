"""`sse-proxy replay`: a recording served back byte for byte, with its boundaries and timing."""

from __future__ import annotations

import asyncio
import json
import re
import signal
import subprocess
import time
from pathlib import Path

import aiohttp
import pytest

from sse_proxy.rechunk.spec import STRATEGIES, ChaosSpec
from sse_proxy.recording import load_recording
from sse_proxy.tools import fixtures
from sse_proxy.tools.replay import plan_replay, start_replay
from tests.support.cli import CLI, cli_env
from tests.support.recordings import raw_chunks, record_stream, write_recording
from tests.support.timing import assert_fired_on_time


@pytest.mark.asyncio
async def test_replay_reproduces_a_real_recording_byte_for_byte_with_its_boundaries(
    tmp_path: Path,
) -> None:
    """A stream recorded through the proxy comes back as the same bytes in the same chunks."""
    recording, got = await record_stream(tmp_path)
    assert recording.body == got == fixtures.clean_stream("openai")
    assert len(recording.reads) > 10  # the mock writes small pieces: real boundaries to keep
    runner, url = await start_replay(recording, timing=False)
    try:
        head, chunks = await raw_chunks(url)
    finally:
        await runner.cleanup()
    assert head.startswith(b"HTTP/1.1 200")
    assert b"".join(chunks) == recording.body
    assert chunks == [data for _, data in recording.reads]


@pytest.mark.asyncio
async def test_replay_keeps_status_and_headers_but_not_hop_by_hop_ones(tmp_path: Path) -> None:
    """Recorded status and headers come back; Content-Length and hop-by-hop headers do not."""
    rec = load_recording(write_recording(tmp_path / "r.ssrec", [(0.0, b"data: x\n\n")], status=429))
    runner, url = await start_replay(rec, timing=False)
    try:
        async with (
            aiohttp.ClientSession() as session,
            session.get(url + "/any/path?q=1") as resp,
        ):
            body = await resp.read()
            headers = resp.headers
    finally:
        await runner.cleanup()
    assert resp.status == 429
    assert body == b"data: x\n\n"
    assert headers["X-Request-ID"] == "req_1"
    assert headers.get("Content-Length") is None
    assert headers.get("Connection", "").lower() != "keep-alive"


@pytest.mark.asyncio
async def test_replay_keeps_the_recorded_timing_scaled_by_speed(tmp_path: Path) -> None:
    """Reads recorded 1.2 s apart arrive 1.2 s apart, or 0.3 s apart at speed 4. The gap is
    a timer, checked like a timeout: never early, and at speed 4 before twice its scaled
    gap (0.6 s), which the unscaled 1.2 s gap would miss."""
    rec = load_recording(
        write_recording(tmp_path / "r.ssrec", [(0.0, b"data: a\n\n"), (1.2, b"data: b\n\n")])
    )
    for speed, before in ((1.0, None), (4.0, 0.6)):
        runner, url = await start_replay(rec, speed=speed)
        try:
            started = time.monotonic()
            _, chunks = await raw_chunks(url)
            waited = time.monotonic() - started
        finally:
            await runner.cleanup()
        assert chunks == [b"data: a\n\n", b"data: b\n\n"]
        assert_fired_on_time(waited, 1.2 / speed, f"replay gap at speed {speed}", before=before)


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_replay_plan_with_chaos_keeps_the_bytes_and_is_reproducible(
    tmp_path: Path, strategy: str
) -> None:
    """Re-chunked replay writes exactly the recorded bytes, and the same seed the same cuts."""
    body = fixtures.clean_stream("openai")
    reads = [(i * 0.001, p) for i, p in enumerate(fixtures.split_reads(body, 3))]
    rec = load_recording(write_recording(tmp_path / "r.ssrec", reads))
    spec = ChaosSpec.from_options(strategy, 7)
    first, again = plan_replay(rec, spec), plan_replay(rec, spec)
    assert first.body == body
    assert [w.data for _, w in first.writes] == [w.data for _, w in again.writes]
    if strategy == "bytewise":
        assert all(len(w.data) == 1 for _, w in first.writes)


@pytest.mark.asyncio
async def test_replay_with_chaos_serves_the_planned_writes(tmp_path: Path) -> None:
    """Over the wire each planned write is one HTTP chunk, and the seed is announced."""
    recording, _ = await record_stream(tmp_path)
    spec = ChaosSpec.from_options("utf8+crlf", 11)
    runner, url = await start_replay(recording, chaos=spec, timing=False)
    try:
        head, chunks = await raw_chunks(url)
    finally:
        await runner.cleanup()
    assert b"x-sse-proxy-chaos-seed: 11" in head.lower()
    assert chunks == [w.data for _, w in plan_replay(recording, spec).writes]
    assert b"\r\n" in b"".join(chunks)


def test_replay_cli_prints_the_url_serves_and_stops_on_sigint(tmp_path: Path) -> None:
    """`sse-proxy replay FILE --port 0` prints where it listens, serves, and exits 0 on SIGINT."""
    rec = write_recording(tmp_path / "r.ssrec", [(0.0, b"data: hi\n\n")])
    with subprocess.Popen(
        [*CLI, "replay", str(rec), "--port", "0", "--no-timing"],
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
            assert chunks == [b"data: hi\n\n"]
        finally:
            proc.send_signal(signal.SIGINT)
            code = proc.wait(timeout=15)
    assert code == 0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["replay", "/nonexistent.ssrec"], "cannot read"),
        (["replay", "{bad}"], "not a valid sse-proxy recording"),
        (["replay", "{good}", "--chaos", "nope"], "unknown chaos strategy"),
        (["replay", "{good}", "--chaos", "crlf+cr"], "mutually exclusive"),
        (["replay", "{good}", "--speed", "0"], "--speed must be a positive number"),
        (["replay", "{good}", "--speed", "2", "--no-timing"], "not allowed with"),
        (["replay", "{good}", "--port", "70000"], "argument --port: must be 0..65535"),
    ],
)
def test_replay_usage_errors_are_one_line_and_exit_2(
    tmp_path: Path, args: list[str], message: str
) -> None:
    """Bad files and flags give one clear line on stderr and exit 2, never a traceback."""
    good = write_recording(tmp_path / "good.ssrec", [(0.0, b"data: x\n\n")])
    bad = tmp_path / "bad.ssrec"
    bad.write_text(json.dumps({"format": "something else"}) + "\n")
    argv = [a.replace("{good}", str(good)).replace("{bad}", str(bad)) for a in args]
    proc = subprocess.run(
        [*CLI, *argv], capture_output=True, timeout=30, check=False, env=cli_env()
    )
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert message in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_replay_applies_shape_variants_to_the_recordings_dialect() -> None:
    """``replay --chaos azure``: the recording's stream, with Azure's first chunk in front
    (the variant asks the replay's own reassembler which dialect the stream is)."""
    from sse_proxy.rechunk.spec import ChaosSpec
    from sse_proxy.recording import Recording
    from sse_proxy.tools.replay import plan_replay

    body = fixtures.clean_stream("openai", fixtures.SHORT_TOKENS)
    recording = Recording(
        request={"path": "/v1/chat/completions"},
        response={"status": 200, "headers": {"Content-Type": "text/event-stream"}},
        reads=((0.0, body),),
        end="upstream_eof",
    )
    plan = plan_replay(recording, ChaosSpec(("azure",), 1))
    sent = b"".join(w.data for _, w in plan.writes)
    assert sent.startswith(b'data: {"choices":[],"created":0,"id":""')
    assert sent.endswith(b"data: [DONE]\n\n")


@pytest.mark.parametrize(
    ("response", "message"),
    [
        ({"headers": {"X-Evil": "a\r\nSet-Cookie: x=1"}}, "'X-Evil' holds a line break"),
        ({"headers": {"X-Evil": "a\nb"}}, "'X-Evil' holds a line break"),
        ({"headers": {"Bad Name": "v"}}, "is not a valid name"),
        ({"headers": {"X-Num": 5}}, "'X-Num' holds a line break or a control character"),
        ({"reason": "OK\r\nX-Injected: 1"}, "reason holds a line break"),
        ({"status": 1000}, "status 1000 is not 100..599"),
        ({"status": "200"}, "status '200' is not 100..599"),
    ],
)
def test_replay_refuses_a_recording_it_cannot_serve_when_loading_it(
    tmp_path: Path, response: dict[str, object], message: str
) -> None:
    """A recording whose response head cannot be sent (CR or LF in a header or the reason,
    a bad name or status) is refused when loaded, with the reason, exit 2:
    not a 500 with a traceback per request."""
    path = write_recording(tmp_path / "r.ssrec", [(0.0, b"data: x\n\n")])
    lines = path.read_text().splitlines()
    head = json.loads(lines[0])
    head["response"].update(response)
    path.write_text("\n".join([json.dumps(head), *lines[1:]]) + "\n")
    proc = subprocess.run(
        [*CLI, "replay", str(path), "--port", "0"],
        capture_output=True,
        timeout=30,
        check=False,
        env=cli_env(),
    )
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert "not a valid sse-proxy recording" in err
    assert message in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1
