"""Logs on a terminal: a real `python -m sse_proxy serve` whose stderr is a pseudo-terminal.

When stderr is a terminal and no --log-format was given, a person reads the log: one line
per stream led by its verdict, alerts without the stream's repeated context, colour by
level (NO_COLOR and FORCE_COLOR honoured), and a start-up line that says what to set in the
app. --log-format json wins on a terminal; a file or a pipe gets JSON lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import aiohttp
import pytest
import yarl
from aiohttp import web

from sse_proxy.tools.mock_upstream import mock_upstream
from tests.support.cli import ROOT
from tests.support.net import free_port, running_app

ANSI = re.compile(r"\x1b\[[0-9;]*m")
pytestmark = pytest.mark.skipif(not hasattr(os, "openpty"), reason="needs a pseudo-terminal")


class TerminalServe:
    """`python -m sse_proxy serve ARGS` with stdout and stderr on a pseudo-terminal.

    A reader thread drains the terminal's master side as the proxy writes (a pty's buffer
    is small, and its contents are lost once the child closes it); ``wait_for`` blocks on
    a condition until a pattern shows up, never on a fixed sleep.
    """

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        base = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith("SSE_PROXY_") and k not in ("NO_COLOR", "FORCE_COLOR")
        }
        self.env = {**base, "TERM": "xterm-256color", **(env or {})}
        self.args = [sys.executable, "-m", "sse_proxy", "serve", *args]
        self.raw = b""
        self._cond = threading.Condition()
        self.proc: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> TerminalServe:
        master, slave = os.openpty()
        self.proc = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=slave,
            stderr=slave,
            env=self.env,
            cwd=ROOT,
        )
        os.close(slave)
        self._master = master
        self._reader = threading.Thread(target=self._drain, daemon=True)
        self._reader.start()
        return self

    def _drain(self) -> None:
        while True:
            try:
                block = os.read(self._master, 65536)
            except OSError:  # EIO: every writer closed the terminal
                block = b""
            with self._cond:
                if not block:
                    self._cond.notify_all()
                    return
                self.raw += block
                self._cond.notify_all()

    @property
    def text(self) -> str:
        """What the terminal showed, without colour codes; lines end in \\n."""
        return ANSI.sub("", self.raw.decode("utf-8", "replace")).replace("\r\n", "\n")

    def wait_for(self, pattern: str, count: int = 1, timeout: float = 30.0) -> list[str]:
        """The lines matching ``pattern`` once there are ``count`` of them."""
        regex = re.compile(pattern, re.MULTILINE)
        deadline = time.monotonic() + timeout
        with self._cond:
            while True:
                found = [ln for ln in self.text.splitlines() if regex.search(ln)]
                if len(found) >= count:
                    return found
                left = deadline - time.monotonic()
                assert self.proc is not None
                if left <= 0 or (self.proc.poll() is not None and not self._reader.is_alive()):
                    raise AssertionError(f"{pattern!r} x{count} not shown:\n{self.text[-3000:]}")
                self._cond.wait(min(left, 0.5))

    def stop(self) -> int:
        assert self.proc is not None
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
        try:
            code = self.proc.wait(20)
        finally:
            if self.proc.poll() is None:
                self.proc.kill()
                self.proc.wait(5)
        self._reader.join(5)
        os.close(self._master)
        return code

    def __exit__(self, *exc: object) -> None:
        if self.proc is not None and self.proc.returncode is None:
            self.stop()


async def _streams(base: str, *faults: str) -> None:
    async with aiohttp.ClientSession() as session:
        for fault in faults:
            async with session.post(
                base + "/v1/chat/completions",
                json={"model": "gpt-4o-mini", "stream": True},
                headers={"X-Mock-Fault": fault, "X-Request-ID": f"req-{fault}"},
            ) as resp:
                await resp.read()


@pytest.mark.asyncio
async def test_a_terminal_gets_one_coloured_line_per_stream_verdict_first() -> None:
    """Start-up says what to set; each stream is one line, verdict first; alerts are short."""
    port = free_port()
    async with mock_upstream() as upstream:
        with TerminalServe("--upstream", upstream, "--port", str(port)) as term:
            (started,) = await asyncio.to_thread(term.wait_for, "^proxy.started")
            (hint,) = await asyncio.to_thread(term.wait_for, "set OPENAI_BASE_URL=")
            await _streams(f"http://127.0.0.1:{port}", "none", "no_terminal", "invalid_utf8")
            await asyncio.to_thread(term.wait_for, r"^(ok|degraded|broken) ", 3)
            code = await asyncio.to_thread(term.stop)
    assert code == 0
    assert f"listen=http://127.0.0.1:{port}" in started
    assert f"OPENAI_BASE_URL=http://127.0.0.1:{port}/v1" in hint
    text = term.text
    for line in text.splitlines():
        with pytest.raises(json.JSONDecodeError):
            json.loads(line)
    assert "{'" not in text
    assert "True" not in text
    assert "None" not in text
    summaries = {
        m.group("rid"): m
        for m in re.finditer(
            r"^(?P<verdict>ok|degraded|broken) +(?P<reason>\S+ )?POST /v1/chat/completions "
            r"200 (?P<model>\S+) req=(?P<rid>\S+) ttft=(?P<ttft>\d+ms|[\d.]+s|-) "
            r"dur=(?P<dur>\d+ms|[\d.]+s)(?P<rest>.*)$",
            text,
            re.MULTILINE,
        )
    }
    assert set(summaries) == {"req-none", "req-no_terminal", "req-invalid_utf8"}, text
    assert summaries["req-none"]["verdict"] == "ok"
    assert summaries["req-none"]["reason"] is None
    assert summaries["req-no_terminal"]["verdict"] == "broken"
    assert summaries["req-no_terminal"]["reason"] == "truncated "
    assert summaries["req-invalid_utf8"]["verdict"] == "degraded"
    assert summaries["req-invalid_utf8"]["reason"] == "sse.replacement_char "
    assert summaries["req-none"]["model"].startswith("gpt-4o-mini")
    assert 'alerts={"sse.truncated":1}' in summaries["req-no_terminal"]["rest"]
    # one line per stream: each stream id ends exactly one unindented line
    ids = re.findall(r"stream=([0-9a-f]{16})", text)
    for sid in set(ids):
        heads = [ln for ln in text.splitlines() if f"stream={sid}" in ln and ln[0] != " "]
        assert len(heads) == 1, heads
    # alerts are indented, led by their level, and carry none of the stream's context
    (truncated,) = [ln for ln in text.splitlines() if "sse.truncated reason=" in ln]
    assert truncated.startswith("  warning sse.truncated reason=no_terminal_marker ")
    for context in ("method=", "path=", "client_request_id=", "route=", "model=", "upstream"):
        assert context not in truncated, context
    # colour by level: a broken verdict red, a warning yellow, an ok stream green
    raw = term.raw.decode()
    assert "\x1b[1;31mbroken" in raw
    assert "\x1b[33mwarning" in raw
    assert "\x1b[32mok" in raw


@pytest.mark.asyncio
async def test_no_color_on_a_terminal_and_json_when_asked() -> None:
    """NO_COLOR: the same lines without escape codes; --log-format json: JSON on a terminal."""
    port = free_port()
    async with mock_upstream() as upstream:
        with TerminalServe(
            "--upstream", upstream, "--port", str(port), env={"NO_COLOR": "1"}
        ) as plain:  # fmt: skip
            await asyncio.to_thread(plain.wait_for, "set OPENAI_BASE_URL=")
            await _streams(f"http://127.0.0.1:{port}", "no_terminal")
            await asyncio.to_thread(plain.wait_for, "^broken +truncated POST")
            assert await asyncio.to_thread(plain.stop) == 0
        assert b"\x1b[" not in plain.raw
        port = free_port()
        with TerminalServe(
            "--upstream", upstream, "--port", str(port), "--log-format", "json",
            env={"FORCE_COLOR": "1"},
        ) as js:  # fmt: skip
            await asyncio.to_thread(js.wait_for, '"event":"proxy.started"')
            await _streams(f"http://127.0.0.1:{port}", "none")
            await asyncio.to_thread(js.wait_for, '"event":"stream.summary"')
            assert await asyncio.to_thread(js.stop) == 0
    lines = [json.loads(line) for line in js.text.splitlines() if line.strip()]
    started = next(e for e in lines if e["event"] == "proxy.started")
    assert started["app_env"][0]["set"] == f"OPENAI_BASE_URL=http://127.0.0.1:{port}/v1"
    assert any(e["event"] == "stream.summary" for e in lines)


@pytest.mark.parametrize(
    ("flags", "env", "human", "colour"),
    [
        ((), {"FORCE_COLOR": "1"}, False, False),  # a file: JSON, whatever the colour says
        (("--log-format", "console"), {}, True, False),  # asked for: human, no colour
        (("--log-format", "console"), {"FORCE_COLOR": "1"}, True, True),
        (("--log-format", "console"), {"FORCE_COLOR": "1", "NO_COLOR": "1"}, True, False),
    ],
)
def test_a_file_gets_json_unless_console_is_asked_for(
    tmp_path: Path, flags: tuple[str, ...], env: dict[str, str], human: bool, colour: bool
) -> None:
    """stderr to a file: JSON lines by default; --log-format console gives human lines,
    coloured only with FORCE_COLOR (and NO_COLOR beats it)."""
    log = tmp_path / "serve.log"
    clean = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("SSE_PROXY_") and k not in ("NO_COLOR", "FORCE_COLOR")
    }
    with log.open("wb") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", "sse_proxy", "serve", "--upstream", "http://127.0.0.1:9",
             "--port", "0", *flags],
            stdin=subprocess.DEVNULL, stdout=out, stderr=out, env={**clean, **env}, cwd=ROOT,
        )  # fmt: skip
        try:
            deadline = time.monotonic() + 30
            while "proxy.started" not in log.read_text(encoding="utf-8"):
                assert proc.poll() is None, log.read_text(encoding="utf-8")
                assert time.monotonic() < deadline, "no start-up line"
                time.sleep(0.05)
            proc.send_signal(signal.SIGTERM)
            assert proc.wait(20) == 0
        finally:
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            proc.wait(5)
    raw = log.read_text(encoding="utf-8")
    first = raw.splitlines()[0]
    if human:
        assert ANSI.sub("", first).startswith("proxy.started listen=http://127.0.0.1:")
        assert "set OPENAI_BASE_URL=http://127.0.0.1:" in raw
    else:
        assert all(json.loads(line)["event"] for line in raw.splitlines())
    assert ("\x1b[" in raw) is colour


# A window title, the clipboard (OSC 52), an erased line, C1's one-byte CSI and DEL: what a
# client can put in a path or a model name for the operator's terminal to obey.
_HOSTILE = "\x1b]0;pwned\x07\x1b]52;c;cHduZWQ=\x07\x1b[2K\x1b[1A\u009b2K\x7f"
# and without the "=" that made the value JSON (whose escapes caught C0 already)
_HOSTILE_PATH = "\x1b]0;pwned\x07\x1b[2K\x1b[1A\u009b2K\x7f"


def _sse_anywhere() -> web.Application:
    """An upstream that streams a short OpenAI Chat answer on every path, its model the
    request's (as upstreams echo it)."""

    async def stream(request: web.Request) -> web.StreamResponse:
        model = (await request.json()).get("model")
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        chunk = {"model": model, "choices": [{"index": 0, "delta": {"content": "hi"}}]}
        await resp.write(b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n")
        return resp

    app = web.Application()
    app.router.add_post("/{tail:.*}", stream)
    return app


@pytest.mark.asyncio
@pytest.mark.parametrize("colour", [False, True])
async def test_client_values_reach_the_terminal_escaped(colour: bool) -> None:
    """A path and a model holding terminal control sequences: every control character is
    shown escaped (\\u001b); the only escape codes on the terminal are the renderer's
    own colours."""
    port = free_port()
    env = {"FORCE_COLOR": "1"} if colour else {"NO_COLOR": "1"}
    hostile = _HOSTILE_PATH.encode()
    encoded = "".join(f"%{b:02X}" if b < 0x21 or b > 0x7E else chr(b) for b in hostile)
    async with running_app(_sse_anywhere()) as upstream:
        with TerminalServe("--upstream", upstream, "--port", str(port), env=env) as term:
            await asyncio.to_thread(term.wait_for, "set OPENAI_BASE_URL=")
            url = yarl.URL(f"http://127.0.0.1:{port}/v1/{encoded}/chat", encoded=True)
            async with (
                aiohttp.ClientSession() as session,
                session.post(url, json={"model": "gpt" + _HOSTILE, "stream": True}) as resp,
            ):
                assert resp.status == 200
                await resp.read()
            (line,) = await asyncio.to_thread(term.wait_for, r"^ok +POST ")
            assert await asyncio.to_thread(term.stop) == 0
    raw = term.raw
    own = re.compile(rb"\x1b\[[0-9;]*m")  # the renderer's colours, and nothing else
    assert b"\x1b" not in own.sub(b"", raw), raw
    assert b"\x07" not in raw
    assert "\u009b".encode() not in raw
    assert b"\x7f" not in raw
    assert (b"\x1b[" in raw) is colour
    assert line.startswith('ok       POST "/v1/\\u001b]0;pwned\\u0007\\u001b[2K\\u001b[1A'), line
    assert ' 200 "gpt\\u001b]0;pwned\\u0007\\u001b]52;c;cHduZWQ=\\u0007' in line, line
