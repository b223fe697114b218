"""The ``resume`` group on MCP clients: `test-client --dialect mcp --resume`, real clients.

The subjects are the raw MCP client (tests/tools/clients/mcp_raw.py): with ``--resume`` it
resumes a broken tool call's stream as its revision says (2025-11-25: GET with
Last-Event-ID after the retry delay; 2026-07-28: the call re-issued under a new id), and
each ``--bug`` changes one thing. The drops are the real mock MCP server's, behind the real
proxy; the verdicts are counted from the requests the server saw. Few kinds per run, short
patience: each case is a real process.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest

from sse_proxy.tools.fixtures import MESSAGE, mcp
from sse_proxy.tools.mock_resume import Served
from sse_proxy.tools.testclient.harness import HarnessOptions, run_test_client
from sse_proxy.tools.testclient.hints import hint_for
from sse_proxy.tools.testclient.mcp_resume import FAMILIES, diagnose_mcp_resume
from sse_proxy.tools.testclient.resume import ResumeSeen
from tests.support.recordings import CLIENTS

RAW = (sys.executable, "-m", f"{CLIENTS}.mcp_raw")
LEGACY_KINDS = ("drop", "drop_twice", "drop_start", "drop_primed", "drop_retry_invalid")


def _run(
    tmp_path: Path, command: tuple[str, ...], kinds: tuple[str, ...]
) -> tuple[int, dict[str, dict[str, Any]], str]:
    tmp_path.mkdir(exist_ok=True)
    report = tmp_path / "report.json"
    out = tmp_path / "out.txt"
    opts = HarnessOptions(
        command=command,
        dialect="mcp",
        report=str(report),
        jobs=2,
        resume=True,
        only=tuple(f"resume:{k}" for k in kinds),
        patience=2.0,
    )
    with out.open("w", encoding="utf-8") as stream:
        code = run_test_client(opts, out=stream)
    cases = json.loads(report.read_text("utf-8"))["cases"]
    return code, {c["fault"]: c for c in cases}, out.read_text("utf-8")


def test_a_correct_client_resumes_in_2025_11_25_and_reissues_in_2026_07_28(
    tmp_path: Path,
) -> None:
    code, cases, text = _run(tmp_path / "legacy", (*RAW, "--resume"), LEGACY_KINDS)
    assert code == 0, text
    assert {c["outcome"] for c in cases.values()} == {"pass"}, text
    for kind in ("drop", "drop_twice", "drop_primed", "drop_retry_invalid"):
        requests = cases[kind]["requests"]
        assert (requests[0]["method"], requests[0]["cut_at_s"] is not None) == ("POST", True)
        gets = [r for r in requests[1:] if r["method"] == "GET"]
        assert gets, kind
        assert all(g["cursor"].startswith("s1-") for g in gets), kind
        assert gets[0]["at_s"] - requests[0]["cut_at_s"] >= 0.75 * 0.5  # the retry, waited
    assert cases["drop_primed"]["requests"][1]["cursor"] == "s1-0"  # the priming event's id
    assert len(cases["drop_twice"]["requests"]) == 3
    assert cases["drop_start"]["mcp"]["ids"] == [1, 2]  # no id: re-issued
    assert "ok: resumed with Last-Event-ID" in text
    assert "ok: re-issued under a new id" in text

    code, cases, text = _run(
        tmp_path / "modern", (*RAW, "--resume", "--revision", "2026-07-28"), LEGACY_KINDS
    )
    assert code == 0, text
    for kind in ("drop", "drop_twice", "drop_start"):
        assert cases[kind]["outcome"] == "pass", text
        assert all(r["method"] == "POST" for r in cases[kind]["requests"])
        ids = cases[kind]["mcp"]["ids"]
        assert len(set(ids)) == len(ids) > 1  # re-issued, each time under a new id
    assert cases["drop_twice"]["mcp"]["calls"] == 3
    assert cases["drop_primed"]["outcome"] == "not_applicable"
    assert "2026-07-28 has no priming event and no retry" in text


def test_a_client_that_drops_last_event_id_on_its_second_reconnect_is_caught(
    tmp_path: Path,
) -> None:
    """typescript-sdk#2499: the resumed stream drops before a new id, and the next GET
    carries no Last-Event-ID."""
    command = (*RAW, "--resume", "--bug", "drop-cursor-second-reconnect")
    code, cases, text = _run(tmp_path, command, ("drop", "drop_twice"))
    assert code == 1, text
    assert cases["drop"]["outcome"] == "pass"  # one reconnect: the cursor was there
    case = cases["drop_twice"]
    assert case["outcome"] == "no_resume"
    diagnosis = case["diagnosis"]
    assert diagnosis["family"] == FAMILIES["cursor_lost"]
    reason = diagnosis["reason"]
    assert reason.startswith("Last-Event-ID lost on the second reconnect")
    assert "typescript-sdk#2499" in reason
    first, resumed, bare = case["requests"]
    assert (resumed["method"], resumed["cursor"], resumed["cut_at_s"] is not None) == (
        "GET",
        first and f"s1-{first['delivered']}",
        True,
    )
    assert (bare["method"], bare["cursor"], bare["status"]) == ("GET", None, 405)
    assert f"its cursor was still {resumed['cursor']}" in reason
    assert "#2499" in (hint_for(FAMILIES["cursor_lost"], "javascript") or "")
    assert "== mcp (Last-Event-ID lost on a reconnect)" in text
    assert "fix (python):" in text


@pytest.mark.parametrize(
    ("args", "outcome", "family", "says"),
    [
        (("--resume", "--bug", "ignores-retry"), "too_early", "too_early", "(500 ms)"),
        (("--resume", "--bug", "reconnect-loop"), "storm", "storm", "for 1 drop (GET s1-"),
        ((), "no_resume", "no_resume", "instead of reconnecting with Last-Event-ID: s1-"),
        (("--revision", "2026-07-28"), "no_resume", "no_reissue", "instead of calling again"),
        (
            ("--resume", "--revision", "2026-07-28", "--bug", "reissue-same-id"),
            "wrong",
            "same_id",
            "under the request id it already had (1)",
        ),
    ],
    ids=["ignores-retry", "reconnect-loop", "no-resume", "no-reissue", "same-id"],
)
def test_each_wrong_resumer_is_named(
    tmp_path: Path, args: tuple[str, ...], outcome: str, family: str, says: str
) -> None:
    code, cases, text = _run(tmp_path, (*RAW, *args), ("drop",))
    assert code == 1, text
    case = cases["drop"]
    assert case["outcome"] == outcome, text
    assert case["diagnosis"]["family"] == FAMILIES[family]
    assert says in case["diagnosis"]["reason"]
    assert hint_for(FAMILIES[family], "python")


def _served(method: str, at: float, **fields: Any) -> Served:
    base: dict[str, Any] = {
        "target": "/mcp",
        "dialect": "mcp",
        "cursor": None,
        "cursor_kind": None,
        "attempt": 0,
        "fault": "drop",
    }
    if fields.get("cursor") is not None:
        base["cursor_kind"] = "last_event_id"
    return Served(at=at, method=method, **{**base, **fields})


LEGACY_CALL = (mcp.McpCall(id=1, revision="2025-11-25"),)


def _judge(requests: list[Served], **run: Any) -> tuple[str, Any]:
    outcome, diagnosis = diagnose_mcp_resume(
        "drop",
        seen=ResumeSeen(tuple(requests), 0.0),
        calls=run.pop("calls", LEGACY_CALL),
        expected=MESSAGE,
        output=run.pop("output", MESSAGE),
        exit_code=run.pop("exit_code", 0),
        hung=run.pop("hung", False),
        patience=2.0,
    )
    return outcome, diagnosis


def test_the_verdicts_read_the_log() -> None:
    """A resume past the cursor, a loop of reconnects, a re-issue where a resume was due."""
    cut = _served("POST", 0.1, stream="s1", delivered=4, cut_at=0.2, retry=0.5, request_id=1)

    outcome, diagnosis = _judge([cut, _served("GET", 0.8, cursor="s1-5", stream="s1")])
    assert (outcome, diagnosis.family) == ("lost", FAMILIES["lost"])
    assert "where the last event it received whole was s1-4" in diagnosis.reason

    loop = [cut, *(_served("GET", 0.8 + i, cursor="s1-4", stream="s1") for i in range(3))]
    outcome, diagnosis = _judge(loop)
    assert (outcome, diagnosis.family) == ("storm", FAMILIES["storm"])

    again = _served("POST", 0.3, request_id=2)
    outcome, diagnosis = _judge([cut, again], calls=(*LEGACY_CALL, mcp.McpCall(id=2)))
    assert (outcome, diagnosis.family) == ("duplicated", FAMILIES["reissued"])
    assert "the tool ran twice" in diagnosis.reason

    outcome, diagnosis = _judge([cut], output=MESSAGE[:40], hung=True)
    assert (outcome, diagnosis.family) == ("no_resume", FAMILIES["no_resume"])
    assert "a hang" in diagnosis.reason

    good = _served("GET", 0.75, cursor="s1-4", stream="s1")
    assert _judge([cut, good]) == ("pass", None)
    outcome, diagnosis = _judge([cut, good], output=MESSAGE + "\n" + MESSAGE)
    assert (outcome, diagnosis.family) == ("duplicated", FAMILIES["duplicated"])


def test_the_official_python_sdk_resumes_by_itself(tmp_path: Path) -> None:
    """``mcp`` 2.x: GET with Last-Event-ID after the stream's retry, the cursor carried over
    the second drop; a stream cut before any id is an error (McpError -32000), reported.
    Its own GET stream (405, tried twice) is no reconnect."""
    sdk = (sys.executable, "-m", f"{CLIENTS}.mcp_sdk")
    code, cases, text = _run(tmp_path, sdk, ("drop", "drop_twice", "drop_start"))
    assert code == 0, text
    assert {c["outcome"] for c in cases.values()} == {"pass"}, text
    gets = [r for r in cases["drop_twice"]["requests"] if r["cursor"] is not None]
    assert [g["cursor"] for g in gets] == [gets[0]["cursor"]] * 2
    assert cases["drop_start"]["exit_code"] == 1
    assert "ok: reported the lost call (exit 1)" in text


def test_every_verdict_has_a_fix_in_both_languages() -> None:
    for family in FAMILIES.values():
        for runtime in ("javascript", "python"):
            assert hint_for(family, runtime), (family, runtime)
