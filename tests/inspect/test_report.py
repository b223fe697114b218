"""The HTML reports: first difference, cut points, self-containedness, `check --html`."""

from __future__ import annotations

import re
import subprocess
import sys
from html import unescape
from pathlib import Path

import pytest

from sse_proxy.errors import UsageError
from sse_proxy.inspect.report import ReportCase, first_difference_at, render_report, write_report
from sse_proxy.tools import fixtures
from tests.support.cli import ROOT, cli_env
from tests.support.recordings import CLIENTS, write_recording


@pytest.mark.parametrize(
    ("expected", "received", "at"),
    [("abc", "abc", None), ("abc", "abd", 2), ("abc", "ab", 2), ("ab", "abc", 2), ("", "x", 0)],
)
def test_first_difference_at(expected: str, received: str, at: int | None) -> None:
    assert first_difference_at(expected, received) == at


def test_report_marks_first_difference_and_cut() -> None:
    data = fixtures.clean_stream("text", fixtures.SHORT_TOKENS)
    fox = data.index("🦊".encode())
    expected = fixtures.SHORT_MESSAGE
    received = expected.replace("🦊", "\ufffd\ufffd")
    case = ReportCase(
        name="cut=60",
        verdict="wrong",
        received=received,
        expected=expected,
        diagnosis="character boundary",
        stream=data,
        cuts=(fox + 2,),
        dialect="text",
    )
    html = render_report("r", [case])
    got = re.search(r'<mark class="first" id="case-0-got"[^>]*>(.*?)</mark>', html)
    assert got is not None
    assert got.group(1) == "\ufffd"
    want = re.search(r'<mark class="first" id="case-0-want"[^>]*>(.*?)</mark>', html)
    assert want is not None
    assert want.group(1) == "🦊"
    assert f'data-off="{fox}" data-boundary="{fox + 2}"' in html
    assert f"write boundary at byte {fox + 2} cuts the 4-byte character" in html
    # self-contained: nothing fetched from anywhere
    assert not re.search(r'(src|href)="(https?:)?//', html)
    assert "<script" not in html


def test_report_without_captured_bytes_says_so() -> None:
    html = render_report(
        "r",
        [ReportCase(name="utf8 seed=1", verdict="pass", received="x", expected="x", passed=True)],
    )
    assert "were not captured" in html
    assert "equals the expected text" in html


def test_unwritable_report_is_a_usage_error(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="cannot write"):
        write_report(str(tmp_path / "no" / "such" / "r.html"), "r", [])


def test_check_html_cli(tmp_path: Path) -> None:
    capture = tmp_path / "cap.sse"
    capture.write_bytes(fixtures.faulty_stream("invalid_utf8", "openai"))
    out = tmp_path / "r.html"
    proc = subprocess.run(
        [sys.executable, "-m", "sse_proxy", "check", "--text", "--html", str(out), str(capture)],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 1  # the report does not change the exit status
    html = out.read_text(encoding="utf-8")
    offsets = sorted(int(m) for m in re.findall(r'class="m alert"[^>]*data-off="(\d+)"', html))
    data = capture.read_bytes()
    assert data.index(b"\xff") in offsets
    assert "sse.replacement_char × 2" in html


def test_check_html_unwritable(tmp_path: Path) -> None:
    capture = tmp_path / "cap.sse"
    capture.write_bytes(fixtures.clean_stream("openai", fixtures.SHORT_TOKENS))
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sse_proxy",
            "check",
            "--html",
            str(tmp_path / "x" / "r.html"),
            str(capture),
        ],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 2
    assert b"cannot write" in proc.stderr
    assert b"Traceback" not in proc.stderr


def test_check_html_recording_keeps_its_reads(tmp_path: Path) -> None:
    data = fixtures.clean_stream("text", fixtures.SHORT_TOKENS)
    cut = data.index("é".encode()) + 1  # inside the 2-byte é
    rec = write_recording(
        tmp_path / "r.ssrec", [(0.0, data[:cut]), (0.01, data[cut:])], request_path="/v1/text"
    )
    out = tmp_path / "r.html"
    proc = subprocess.run(
        [sys.executable, "-m", "sse_proxy", "check", "--text", "--html", str(out), str(rec)],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        check=False,
        timeout=60,
    )
    assert proc.returncode == 0, proc.stderr.decode()
    html = out.read_text(encoding="utf-8")
    assert f'data-off="{cut - 1}" data-boundary="{cut}"' in html
    assert f"read boundary at byte {cut} cuts the 2-byte character 'é'" in unescape(html)
    assert "1 passed, 0 failed" in html


def test_test_client_html_keeps_the_chaos_writes(tmp_path: Path) -> None:
    """A re-chunked case's strip holds the bytes the proxy wrote, cut at each write: with
    ``utf8`` every multi-byte character of the stream is split by a write."""
    out = tmp_path / "r.html"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "sse_proxy",
            "test-client",
            "--dialect",
            "text",
            "--only",
            "utf8",
            "--seeds",
            "1",
            "--html",
            str(out),
            "--",
            sys.executable,
            "-m",
            f"{CLIENTS}.decode_each_read",
        ],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        check=False,
        timeout=120,
    )
    assert proc.returncode == 1, proc.stderr.decode()
    html = out.read_text(encoding="utf-8")
    body = fixtures.clean_stream("text")
    multi = sum(1 for ch in body.decode() if len(ch.encode()) > 1)
    cuts = re.findall(r'<span class="cut" id="case-0-cut-\d+" data-off="(\d+)"', html)
    assert len(cuts) == multi
    assert f"{len(body)} bytes in " in html
