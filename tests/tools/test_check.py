"""`sse-proxy check` from outside, as a user runs it: real processes, stdout, stderr, exit codes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.cli import CLI, ROOT
from tests.support.cuts import TEXT, TOKENS, openai_stream, raw_text_stream


def check(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*CLI, "check", *args], input=stdin, capture_output=True, timeout=60, check=False
    )


def log_lines(stderr: bytes) -> list[dict[str, object]]:
    return [json.loads(line) for line in stderr.decode().splitlines() if line.strip()]


def test_clean_stream_prints_one_json_line_per_event_and_exits_0(tmp_path: Path) -> None:
    f = tmp_path / "cap.sse"
    f.write_bytes(b"retry: 10\nid: 1\nevent: add\ndata: a\n\ndata: b\ndata: c\n\n")
    proc = check(str(f))
    assert proc.returncode == 0, proc.stderr
    events = [json.loads(line) for line in proc.stdout.decode().splitlines()]
    assert events == [
        {"type": "add", "data": "a", "id": "1", "retry": 10},
        {"type": "message", "data": "b\nc", "id": "1", "retry": None},
    ]
    logs = log_lines(proc.stderr)
    assert [entry["event"] for entry in logs] == ["stream.summary"]
    assert {"level", "timestamp", "stream_id"} <= set(logs[0])


def test_text_prints_exact_text_without_added_newline() -> None:
    proc = check("--text", "-", stdin=openai_stream(TOKENS))
    assert proc.returncode == 0
    assert proc.stdout.decode() == TEXT


def test_text_of_raw_stream_keeps_leading_spaces() -> None:
    proc = check("--text", stdin=raw_text_stream(["The", " quick", " brown"]))
    assert proc.stdout == b"The quick brown"


def test_warning_alert_gives_exit_1_and_json_alert_lines_on_stderr() -> None:
    proc = check("-", stdin=b'data: ok\n\ndata: {"choi')
    assert proc.returncode == 1
    logs = log_lines(proc.stderr)
    (unterminated,) = [e for e in logs if e["event"] == "sse.unterminated_frame"]
    assert unterminated["level"] == "warning"
    assert unterminated["pending_bytes"] == 12
    assert "stream_id" in unterminated


def test_info_level_crlf_alone_exits_0_and_mixed_exits_1() -> None:
    assert check(stdin=b"data: a\r\n\r\n").returncode == 0
    assert check(stdin=b"data: a\r\n\n").returncode == 1


def test_dialect_override() -> None:
    proc = check("--text", "--dialect", "text", stdin=b'data: {"a":1}\n\n')
    assert proc.stdout == b'{"a":1}'


@pytest.mark.parametrize(
    "args",
    [["/nonexistent/file.sse"], ["--dialect", "klingon", "-"], ["--bogus"], ["--max-line", "0"]],
)
def test_usage_and_io_errors_exit_2_with_one_line_and_no_traceback(args: list[str]) -> None:
    proc = check(*args, stdin=b"")
    assert proc.returncode == 2
    err = proc.stderr.decode()
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1, err


def test_directory_is_an_io_error(tmp_path: Path) -> None:
    proc = check(str(tmp_path))
    assert proc.returncode == 2
    assert b"Traceback" not in proc.stderr


def test_bundled_sample_capture_is_clean() -> None:
    sample = ROOT / "sse_proxy" / "samples" / "openai_chat.sse"
    proc = check("--text", str(sample))
    assert proc.returncode == 0
    assert proc.stdout.decode().startswith("The quick brown")


def test_console_script_is_installed() -> None:
    exe = Path(sys.executable).parent / "sse-proxy"
    proc = subprocess.run(
        [str(exe), "check", "--text", "-"],
        input=b"data: hi\n\n",
        capture_output=True,
        timeout=60,
        check=False,
        env={**os.environ},
    )
    assert proc.stdout == b"hi"
