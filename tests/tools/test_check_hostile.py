"""`sse-proxy check` on hostile input: exit 0 or 1, never 2, never a traceback, bounded RSS.

Each case runs the real CLI in a child process. Peak RSS is measured by a small wrapper
process whose only child is the CLI, so ``RUSAGE_CHILDREN`` sees that one process and
nothing else the test session started.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest

from tests.support.cli import CLI

MIB = 1 << 20

_MEASURE = """
import resource, subprocess, sys
proc = subprocess.run(sys.argv[2:], stdin=open(sys.argv[1], "rb"),
                      stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, check=False)
print(proc.returncode, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss)
"""


def _random_bytes() -> bytes:
    return random.Random(20240601).randbytes(256 * 1024)


def _deep(payload: str) -> bytes:
    return f"data: {payload.replace('DEEP', '[' * 1000 + ']' * 1000)}\n\n".encode()


HOSTILE: dict[str, Callable[[], bytes]] = {
    "random_bytes": _random_bytes,
    "all_256_byte_values": lambda: bytes(range(256)) * 64,
    "all_256_after_data": lambda: b"".join(b"data: " + bytes([b]) + b"\n\n" for b in range(256)),
    "five_mb_line_no_newline": lambda: b"data: " + b"x" * (5 * MIB),
    "nul_filled": lambda: b"\x00" * MIB,
    "nul_lines": lambda: b"data: \x00\n\n" * 10_000,
    "invalid_utf8_flood": lambda: b"data: " + b"\xff" * 100_000 + b"\n\n",
    "invalid_utf8_lines": lambda: b"data: \xc0\xaf\xed\xa0\x80\xe0\x80\xaf\n\n" * 5_000,
    "huge_retry": lambda: (
        b"retry: " + b"9" * 100_000 + b"\ndata: a\n\nretry: " + b"9" * 4300 + b"\ndata: b\n\n"
    ),
    "lone_cr_flood": lambda: b"\r" * MIB,
    "bom_then_garbage": lambda: b"\xef\xbb\xbf\xef\xbb\xbf\xfe\xff" * 1000,
    "deep_json_error": lambda: _deep('{"error": {"message": DEEP}}'),
    "deep_json_tool_name": lambda: (
        _deep(
            '{"type": "response.output_item.added", '
            '"item": {"type": "function_call", "id": "x", "name": DEEP}}'
        )
        + b'data: {"type": "response.function_call_arguments.delta", '
        + b'"item_id": "x", "delta": "{"}\n\n'
    ),
    "empty": lambda: b"",
}


def check(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*CLI, "check", *args], input=stdin, capture_output=True, timeout=120, check=False
    )


def assert_survived(proc: subprocess.CompletedProcess[bytes]) -> list[dict[str, object]]:
    err = proc.stderr.decode("utf-8", "backslashreplace")
    assert proc.returncode in (0, 1), err[-2000:]
    assert "Traceback" not in err, err[-2000:]
    logs = [json.loads(line) for line in err.splitlines() if line.strip()]
    assert logs, "no log lines at all"
    assert logs[-1]["event"] == "stream.summary"
    return logs


@pytest.fixture(scope="module")
def hostile_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hostile")
    files = {}
    for name, make in HOSTILE.items():
        files[name] = root / f"{name}.sse"
        files[name].write_bytes(make())
    return files


NOT_SSE = {"random_bytes", "all_256_byte_values", "nul_filled", "bom_then_garbage"}
"""Inputs with no SSE field at all: named as binary, not parsed into thousands of alerts."""


@pytest.mark.parametrize("name", HOSTILE)
def test_check_survives_hostile_input(name: str, hostile_files: dict[str, Path]) -> None:
    path = hostile_files[name]
    proc = check(str(path))
    logs = assert_survived(proc)
    events = [line["event"] for line in logs]
    if name in NOT_SSE:
        assert proc.returncode == 1
        assert events == ["check.not_sse", "stream.summary"]
        assert str(logs[0]["looks_like"]).startswith("binary data")
    elif name == "empty":
        assert proc.returncode == 1
        assert events == ["sse.empty_stream", "stream.summary"]
    else:
        assert "check.not_sse" not in events
        assert logs[-1]["bytes"] == path.stat().st_size
    for line in proc.stdout.decode("utf-8").splitlines():
        json.loads(line)  # one JSON object per event, valid UTF-8


@pytest.mark.parametrize("name", HOSTILE)
def test_check_text_output_is_valid_utf8(name: str, hostile_files: dict[str, Path]) -> None:
    proc = check("--text", str(hostile_files[name]))
    assert_survived(proc)
    proc.stdout.decode("utf-8")  # strict: raises on a surrogate or a stray byte


@pytest.mark.parametrize("dialect", ["openai", "responses", "anthropic", "text", "none"])
@pytest.mark.parametrize("name", ["random_bytes", "all_256_after_data", "invalid_utf8_lines"])
def test_check_survives_hostile_input_in_every_dialect(
    name: str, dialect: str, hostile_files: dict[str, Path]
) -> None:
    assert_survived(check("--dialect", dialect, "--text", str(hostile_files[name])))


def test_check_survives_tiny_limits_and_stdin() -> None:
    data = _random_bytes()[:20_000] + HOSTILE["invalid_utf8_lines"]()[:20_000]
    proc = check("--max-line", "1", "--max-frame", "1", "-", stdin=data)
    assert_survived(proc)


def test_check_survives_a_seeded_series_of_random_inputs(tmp_path: Path) -> None:
    """Ten short random inputs, mixed with SSE tokens so some events get dispatched (the core
    alone takes many more in its property tests; this is the command's own path)."""
    rng = random.Random(7)
    tokens = [b"data: ", b"\n", b"\r", b"\r\n", b"\n\n", b"event: ", b"id: ", b"retry: "]
    for i in range(10):
        parts = [
            rng.choice(tokens) if rng.random() < 0.5 else rng.randbytes(rng.randint(1, 40))
            for _ in range(rng.randint(0, 200))
        ]
        f = tmp_path / f"r{i}.sse"
        f.write_bytes(b"".join(parts))
        proc = check("--text", str(f))
        assert_survived(proc)
        proc.stdout.decode("utf-8")


def _peak_rss_kib(path: Path, *args: str) -> tuple[int, int]:
    out = subprocess.run(
        [sys.executable, "-c", _MEASURE, str(path), *CLI, "check", *args, "-"],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    ).stdout.split()
    return int(out[0]), int(out[1])


def test_five_megabyte_line_keeps_check_rss_bounded(
    hostile_files: dict[str, Path], tmp_path: Path
) -> None:
    tiny = tmp_path / "tiny.sse"
    tiny.write_bytes(b"data: x\n\n")
    _, baseline = _peak_rss_kib(tiny)
    rc, peak = _peak_rss_kib(hostile_files["five_mb_line_no_newline"])
    rc_text, peak_text = _peak_rss_kib(hostile_files["five_mb_line_no_newline"], "--text")
    print(
        f"sse-proxy check peak RSS: tiny input {baseline / 1024:.1f} MiB, "
        f"5 MB line {peak / 1024:.1f} MiB, 5 MB line --text {peak_text / 1024:.1f} MiB"
    )
    assert rc == rc_text == 1  # oversized and unterminated: warnings
    assert peak < 150 * 1024
    assert peak_text < 150 * 1024
    # The interpreter is most of it; the line itself must not be held (5 MB) nor copied.
    assert peak - baseline < 16 * 1024


_REC = b'{"format":"sse-proxy-recording","version":1'


@pytest.mark.parametrize(
    "body",
    [
        _REC + b',"x":' + b"[" * 100_000 + b"]" * 100_000 + b"}\n",  # past json's recursion
        _REC + b',"request":"ab"}\n',  # dict("ab") raised ValueError
        _REC + b',"request":[1,2]}\n',  # dict([1, 2]) raised TypeError
        _REC + b',"request":{"path":' + b"[" * 900 + b"]" * 900 + b"}}\n",  # str() of it
        _REC + b"}\n" + b'{"t": 0, "data": "' + b"\xff" * 10 + b'"}\n',
    ],
    ids=["deep_json", "request_str", "request_list", "deep_path", "bad_read"],
)
def test_malformed_recording_is_one_usage_error_line_not_a_traceback(
    body: bytes, tmp_path: Path
) -> None:
    """A file that starts like a recording is read as one, or, if broken, reported and read
    as the raw capture it then is (exit 1 with a warning): never 2, never a traceback."""
    f = tmp_path / "broken.ssrec"
    f.write_bytes(body)
    for args in ([str(f)], ["-"]):
        proc = check(*args, stdin=body if args == ["-"] else None)
        err = proc.stderr.decode()
        assert "Traceback" not in err, err[-2000:]
        assert_survived(proc)
        if "check.recording_invalid" in err:
            assert proc.returncode == 1, err[-2000:]
