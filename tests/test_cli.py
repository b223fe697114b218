"""The command line as a person meets it: -V, help with units and defaults, examples,
options after the command, check --quiet, shell completion, `mock-upstream --help`, and
`sse-proxy health` (the container's HEALTHCHECK) reading the effective settings."""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from sse_proxy import __version__
from sse_proxy.cli import build_parser
from sse_proxy.tools import fixtures
from tests.support.cli import ServeProcess
from tests.support.cuts import TOKENS, openai_stream
from tests.support.net import free_port

CLI = [sys.executable, "-m", "sse_proxy"]


def run(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("SSE_PROXY_")}
    return subprocess.run(
        [*CLI, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**clean, **(env or {})},
    )


def _subparser(name: str) -> argparse.ArgumentParser:
    parser = build_parser()
    sub = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    found: argparse.ArgumentParser = sub.choices[name]
    return found


@pytest.mark.parametrize("flag", ["-V", "--version"])
def test_version(flag: str) -> None:
    proc = run(flag)
    assert proc.returncode == 0
    assert proc.stdout.strip() == f"sse-proxy {__version__}"


def test_every_serve_flag_says_what_it_is_with_units_and_defaults() -> None:
    """Every serve option has help; those taking a value name their default; time flags
    are in seconds, size flags in bytes."""
    serve = _subparser("serve")
    options = [a for a in serve._actions if a.option_strings and a.dest != "help"]
    assert len(options) >= 39
    for action in options:
        flag = action.option_strings[-1]
        assert action.help, flag
        if action.nargs != 0 and action.dest not in ("config",):
            assert "default" in action.help or action.dest in (
                "routes",
                "upstream_headers",
                "upstream",
                "client_cert",
                "client_key",
            ), flag
        if re.search(r"timeout|grace|threshold", flag):
            assert "in seconds" in action.help, flag
        if flag.endswith("-bytes"):
            assert "in bytes" in action.help or "bytes kept" in action.help, flag
    help_text = run("serve", "--help").stdout
    assert "examples:" in help_text
    assert "OPENAI_BASE_URL=http://127.0.0.1:8787/v1" in help_text
    assert "(default 10; 0 = cut them at once)" in help_text  # from Config, not retyped
    assert "SSE_PROXY_<NAME>" in help_text


def test_options_after_the_command_are_options_not_files(tmp_path: Path) -> None:
    """`check --log-format json FILE` reads FILE (the value is not taken as the file)."""
    capture = tmp_path / "cap.sse"
    capture.write_bytes(openai_stream(TOKENS))
    args = build_parser().parse_args(["check", "--log-format", "console", str(capture)])
    assert (args.file, args.log_format) == (str(capture), "console")
    before = build_parser().parse_args(["--log-format", "console", "check", str(capture)])
    assert before.log_format == "console"  # a global one given before the command still holds
    proc = run("check", "--log-format", "json", str(capture))
    assert proc.returncode == 0, proc.stderr
    assert [json.loads(line)["event"] for line in proc.stderr.splitlines()] == ["stream.summary"]
    assert proc.stdout.count("\n") > 5  # the events


def test_check_quiet_prints_nothing_on_a_clean_file(tmp_path: Path) -> None:
    """--quiet: a clean stream prints nothing at all; a bad one its alerts, exit 1."""
    clean = tmp_path / "clean.sse"
    clean.write_bytes(openai_stream(TOKENS))
    proc = run("check", "--quiet", str(clean))
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    proc = run("check", "-q", "--text", str(clean))
    assert (proc.returncode, proc.stdout, proc.stderr) == (0, "", "")
    bad = tmp_path / "bad.sse"
    bad.write_bytes(fixtures.faulty_stream("no_terminal", "openai"))
    proc = run("check", "--quiet", str(bad))
    assert proc.returncode == 1
    assert proc.stdout == ""
    events = [json.loads(line)["event"] for line in proc.stderr.splitlines()]
    assert events == ["sse.truncated", "stream.summary"]


def _bash_complete(script: str, *words: str) -> list[str]:
    """What bash offers after ``words`` with the generated script sourced."""
    bash = shutil.which("bash")
    assert bash is not None
    quoted = " ".join(f"'{w}'" for w in words)
    code = (
        f"source /dev/stdin <<'EOF'\n{script}\nEOF\n"
        f"COMP_WORDS=({quoted}); COMP_CWORD={len(words) - 1}; "
        f'COMP_LINE="${{COMP_WORDS[*]}}"; COMP_POINT=${{#COMP_LINE}}; '
        '_shtab_sse_proxy; printf "%s\\n" "${COMPREPLY[@]}"'
    )
    proc = subprocess.run(
        [bash, "-c", code], capture_output=True, text=True, timeout=30, check=False
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.split()


def test_bash_completion_from_shtab_completes_commands_and_flags() -> None:
    """The generated script, sourced in a real bash, completes commands and flags."""
    proc = run("completion", "bash")
    assert proc.returncode == 0, proc.stderr
    script = proc.stdout
    commands = _bash_complete(script, "sse-proxy", "")
    assert {"serve", "check", "mock-upstream", "health", "completion"} <= set(commands)
    assert _bash_complete(script, "sse-proxy", "serve", "--upst") == [
        "--upstream",
        "--upstream-header",
        "--upstream-ca",
    ]
    assert "--quiet" in _bash_complete(script, "sse-proxy", "check", "--q")
    assert run("completion", "zsh").stdout.startswith("#compdef sse-proxy")
    assert "complete -c sse-proxy" in run("completion", "fish").stdout
    assert run("completion", "ksh").returncode == 2


def test_the_path_completion_kinds_are_shtabs() -> None:
    """cli_serve spells shtab's FILE and DIRECTORY out (to import shtab lazily): the same."""
    import shtab

    from sse_proxy.cli_serve import DIRECTORY, FILE

    assert shtab.FILE == FILE
    assert shtab.DIRECTORY == DIRECTORY


def test_mock_upstream_help_lists_every_fault_up_front() -> None:
    """Each fault kind with its one-line description, before the options."""
    out = run("mock-upstream", "--help").stdout
    faults_at = out.index("fault kinds")
    assert faults_at < out.index("options:")
    for kind, fault in fixtures.KINDS.items():
        line = next(ln for ln in out.splitlines() if ln.strip().startswith(kind + " "))
        assert line.split(None, 1)[1] == fault.description, kind
        assert out.index(line) > faults_at


def test_health_reads_the_effective_settings(tmp_path: Path) -> None:
    """`sse-proxy health` asks the port and admin prefix the config file and environment
    set (SSE_PROXY_CONFIG), on loopback for a proxy listening on all interfaces."""
    port = free_port()
    config = tmp_path / "sidecar.toml"
    config.write_text(f'[sse-proxy]\nport = {port}\nadmin_prefix = "/_ops"\n', encoding="utf-8")
    env = {
        "SSE_PROXY_CONFIG": str(config),
        "SSE_PROXY_UPSTREAM": "http://127.0.0.1:9",
        "SSE_PROXY_HOST": "0.0.0.0",
    }
    with ServeProcess(env=env) as serve:
        serve.wait_for("proxy.started")
        proc = run("health", env=env)
        assert proc.returncode == 0, proc.stderr
        assert (
            proc.stdout
            == f"http://127.0.0.1:{port}/_ops/health: 200 ok workers=1/1 active_streams=0\n"
        )
        other = run("health", env={**env, "SSE_PROXY_ADMIN_PREFIX": "/_elsewhere"})
        assert other.returncode == 1
        # not the admin prefix there: forwarded to the upstream, which is not there
        assert "/_elsewhere/health: 502 error upstream_unreachable" in other.stderr
        serve.stop()
    gone = run("health", env=env)
    assert gone.returncode == 1
    assert gone.stderr.count("\n") == 1
    assert f"127.0.0.1:{port}/_ops/health" in gone.stderr
    # a --url that is no http(s) URL is a usage error (2, as any bad flag); a health result
    # is never 2 (Docker reserves it)
    for url in ("file:///etc/passwd", "http://[::1", "http://127.0.0.1:99999", "http://"):
        bad = run("health", "--url", url)
        assert bad.returncode == 2, (url, bad.stderr)
        assert bad.stderr.count("\n") == 1, bad.stderr
        assert bad.stderr.startswith("sse-proxy health: --url: "), bad.stderr


def _through_proxies(url: str) -> dict[str, str]:
    """The environment of a container behind a corporate proxy: every proxy variable set,
    no NO_PROXY."""
    clean = {k: v for k, v in os.environ.items() if k.lower() != "no_proxy"}
    return {
        **clean,
        **dict.fromkeys(("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY"), url),
        **dict.fromkeys(("http_proxy", "https_proxy", "all_proxy"), url),
    }


def test_health_never_goes_through_a_forward_proxy() -> None:
    """With HTTP_PROXY (and HTTPS_PROXY, ALL_PROXY) set and no NO_PROXY, health asks the
    proxy's port itself: a live proxy is healthy and the real forward proxy (pproxy) saw
    nothing; a dead port is unhealthy, even when the proxy in the environment answers 200
    to everything (a corporate proxy's error page, or another service)."""
    from tests.support.peers import forward_proxy

    port, dead = free_port(), free_port()
    env = {"SSE_PROXY_UPSTREAM": "http://127.0.0.1:9", "SSE_PROXY_PORT": str(port)}
    with forward_proxy() as fp, ServeProcess(env=env) as serve:
        serve.wait_for("proxy.started")
        live = run("health", env={**_through_proxies(fp.url), **env})
        gone = run("health", "--url", f"http://127.0.0.1:{dead}", env=_through_proxies(fp.url))
        assert fp.tunnelled(f"127.0.0.1:{port}") == fp.tunnelled(f"127.0.0.1:{dead}") == 0
    assert live.returncode == 0, live.stderr
    assert live.stdout.startswith(f"http://127.0.0.1:{port}/_sse-proxy/health: 200 ok")
    assert gone.returncode == 1, gone.stdout
    assert "Connection refused" in gone.stderr, gone.stderr
    with _answers_everything() as answering:
        fooled = run("health", "--url", f"http://127.0.0.1:{dead}", env=_through_proxies(answering))
    assert fooled.returncode == 1, fooled.stdout


@contextlib.contextmanager
def _answers_everything() -> Iterator[str]:
    """An HTTP server that answers every request 200 ``{"status": "ok"}``: what a proxy
    in the environment may do for a health URL; its URL."""
    import http.server
    import threading

    class Ok(http.server.BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            body = b'{"status": "ok"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *_args: object) -> None:
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Ok)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(10)


def test_a_log_read_while_the_child_writes_loses_no_line() -> None:
    """ServeProcess reads its child's stderr file while the child writes to it: reading
    must not move the offset they share (a ``seek(0)`` did, and the child's next line then
    overwrote the start of the file: CI once saw the tail of ``proxy.started`` alone)."""
    import tempfile

    from tests.support.cli import read_shared

    n = 3000
    script = (
        "import sys\n"
        f"for i in range({n}):\n"
        '    sys.stderr.write(\'{"i": %d, "pad": "%s"}\\n\' % (i, \'x\' * 200))\n'
        "    sys.stderr.flush()\n"
    )
    with tempfile.TemporaryFile(mode="w+b") as log:
        proc = subprocess.Popen([sys.executable, "-c", script], stderr=log)
        reads = 0
        while proc.poll() is None or reads == 0:
            read_shared(log.fileno())
            reads += 1
        proc.wait(30)
        lines = read_shared(log.fileno()).decode().splitlines()
    assert [json.loads(line)["i"] for line in lines] == list(range(n)), f"{reads} reads"


@pytest.mark.parametrize(
    "args",
    [
        ("mock-upstream", "--port", "-1"),
        ("mock-upstream", "--port", "70000"),
        ("mock-upstream", "--port", "eighty"),
        ("replay", "--port", "70000", "x.ssrec"),
        ("replay", "--port", "-1", "x.ssrec"),
    ],
)
def test_a_port_out_of_range_is_one_line_and_exit_2(args: tuple[str, ...]) -> None:
    proc = run(*args)
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert "argument --port:" in proc.stderr
    assert "Traceback" not in proc.stderr
