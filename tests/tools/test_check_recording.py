"""`sse-proxy check` accepts recordings and feeds their reads in their original boundaries."""

from __future__ import annotations

import io
import subprocess
from pathlib import Path

import pytest

from sse_proxy.tools import fixtures
from sse_proxy.tools.check import run_check
from tests.support.cli import CLI, cli_env
from tests.support.recordings import record_stream, write_recording


@pytest.mark.asyncio
async def test_check_on_a_real_recording_gives_the_text_of_the_stream(tmp_path: Path) -> None:
    """A recording made by `serve --record` checks clean and reassembles to the exact text."""
    recording, _ = await record_stream(tmp_path)
    rec = tmp_path / f"{recording.meta['recorded_at']}-{recording.meta['stream_id']}.ssrec"
    out = io.BytesIO()
    assert run_check(str(rec), text=True, out=out) == 0
    assert out.getvalue().decode() == fixtures.MESSAGE


def test_check_events_of_a_recording_equal_those_of_its_raw_body(tmp_path: Path) -> None:
    """The events printed for a recording are the events of the bytes it holds."""
    body = fixtures.clean_stream("anthropic")
    reads = [(0.0, p) for p in fixtures.split_reads(body, 9)]
    rec = write_recording(tmp_path / "r.ssrec", reads, request_path="/v1/messages")
    raw = tmp_path / "raw.sse"
    raw.write_bytes(body)
    from_rec, from_raw = io.BytesIO(), io.BytesIO()
    assert run_check(str(rec), out=from_rec) == 0
    assert run_check(str(raw), out=from_raw) == 0
    assert from_rec.getvalue() == from_raw.getvalue()
    assert from_rec.getvalue().count(b"\n") > 10


def test_check_reads_a_recording_from_stdin_and_uses_its_path_as_dialect_hint(
    tmp_path: Path,
) -> None:
    """Piped in, a recording is still recognised; a broken one is reported and read raw."""
    body = fixtures.faulty_stream("invalid_utf8", "openai")
    rec = write_recording(tmp_path / "r.ssrec", [(0.0, body[:100]), (0.1, body[100:])])
    proc = subprocess.run(
        [*CLI, "check", "--text", "-"],
        input=rec.read_bytes(),
        capture_output=True,
        timeout=30,
        check=False,
        env=cli_env(),
    )
    assert proc.returncode == 1  # the recording holds invalid UTF-8: a warning alert
    assert proc.stdout.decode() == fixtures.expected_text("openai", "invalid_utf8")
    assert b"sse.replacement_char" in proc.stderr

    broken = tmp_path / "broken.ssrec"
    broken.write_bytes(rec.read_bytes().splitlines()[0] + b'\n{"t": 0, "data": "!!notbase64"}\n')
    proc = subprocess.run(
        [*CLI, "check", str(broken)], capture_output=True, timeout=30, check=False, env=cli_env()
    )
    err = proc.stderr.decode()
    assert proc.returncode == 1  # reported and read as the raw capture it then is
    assert "check.recording_invalid" in err
    assert "not a valid sse-proxy recording" in err
    assert "Traceback" not in err
