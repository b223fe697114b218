"""The ``stalls`` group: real small clients through `sse-proxy test-client`, named by what
they did about a fault in time.

Each client (tests/tools/clients/) differs from the correct one in one deadline. The
faults are the real chaos proxy's on the real mock upstream; ``--patience 3`` keeps each
case to seconds, and a case whose client ended early ends early.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from sse_proxy.tools import fixtures
from sse_proxy.tools.testclient.diagnose import Diagnosis
from sse_proxy.tools.testclient.stalls import FAMILIES, Timing, diagnose_stall, text_before
from tests.support.cli import run_cli
from tests.tools.test_e2e_clients import Run, client, run_test_client

PATIENCE = ("--patience", "3")


def _by_fault(run: Run) -> dict[str, dict[str, Any]]:
    return {str(c["fault"]): c for c in run.cases("stalls")}


def _reason(case: dict[str, Any]) -> str:
    return str(case["diagnosis"]["reason"])


def _family(case: dict[str, Any]) -> str:
    return str(case["diagnosis"]["family"])


def test_a_read_timeout_alone_hangs_on_a_stall_kept_alive_by_comments(tmp_path: Path) -> None:
    """A 1 s read timeout ends a silent stall in time, never one that comments keep busy,
    nor a drip; it stops at the terminal marker, so a linger passes."""
    run = run_test_client(tmp_path, client("read_timeout_only"), "--only", "stalls", *PATIENCE)
    assert run.code == 1, run.stdout
    cases = _by_fault(run)
    assert list(cases) == ["stall_keepalive", "stall_silent", "linger", "drip"]
    kept = cases["stall_keepalive"]
    assert kept["group"] == "stalls"
    assert kept["outcome"] == "hang"
    assert _family(kept) == FAMILIES["stall_keepalive"]
    assert _reason(kept).startswith("hang: the stall was kept alive by comments")
    assert "': keep-alive' comments every 0.5 s" in _reason(kept)
    assert "asyncio.timeout" in str(kept["diagnosis"]["hint"])
    for name in ("stall_silent", "linger"):
        assert cases[name]["outcome"] == "pass", cases[name]
        assert "diagnosis" not in cases[name]
    timing = cases["stall_silent"]["timing"]
    assert isinstance(timing, dict)
    assert 0.9 <= timing["into_fault_s"] < 3  # its 1 s read timeout, within the patience
    drip = cases["drip"]
    assert drip["outcome"] == "hang"  # --patience given: a drip must end within it too
    assert _family(drip) == FAMILIES["drip"]
    assert "hang: the stall was kept alive by comments" in run.stdout
    assert "time boundary (stall kept alive by comments)" in run.stdout


def test_pings_keep_an_anthropic_stall_alive_and_are_named_so(tmp_path: Path) -> None:
    run = run_test_client(
        tmp_path,
        client("read_timeout_only"),
        "--dialect",
        "anthropic",
        "--only",
        "stalls:stall_keepalive",
        *PATIENCE,
    )
    (case,) = run.cases("stalls")
    assert case["outcome"] == "hang"
    assert "the API's own ping events (event: ping)" in _reason(case)


def test_a_client_that_waits_for_the_close_hangs_on_a_linger(tmp_path: Path) -> None:
    run = run_test_client(tmp_path, client("waits_for_close"), "--only", "stalls:linger", *PATIENCE)
    assert run.code == 1
    (case,) = run.cases("stalls")
    assert case["outcome"] == "hang"
    assert _family(case) == FAMILIES["linger"]
    assert _reason(case).startswith(
        "hang: waits for the connection to close after the terminal marker"
    )
    assert "[DONE]" in _reason(case)
    assert "stop at the terminal marker" in str(case["diagnosis"]["hint"])


def test_a_whole_answer_deadline_and_stopping_at_the_marker_pass_every_stall(
    tmp_path: Path,
) -> None:
    """A 2.5 s deadline on the whole answer: each stall and the drip end in time, the linger
    at the marker; the cases end with the client, not with the fault (an hour long)."""
    run = run_test_client(tmp_path, client("whole_deadline"), "--only", "stalls", *PATIENCE)
    assert run.code == 0, run.stdout
    assert run.report["passed"] is True
    assert run.outcomes("stalls") == {"pass": 4}
    for case in run.cases("stalls"):
        assert "diagnosis" not in case
        assert float(case["duration_s"]) < 60
        assert case["exit_code"] == (0 if case["fault"] == "linger" else 1)
    assert "ok: whole answer at the terminal marker" in run.stdout


def test_exit_0_with_part_of_the_answer_is_a_silent_truncation(tmp_path: Path) -> None:
    run = run_test_client(
        tmp_path,
        client("timeout_is_the_end"),
        "--only",
        "stalls:stall_silent",
        *PATIENCE,
    )
    (case,) = run.cases("stalls")
    assert case["outcome"] == "silent"
    assert _family(case) == FAMILIES["truncated"]
    assert _reason(case).startswith("silent truncation after a stall")
    assert case["exit_code"] == 0


def test_without_patience_a_drip_is_information_not_a_failure(tmp_path: Path) -> None:
    run = run_test_client(tmp_path, client("read_timeout_only"), "--only", "stalls:drip")
    assert run.code == 0, run.stdout
    (case,) = run.cases("stalls")
    assert case["outcome"] == "info"
    assert _reason(case).startswith("information: no whole-answer deadline within 5 s")
    assert run.report["passed"] is True
    assert "info: no whole-answer deadline within 5 s" in run.stdout


@pytest.mark.parametrize("bad", ["nan", "-1", "0", "inf", "100000"])
def test_a_bad_patience_is_a_one_line_usage_error(bad: str) -> None:
    proc = run_cli("test-client", "--only", "stalls", "--patience", bad, "--", "true")
    assert proc.returncode == 2
    lines = proc.stderr.decode().strip().splitlines()
    assert len(lines) == 1, lines
    assert "patience" in lines[0] or "finite" in lines[0]


def test_only_and_skip_name_the_stalls_and_linger_needs_a_terminal_marker() -> None:
    proc = run_cli("test-client", "--only", "stalls:snooze", "--", "true")
    assert proc.returncode == 2
    assert b"unknown stall 'snooze'" in proc.stderr
    proc = run_cli("test-client", "--dialect", "text", "--only", "stalls:linger", "--", "true")
    assert proc.returncode == 2
    assert b"does not apply" in proc.stderr


# -- the verdicts, judged alone ---------------------------------------------------------------


def _judge(kind: str, **given: object) -> tuple[str, Diagnosis | None]:
    args: dict[str, Any] = {
        "dialect": "openai",
        "expected": fixtures.MESSAGE,
        "before": "The quick",
        "output": "The quick",
        "exit_code": None,
        "hung": True,
        "timing": Timing(began=0.5, ended=3.5, patience=3.0),
        "every": 0.5,
        "strict_drip": False,
        **given,
    }
    return diagnose_stall(kind, **args)


def test_each_verdict_of_a_stall() -> None:
    assert _judge("stall_silent", hung=False, exit_code=1) == ("pass", None)
    outcome, d = _judge("stall_silent")
    assert outcome == "hang"
    assert d is not None
    assert d.reason.startswith("hang: no deadline on a silent stall")
    outcome, d = _judge("stall_keepalive", hung=False, exit_code=0)
    assert outcome == "silent"
    outcome, d = _judge("drip")
    assert outcome == "info"
    assert _judge("drip", strict_drip=True)[0] == "hang"
    assert _judge("linger", hung=False, exit_code=0, output=fixtures.MESSAGE) == ("pass", None)
    outcome, d = _judge("linger", hung=False, exit_code=1)
    assert outcome == "crash"
    assert d is not None
    assert d.family == FAMILIES["linger"]


def test_the_text_before_a_stall_is_the_first_text_events() -> None:
    body = fixtures.clean_stream("openai")
    before = text_before(body, "openai", "stall_silent")
    assert fixtures.MESSAGE.startswith(before)
    assert 8 <= len(before) < len(fixtures.MESSAGE)
    assert text_before(body, "openai", "linger") == fixtures.MESSAGE
