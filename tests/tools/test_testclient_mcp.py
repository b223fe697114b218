"""`test-client --dialect mcp`: real MCP clients against the mock's MCP server behind the
chaos proxy, each case judged in MCP's terms.

The subjects: the official Python SDK (the reference), a correct raw client on the
standard library (fast enough to run every byte and rewrite group), and that raw client
with one bug each (a per-read decoder, one content item, the result twice, exit 0 on a
broken call). Few seeds and groups: each case is a real process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from sse_proxy.errors import UsageError
from sse_proxy.tools.fixtures import mcp
from sse_proxy.tools.testclient.fixture import load_fixture
from sse_proxy.tools.testclient.harness import HarnessOptions, run_test_client
from sse_proxy.tools.testclient.run import client_env
from tests.support.recordings import CLIENTS

RAW = (sys.executable, "-m", f"{CLIENTS}.mcp_raw")
SDK = (sys.executable, "-m", f"{CLIENTS}.mcp_sdk")
GROUPS = (
    "baseline",
    "bytewise",
    "utf8+crlf",
    "boundaries+cr",
    "random+mixed_newlines+keepalive",
    "coalesce+bom+nospace",
    "dataless+blank_lines",
)
"""Every byte group, and every rewrite, in pairs."""


def _run(
    tmp_path: Path, command: tuple[str, ...], **options: Any
) -> tuple[int, dict[str, Any], str]:
    report = tmp_path / "report.json"
    out = tmp_path / "out.txt"
    opts = HarnessOptions(command=command, dialect="mcp", report=str(report), jobs=2, **options)
    with out.open("w", encoding="utf-8") as stream:
        code = run_test_client(opts, out=stream)
    return code, json.loads(report.read_text("utf-8")), out.read_text("utf-8")


def _by_name(report: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {c["name"]: c for c in report["cases"]}


def test_a_correct_client_passes_every_byte_rewrite_cut_and_fault_group(tmp_path: Path) -> None:
    """Every re-chunking strategy and every rewrite (in pairs, to keep it short), two cuts
    and the four faults."""
    code, report, text = _run(tmp_path, RAW, only=(*GROUPS, "faults", "cut:120-121"), seeds=1)
    assert code == 0, text
    cases = report["cases"]
    assert len(cases) == len(GROUPS) + 4 + 2
    assert {c["outcome"] for c in cases} == {"pass"}
    want = {
        "calls": 1,
        "ids": [1],
        "progress_asked": True,
        "progress_sent": 4,
        "revision": "2025-11-25",
    }
    assert all(c["mcp"] == {**want, "primed": c["group"] != "faults"} for c in cases)
    assert report["delivery"]["read_apart"] == report["delivery"]["cuts"] > 300
    assert (
        "mcp: the tool was called in 13 of 13 cases (revision 2025-11-25); progress was "
        "asked for in 13"
    ) in text
    assert not {"shapes", "tokens"} & set(report["summary"])


@pytest.mark.parametrize(
    ("bug", "only", "family"),
    [
        ("decode-each-read", ("utf8",), "character boundary"),
        ("first-item", ("baseline",), "mcp (one content item)"),
        ("twice", ("baseline",), "mcp (duplicate result)"),
        (
            "exit-zero",
            ("faults:no_terminal", "faults:error_event", "faults:reset"),
            "silent truncation",
        ),
    ],
)
def test_each_buggy_client_is_caught_and_named(
    tmp_path: Path, bug: str, only: tuple[str, ...], family: str
) -> None:
    code, report, text = _run(tmp_path, (*RAW, "--bug", bug), only=only, seeds=1)
    assert code == 1, text
    for case in report["cases"]:
        assert case["outcome"] != "pass", (case["name"], text)
        assert case["diagnosis"]["family"] == family, (case["name"], text)
        assert case["mcp"]["calls"] == 1
    assert f"== {family}" in text


def test_a_client_that_hangs_on_a_broken_stream_is_told_so_in_mcp_terms(
    tmp_path: Path,
) -> None:
    """The stream ends without the response and without ids: nothing to resume, so the
    call must fail; the diagnosis says so, and the hint names the SDKs' settings."""
    command = (*RAW, "--bug", "hangs-on-broken-stream")
    code, report, text = _run(tmp_path, command, only=("faults:no_terminal",), timeout=2.0)
    assert code == 1, text
    (case,) = report["cases"]
    assert case["outcome"] == "hang", text
    diagnosis = case["diagnosis"]
    assert diagnosis["family"] == "mcp (hang on a broken stream)"
    assert "no JSON-RPC response (no_terminal)" in diagnosis["reason"]
    assert "nothing to resume from" in diagnosis["reason"]
    assert "python-sdk#3441" in text
    assert "parser (hang)" not in text


@pytest.mark.parametrize("runtime", ["python", "node"])
def test_a_client_that_parses_the_priming_events_empty_data_is_named(
    tmp_path: Path, runtime: str
) -> None:
    """JSON.parse("") on the event 2025-11-25 servers open a stream with: a crash, named."""
    command = (
        (*RAW, "--bug", "parse-empty")
        if runtime == "python"
        else ("node", str(Path(__file__).parent / "clients" / "mcp_parse_all.mjs"))
    )
    code, report, text = _run(tmp_path, command, only=("baseline",), seeds=1)
    assert code == 1, text
    (case,) = report["cases"]
    diagnosis = case["diagnosis"]
    assert (case["outcome"], diagnosis["family"]) == ("crash", "mcp (priming event)")
    assert "id: s1-0\\nretry: 500\\ndata:\\n\\n" in diagnosis["reason"]
    for issue in ("typescript-sdk#1233", "python-sdk#1719", "go-sdk#686"):
        assert issue in diagnosis["reason"]
    assert "empty" in diagnosis["hint"]
    assert case["mcp"]["primed"] is True
    assert "mcp (priming event)" in text


@pytest.mark.parametrize(
    ("bug", "outcome", "calls"),
    [(None, "pass", 2), ("reissue-same-id", "wrong", 2)],
)
def test_a_modern_client_that_re_issues_a_broken_call_needs_a_new_id(
    tmp_path: Path, bug: str | None, outcome: str, calls: int
) -> None:
    """2026-07-28: a broken stream loses the call; calling again is right under a new id."""
    command = (*RAW, "--revision", "2026-07-28", "--reissue", *(("--bug", bug) if bug else ()))
    code, report, text = _run(
        tmp_path, command, only=("faults:reset", "faults:unterminated"), seeds=1
    )
    assert code == (0 if outcome == "pass" else 1), text
    for case in report["cases"]:
        assert (case["outcome"], case["mcp"]["calls"]) == (outcome, calls), text
        assert case["mcp"]["revision"] == "2026-07-28"
        assert case["mcp"]["primed"] is False
        if bug:
            assert case["diagnosis"]["family"] == "mcp (re-issued under the same id)"
    assert "more than once in 2 (re-issued after a broken stream)" in text


def test_a_client_that_never_calls_the_tool_is_told_so(tmp_path: Path) -> None:
    code, report, text = _run(tmp_path, ("sh", "-c", "echo hello"), only=("baseline",), seeds=1)
    assert code == 1, text
    (case,) = report["cases"]
    assert case["diagnosis"]["family"] == "mcp (no tool call)"
    assert case["mcp"] == {
        "calls": 0,
        "ids": [],
        "progress_asked": False,
        "progress_sent": 0,
        "revision": None,
        "primed": False,
    }
    assert "SSE_PROXY_MCP_TOOL" in case["diagnosis"]["reason"]


def test_the_official_python_sdk_passes(tmp_path: Path) -> None:
    """The reference client: the SDK's probing client (server/discover, initialize, GET,
    tools/call with a progress callback, tools/list, DELETE), through cuts and rewrites,
    and reporting each broken call as a failure."""
    code, report, text = _run(
        tmp_path,
        SDK,
        only=("utf8+crlf", "faults:unterminated", "faults:reset"),
        seeds=1,
        timeout=30.0,
    )
    assert code == 0, text
    assert [c["outcome"] for c in report["cases"]] == ["pass"] * 3
    chaos = _by_name(report)["utf8+crlf seed=1"]
    assert chaos["mcp"]["progress_sent"] == 4
    assert chaos["delivery"]["read_apart"] == chaos["delivery"]["cuts"] > 100


def test_the_client_is_told_where_to_connect_and_what_to_call() -> None:
    fixture = load_fixture("mcp", None)
    env = client_env("http://127.0.0.1:9", fixture, "baseline")
    assert env["SSE_PROXY_STREAM_URL"] == "http://127.0.0.1:9/mcp"
    assert (env["SSE_PROXY_MCP_TOOL"], json.loads(env["SSE_PROXY_MCP_ARGS"])) == (
        mcp.TOOL,
        mcp.TOOL_ARGS,
    )
    assert json.loads(env["SSE_PROXY_STREAM_BODY"])["method"] == "tools/call"
    assert "SSE_PROXY_MCP_TOOL" not in client_env("http://x", load_fixture("openai", None), "c")


@pytest.mark.parametrize(
    "options",
    [
        {"fixture": "capture.sse"},
        {"tools": True},
        {"only": ("shapes",)},
        {"only": ("tokens:chars",)},
    ],
)
def test_what_does_not_apply_to_mcp_is_a_usage_error(options: dict[str, Any]) -> None:
    with pytest.raises(UsageError):
        run_test_client(HarnessOptions(command=("true",), dialect="mcp", **options))
