"""`sse-proxy test-gateway -- CMD` end to end: real gateways as real processes between the
mock upstream and the harness's client, on loopback.

The controls (sse-proxy itself, nginx) pass every case they are given; a small gateway that
is unfaithful on purpose (tests/tools/gateways/unfaithful.py) is caught doing what LiteLLM
does (invented usage, a [DONE] after a cut stream, a usage chunk with a choice in it) and
holding deltas back. LiteLLM and Portkey themselves run in the gateway matrix only
(`python -m conformance.gateways`, docs/gateways.md).
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path
from typing import Any

import pytest

from sse_proxy.cli import main
from tests.support.cli import run_cli

GATEWAYS = "tests.tools.gateways"
PY = sys.executable


def _run(tmp_path: Path, *args: str, timeout: float = 120.0) -> tuple[int, str, dict[str, Any]]:
    report = tmp_path / "report.json"
    ran = run_cli("test-gateway", "--report", str(report), *args, timeout=timeout)
    out = ran.stdout.decode() + ran.stderr.decode()
    data = json.loads(report.read_text()) if report.is_file() else {}
    return ran.returncode, out, data


def _by_row(data: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {
        (f"faults:{c['fault']}" if c["fault"] else c["name"].split(" ")[0]): c
        for c in data["cases"]
    }


def test_sse_proxy_itself_passes_every_case_it_is_given(tmp_path: Path) -> None:
    """The control: the case reaches the upstream by its header, every ending and error
    comes through as the upstream sent it (a reset too), and each row passes."""
    code, out, data = _run(
        tmp_path,
        "--only",
        "baseline,crlf,faults,shapes:include_usage",
        "--pace-ms",
        "0",
        "--",
        PY,
        "-m",
        "sse_proxy",
        "serve",
        "--upstream",
        "{upstream}",
        "--port",
        "{port}",
    )
    assert code == 0, out
    assert data["case_key"] == "header"
    assert data["upstream_dialect"] == "openai"
    rows = _by_row(data)
    assert {c["outcome"] for c in data["cases"]} == {"pass"}
    assert rows["faults:reset"]["upstream"]["end"] == "transport"
    assert rows["faults:reset"]["gateway"]["end"] == "transport"
    assert rows["faults:error_event"]["gateway"]["errors"][0]["type"] == "server_error"
    assert rows["shapes:include_usage"]["gateway"]["usage"] == {"input": 12, "output": 121}
    assert "0 failed" in out


def test_nginx_passes_every_case_it_is_given(tmp_path: Path) -> None:
    """The other control, in the Anthropic dialect (its named events, its error event)."""
    assert shutil.which("nginx") or Path("/usr/sbin/nginx").exists(), (
        "nginx is missing: bash scripts/system-deps.sh installs it"
    )
    code, out, data = _run(
        tmp_path,
        "--dialect",
        "anthropic",
        "--only",
        "baseline,faults:error_event,faults:reset,shapes:thinking",
        "--",
        PY,
        "-m",
        f"{GATEWAYS}.nginx_gateway",
    )
    assert code == 0, out
    assert {c["outcome"] for c in data["cases"]} == {"pass"}
    rows = _by_row(data)
    assert rows["faults:error_event"]["gateway"]["errors"][0]["type"] == "overloaded_error"
    baseline = rows["baseline"]["delivery"]
    assert baseline["upstream_output_events"] == baseline["gateway_output_events"] > 100


def test_invented_usage_and_a_done_after_a_cut_stream_are_named(tmp_path: Path) -> None:
    """LiteLLM's failures, made by a gateway written to make them: with the case header
    dropped the case comes by the model name, and the report names each change."""
    code, out, data = _run(
        tmp_path,
        "--only",
        "baseline,faults:no_terminal,faults:reset",
        "--pace-ms",
        "0",
        "--junit",
        str(tmp_path / "junit.xml"),
        "--html",
        str(tmp_path / "report.html"),
        "--",
        PY,
        "-m",
        f"{GATEWAYS}.unfaithful",
        "--invent-usage",
        "--append-done",
        "--drop-case",
    )
    assert code == 1, out
    assert data["case_key"] == "model"
    rows = _by_row(data)
    assert rows["baseline"]["outcome"] == "pass"  # the upstream sent usage: nothing invented
    cut = rows["faults:no_terminal"]
    assert cut["outcome"] == "masked"
    assert cut["diagnosis"]["family"] == "ending (made a cut stream look whole)"
    assert "appended `data: [DONE]`" in cut["diagnosis"]["reason"]
    families = {f["family"]: f for f in cut["findings"]}
    assert "reported 9 input and" in families["usage (invented)"]["reason"]
    assert (
        '"choices": [{"index": 0, "delta": {}}]'
        in (families["shape (usage chunk choices)"]["evidence"])
    )
    assert rows["faults:reset"]["outcome"] == "masked"
    assert "sse-proxy test-gateway --dialect openai" in cut["reproduce"]
    assert "--only faults:no_terminal" in cut["reproduce"]
    assert "== ending (made a cut stream look whole) (masked)" in out
    junit = (tmp_path / "junit.xml").read_text()
    assert 'type="ending (made a cut stream look whole)"' in junit
    assert "fault=no_terminal" in (tmp_path / "report.html").read_text()


def test_deltas_held_back_are_a_delivery_finding_confirmed_on_a_rerun(tmp_path: Path) -> None:
    """A gateway that holds every event until the upstream ends, and passes neither the
    case header nor the model name on: the cases go one at a time, by their order."""
    code, out, data = _run(
        tmp_path,
        "--only",
        "baseline",
        "--",
        PY,
        "-m",
        f"{GATEWAYS}.unfaithful",
        "--hold",
        "--drop-case",
        "--fixed-model",
    )
    assert code == 1, out
    assert data["case_key"] == "order"
    (case,) = data["cases"]
    assert case["outcome"] == "held"
    assert case["diagnosis"]["family"] == "delivery (held back)"
    assert case["note"] == "held back on a rerun too"
    assert case["delivery"]["held_back_s"] > 0.25
    assert case["gateway"]["end"] == "whole"


def test_a_gateway_that_dies_or_never_listens_is_a_clear_error(tmp_path: Path) -> None:
    dies = run_cli(
        "test-gateway",
        "--",
        PY,
        "-c",
        "import sys; print('config error: no upstream', file=sys.stderr); sys.exit(3)",
    )
    assert dies.returncode == 2
    err = dies.stderr.decode()
    assert "exited with status 3 before it listened on port" in err
    assert "| config error: no upstream" in err
    assert "Traceback" not in err
    silent = run_cli(
        "test-gateway",
        "--ready-timeout",
        "1",
        "--",
        PY,
        "-c",
        "import time; print('starting'); time.sleep(30)",
    )
    assert silent.returncode == 2
    assert "did not listen on port" in silent.stderr.decode()
    assert "| starting" in silent.stderr.decode()


def test_a_gateway_that_never_calls_the_upstream_says_what_it_answered(tmp_path: Path) -> None:
    ran = run_cli("test-gateway", "--", PY, "-m", "http.server", "--bind", "127.0.0.1", "{port}")
    assert ran.returncode == 2
    err = ran.stderr.decode()
    assert "the gateway never called the upstream" in err
    assert "HTTP 501" in err


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ((), "test-gateway needs the gateway's command"),
        (("--", "no-such-gateway-command"), "command not found"),
        (("--header", "no colon", "--", PY), "--header: expected 'Name: value'"),
        (("--path", "v1/x", "--", PY), "--path must start with /"),
        (("--dialect", "gemini", "--", PY), "--dialect must be one of openai, anthropic"),
    ],
)
def test_usage_errors_are_one_line(
    args: tuple[str, ...], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["test-gateway", *args]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1
