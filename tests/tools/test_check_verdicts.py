"""`check` verdicts that must not mislead: empty input, input that is not SSE, dialect
detection on evidence only, a recording's own stream_id, a bare `check` on a terminal."""

from __future__ import annotations

import json
import os
import pty
import select
import subprocess
from pathlib import Path

import pytest

from sse_proxy.core import StreamReassembler
from sse_proxy.core.dialects.registry import detect
from tests.support.cli import CLI
from tests.support.recordings import write_recording


def check(*args: str, stdin: bytes | None = None) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [*CLI, "check", *args], input=stdin, capture_output=True, timeout=60, check=False
    )


def events(proc: subprocess.CompletedProcess[bytes]) -> list[dict[str, object]]:
    return [json.loads(line) for line in proc.stderr.decode().splitlines() if line.strip()]


@pytest.mark.parametrize("where", ["file", "stdin"])
def test_empty_input_is_an_empty_stream_and_exits_1(tmp_path: Path, where: str) -> None:
    f = tmp_path / "empty.sse"
    f.write_bytes(b"")
    proc = check(str(f)) if where == "file" else check("-", stdin=b"")
    assert proc.returncode == 1
    logs = events(proc)
    assert [e["event"] for e in logs] == ["sse.empty_stream", "stream.summary"]
    assert logs[0]["level"] == "warning"


@pytest.mark.parametrize(
    ("body", "looks"),
    [
        (
            b'{"error": {"message": "Incorrect API key provided", "type": '
            b'"invalid_request_error", "code": "invalid_api_key"}}\n',
            'a JSON body with an "error" member',
        ),
        (b"<!DOCTYPE html>\n<html><body>502 Bad Gateway</body></html>\n", "an HTML page"),
        (bytes(range(256)) * 8, "binary data"),
        (b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n\r\ndata: x\r\n\r\n", None),
        (b"hello, this is just text\nand more of it\n", "plain text without any SSE field"),
    ],
    ids=["json_401", "html", "binary", "curl_i", "plain"],
)
def test_input_that_is_not_sse_is_named_and_exits_1(
    tmp_path: Path, body: bytes, looks: str | None
) -> None:
    """A JSON error body is "not SSE: a JSON body", not an unterminated frame; binary is
    binary, not thousands of U+FFFD."""
    f = tmp_path / "capture"
    f.write_bytes(body)
    proc = check(str(f))
    logs = events(proc)
    names = [e["event"] for e in logs]
    if looks is None:  # curl -i output still holds SSE fields: parsed, not refused
        assert "check.not_sse" not in names
        return
    assert proc.returncode == 1
    assert names == ["check.not_sse", "stream.summary"]
    assert str(logs[0]["looks_like"]).startswith(looks), logs[0]
    assert "sse.replacement_char" not in names
    assert proc.stdout == b""


def test_an_event_type_alone_never_selects_a_json_dialect() -> None:
    """`event: ping` with plain-text data is a generic stream, not Anthropic."""
    assert detect("ping", "hello") == "text"
    assert detect("message_start", "not json") == "text"
    assert detect("response.created", "plain") == "text"
    assert detect("ping", '{"type": "ping"}') == "anthropic"
    assert detect("content_block_delta", '{"index": 0}') == "anthropic"
    assert detect("response.created", '{"type": "response.created"}') == "responses"
    assert detect("ping", '{"type": "something_else"}') is None
    assert detect("message", '{"choices": []}') == "openai"
    stream = b"event: ping\ndata: hello\n\nevent: ping\ndata: world\n\n"
    reassembler = StreamReassembler(None, emit_events=False)
    alerts = list(reassembler.feed(stream).alerts) + list(reassembler.close().alerts)
    assert reassembler.dialect == "text"
    assert [a.name for a in alerts] == []
    proc = check("-", stdin=stream)
    assert proc.returncode == 0, proc.stderr
    assert "sse.invalid_json" not in proc.stderr.decode()


def test_a_recordings_stream_id_is_reused(tmp_path: Path) -> None:
    rec = write_recording(
        tmp_path / "r.ssrec", [(0.0, b'data: {"choices": []}\n\ndata: [DONE]\n\n')]
    )
    proc = check(str(rec))
    logs = events(proc)
    assert logs
    assert {e["stream_id"] for e in logs} == {"test"}  # write_recording's stream_id
    plain = tmp_path / "plain.sse"
    plain.write_bytes(b"data: x\n\n")
    assert events(check(str(plain)))[0]["stream_id"] != "test"


def test_a_bare_check_on_a_terminal_says_it_reads_stdin() -> None:
    """With a terminal on stdin, the user is told what `check` is waiting for (on stderr)."""
    leader, follower = pty.openpty()
    proc = subprocess.Popen(
        [*CLI, "check"],
        stdin=follower,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        env=dict(os.environ),
    )
    os.close(follower)
    try:
        assert proc.stderr is not None
        ready, _, _ = select.select([proc.stderr], [], [], 30)
        assert ready, "nothing on stderr"
        line = proc.stderr.readline().decode()
        assert "reading an event stream from stdin" in line
        os.write(leader, b"data: x\n\n\x04")
        assert proc.wait(timeout=30) == 0
        assert proc.stdout is not None
        assert b'"data": "x"' in proc.stdout.read()
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(leader)
        for pipe in (proc.stdout, proc.stderr):
            if pipe is not None:
                pipe.close()


def test_one_name_for_the_default_dialect() -> None:
    """--help and the error both call the default `auto`."""
    helptext = subprocess.run(
        [*CLI, "check", "--help"], capture_output=True, timeout=30, check=False
    ).stdout.decode()
    assert "default: auto" in " ".join(helptext.split())
    assert "detect" not in helptext
    err = check("--dialect", "klingon", "-", stdin=b"").stderr.decode()
    assert "auto" in err


@pytest.mark.parametrize(
    ("stream", "verdict", "reason"),
    [
        (b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n', "ok", None),
        (b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\n', "broken", "truncated"),
        (
            b'data: {"choices":[{"delta":{"content":"hi"}}]}\n\ndata: {bad\n\ndata: [DONE]\n\n',
            "degraded",
            "sse.invalid_json",
        ),
    ],
)
def test_the_summary_carries_the_same_verdict_the_server_gives(
    stream: bytes, verdict: str, reason: str | None
) -> None:
    """check and serve share one verdict function: ok, broken by a missing terminal marker,
    degraded by the first warning."""
    proc = check(stdin=stream)
    (summary,) = [e for e in events(proc) if e["event"] == "stream.summary"]
    assert (summary["verdict"], summary["verdict_reason"]) == (verdict, reason)
    assert proc.returncode == (0 if verdict == "ok" else 1)
