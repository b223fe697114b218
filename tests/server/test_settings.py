"""Settings that say what they do: implied chaos mode, --record checked at startup, range
errors naming their source, misspelled SSE_PROXY_* variables, 431 for oversized headers."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from sse_proxy.config import load_config, load_config_with_notes
from sse_proxy.errors import ConfigError
from sse_proxy.server.run import start_proxy, stop_proxy
from sse_proxy.settings import Config
from tests.support.cli import SSE_PROXY
from tests.support.logs import LogEntries, named
from tests.support.net import raw_exchange
from tests.support.stack import StartProxy


def _clean_env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("SSE_PROXY_")}
    env.update(extra)
    return env


# ------------------------------------------------------------------ implied chaos mode


@pytest.mark.parametrize(
    ("flags", "env", "file", "mode", "implied"),
    [
        ({"chaos": "utf8"}, {}, "", "chaos", True),
        ({"chaos": "utf8", "mode": "frames"}, {}, "", "frames", False),
        ({"chaos": "utf8"}, {"SSE_PROXY_MODE": "frames"}, "", "chaos", True),
        ({}, {"SSE_PROXY_CHAOS": "bytewise"}, "", "chaos", True),
        ({}, {"SSE_PROXY_CHAOS": "bytewise"}, 'mode = "frames"\n', "chaos", True),
        ({}, {"SSE_PROXY_CHAOS": "bytewise", "SSE_PROXY_MODE": "frames"}, "", "frames", False),
        ({}, {}, 'chaos = "utf8"\nmode = "passthrough"\n', "passthrough", False),
        ({}, {}, 'chaos = "utf8"\n', "chaos", True),
        ({"seed": 3}, {}, "", "passthrough", False),
    ],
)
def test_a_chaos_strategy_without_a_mode_implies_chaos_mode(
    tmp_path: Path,
    flags: dict[str, Any],
    env: dict[str, str],
    file: str,
    mode: str,
    implied: bool,
) -> None:
    path = None
    if file:
        path = tmp_path / "c.toml"
        path.write_text("[sse-proxy]\n" + file, encoding="utf-8")
    cfg, notes = load_config_with_notes(flags=flags, env=env, path=path)
    assert cfg.mode == mode
    said = [n for n in notes if n.event == "config.mode_implied"]
    assert bool(said) is implied
    if implied:
        assert "chaos" in said[0].fields["reason"].lower()


def _serve_lines(args: list[str], env: dict[str, str]) -> list[dict[str, Any]]:
    """All JSON log lines of `sse-proxy serve` from start to a SIGTERM after it started."""
    proc = subprocess.Popen(
        [str(SSE_PROXY), "serve", "--port", "0", *args],
        stderr=subprocess.PIPE,
        stdout=subprocess.DEVNULL,
        text=True,
        env=_clean_env(**env),
    )
    try:
        assert proc.stderr is not None
        lines: list[dict[str, Any]] = []
        while not any(e["event"] == "proxy.started" for e in lines):
            line = proc.stderr.readline()
            assert line, f"the proxy exited before it started: {lines}"
            lines.append(json.loads(line))
        started = next(e for e in lines if e["event"] == "proxy.started")
        # health answers once the server runs; its signal handlers are in place by then
        with urllib.request.urlopen(started["health"], timeout=10) as resp:
            assert resp.status == 200
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=15) == 0
        err = proc.stderr.read()  # the rest, including what readline() had buffered
        lines.extend(json.loads(x) for x in err.splitlines() if x.strip())
        return lines
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stderr is not None:
            proc.stderr.close()


def test_cli_startup_line_says_chaos_mode_was_implied() -> None:
    lines = _serve_lines(["--upstream", "http://127.0.0.1:9", "--chaos", "utf8"], {})
    started = next(e for e in lines if e["event"] == "proxy.started")
    assert started["mode"] == "chaos"
    assert "--chaos" in started["mode_reason"]
    plain = _serve_lines(["--upstream", "http://127.0.0.1:9"], {})
    started = next(e for e in plain if e["event"] == "proxy.started")
    assert started["mode"] == "passthrough"
    assert "mode_reason" not in started


# ------------------------------------------------------------------------ --record DIR


@pytest.mark.asyncio
async def test_record_dir_is_created_at_startup(tmp_path: Path) -> None:
    where = tmp_path / "a" / "b"
    runner, _ = await start_proxy(
        Config(upstream="http://127.0.0.1:9", port=0, record_dir=str(where))
    )
    try:
        assert where.is_dir()
    finally:
        await stop_proxy(runner)


def test_unusable_record_dir_is_refused_at_startup(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("x")
    proc = subprocess.run(
        [
            str(SSE_PROXY),
            "serve",
            "--port",
            "0",
            "--upstream",
            "http://127.0.0.1:9",
            "--record",
            str(blocker / "sub"),
        ],
        capture_output=True,
        text=True,
        env=_clean_env(),
        timeout=30,
        check=False,
    )
    assert proc.returncode == 2, proc.stderr
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert "record_dir" in lines[0]
    assert str(blocker / "sub") in lines[0]
    assert "Traceback" not in proc.stderr


# ------------------------------------------------------------- range errors' sources


@pytest.mark.parametrize(
    ("setting", "value", "word"),
    [
        ("port", "70000", "port"),
        ("max_frame_bytes", "0", "max_frame_bytes"),
        ("idle_timeout", "-1", "idle_timeout"),
        ("mode", "fast", "mode"),
        ("dialect", "klingon", "dialect"),
    ],
)
def test_range_errors_name_their_source(
    tmp_path: Path, setting: str, value: str, word: str
) -> None:
    flag = f"--{setting.replace('_', '-')}"
    with pytest.raises(ConfigError) as info:
        load_config(flags={setting: value})
    assert str(info.value).startswith(f"flag {flag}: "), str(info.value)
    assert word in str(info.value)
    env = f"SSE_PROXY_{setting.upper()}"
    with pytest.raises(ConfigError) as info:
        load_config(env={env: value})
    assert str(info.value).startswith(f"environment {env}: "), str(info.value)
    path = tmp_path / "c.toml"
    literal = value if value.lstrip("-").isdigit() else json.dumps(value)
    path.write_text(f"[sse-proxy]\n{setting} = {literal}\n", encoding="utf-8")
    with pytest.raises(ConfigError) as info:
        load_config(path=path)
    assert str(info.value).startswith(f"config file {str(path)!r}: "), str(info.value)
    # the flag wins over the file: a good flag hides a bad file value, and the reverse
    # names the flag
    with pytest.raises(ConfigError) as info:
        load_config(path=path, env={env: value}, flags={setting: value})
    assert str(info.value).startswith(f"flag {flag}: ")


# ------------------------------------------------------------- unknown SSE_PROXY_* vars


def test_unknown_env_variable_names_the_closest_setting() -> None:
    _, notes = load_config_with_notes(
        env={
            "SSE_PROXY_IDLE_TIMEUOT": "5",
            "SSE_PROXY_UPSTRAEM": "http://x",
            "SSE_PROXY_ZZZZZZ": "1",
            "SSE_PROXY_URL": "http://harness-sets-this",
            "SSE_PROXY_PORT": "1",
            "OTHER": "1",
        }
    )
    unknown = {n.fields["variable"]: n.fields["closest"] for n in notes}
    assert unknown == {
        "SSE_PROXY_IDLE_TIMEUOT": "SSE_PROXY_IDLE_TIMEOUT",
        "SSE_PROXY_UPSTRAEM": "SSE_PROXY_UPSTREAM",
        "SSE_PROXY_ZZZZZZ": None,
    }
    assert all(n.level == "warning" for n in notes)


def test_cli_warns_about_a_misspelled_variable_at_startup() -> None:
    lines = _serve_lines(["--upstream", "http://127.0.0.1:9"], {"SSE_PROXY_SHUTDOWN_GRAEC": "1"})
    warned = [e for e in lines if e["event"] == "config.unknown_env"]
    assert len(warned) == 1
    assert warned[0]["level"] == "warning"
    assert warned[0]["variable"] == "SSE_PROXY_SHUTDOWN_GRAEC"
    assert warned[0]["closest"] == "SSE_PROXY_SHUTDOWN_GRACE"


# --------------------------------------------------------------- oversized headers


@pytest.mark.asyncio
@pytest.mark.parametrize("where", ["header", "many", "request_line"])
async def test_oversized_request_headers_get_431_without_traceback(
    mock_url: str, start: StartProxy, logs: LogEntries, where: str
) -> None:
    url = await start(mock_url, max_request_header_bytes=1024)
    if where == "header":
        request = b"GET /v1/text HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Big: " + b"a" * 4096 + b"\r\n\r\n"
    elif where == "many":  # each line fits; together they do not (the proxy's own check)
        lines = b"".join(b"X-H%d: %s\r\n" % (i, b"b" * 100) for i in range(40))
        request = b"GET /v1/text HTTP/1.1\r\nHost: 127.0.0.1\r\n" + lines + b"\r\n"
    else:
        request = b"GET /v1/text?q=" + b"c" * 4096 + b" HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"
    reply = await raw_exchange(url, request)
    assert reply.status == 431
    assert json.loads(reply.body)["error"]["type"] == "request_headers_too_large"
    assert not [e for e in logs if e.get("log_level") in ("error", "critical")]
    assert "Traceback" not in repr(logs)
    assert "aaaa" not in repr(logs)
    if where != "many":
        assert named(logs, "http.bad_request")[0]["status"] == 431


@pytest.mark.asyncio
async def test_garbage_request_gets_400_json_without_traceback(
    mock_url: str, start: StartProxy, logs: LogEntries
) -> None:
    url = await start(mock_url)
    reply = await raw_exchange(url, b"GET / HTTP/1.1\r\nHost: 127.0.0.1\r\nBad Header\r\n\r\n")
    assert reply.status == 400
    assert json.loads(reply.body)["error"]["type"] == "bad_request"
    assert not [e for e in logs if e.get("log_level") in ("error", "critical")]
