"""The ``resume`` group: real small clients through `sse-proxy test-client --resume`, named
by what they did about a drop.

Each client (tests/tools/clients/) differs from the correct resumer in one thing; the drops
are the real mock upstream's, behind the real proxy, and the verdict is counted from the
requests the mock saw. Chromium's own EventSource must pass as the correct client does.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from sse_proxy.cli import main
from sse_proxy.tools.fixtures import MESSAGE, TOKENS
from sse_proxy.tools.mock_resume import Served
from sse_proxy.tools.testclient.harness import HarnessOptions, run_test_client
from sse_proxy.tools.testclient.resume import FAMILIES, ResumeSeen, diagnose_resume
from tests.tools.test_e2e_clients import Run, client
from tests.tools.test_e2e_clients import run_test_client as run_cli_test_client

BROWSER_CLIENTS = Path(__file__).parent / "clients" / "browser"


def _run(tmp_path: Path, name: str, *args: str) -> Run:
    return run_cli_test_client(tmp_path, client(name), "--resume", "--jobs", "2", *args)


def _one(run: Run) -> dict[str, Any]:
    (case,) = run.cases("resume")
    return case


@pytest.mark.parametrize(
    ("name", "outcome", "says"),
    [
        ("restart_without_cursor", "duplicated", "reconnected without Last-Event-ID"),
        ("never_reconnects", "no_resume", "silent truncation"),
        ("ignores_retry", "too_early", "before the retry delay in force (500 ms)"),
    ],
)
def test_a_wrong_resumer_is_named_by_what_it_did(
    tmp_path: Path, name: str, outcome: str, says: str
) -> None:
    run = _run(tmp_path, name, "--dialect", "text", "--only", "resume:drop", "--seed", "2")
    assert run.code == 1, run.stdout
    case = _one(run)
    assert case["group"] == "resume"
    assert case["outcome"] == outcome
    diagnosis = case["diagnosis"]
    assert diagnosis["family"] == FAMILIES[outcome]
    assert says in diagnosis["reason"]
    assert diagnosis["hint"]
    assert case["reproduce"].endswith(
        f"--resume --only resume:drop --seed 2 -- {' '.join(client(name))}"
    )
    assert "sse-proxy mock-upstream" in case["by_hand"]
    assert "--fault drop" in case["by_hand"]
    requests = case["requests"]
    assert requests[0]["cut_at_s"] is not None
    if outcome == "duplicated":
        assert requests[1]["cursor"] is None
        assert '"The quick brown fox' in diagnosis["reason"]
        assert f"{MESSAGE[:10]}" in case["output"][: len(MESSAGE)]
    if outcome == "no_resume":
        assert len(requests) == 1
    if outcome == "too_early":
        assert requests[1]["cursor"] == str(requests[0]["delivered"])
    assert f"FAIL: {outcome.replace('_', ' ')}" in run.stdout


def test_the_correct_resumer_passes_raw_sse_and_responses(tmp_path: Path) -> None:
    text = _run(
        tmp_path,
        "resumer",
        "--dialect",
        "text",
        "--only",
        "resume:drop_twice,resume:drop_id_nul,resume:drop_204",
    )
    assert text.code == 0, text.stdout
    assert text.outcomes("resume") == {"pass": 3}
    twice = next(c for c in text.cases("resume") if c["fault"] == "drop_twice")
    cursors = [r["cursor"] for r in twice["requests"]]
    assert cursors[0] is None
    assert cursors[1] == str(twice["requests"][0]["delivered"])
    assert cursors[-1] == str(len(TOKENS))  # the reconnect after the end: its 204
    assert "ok: stopped at the 204" in text.stdout
    other = tmp_path / "responses"
    other.mkdir()
    only = "resume:drop_twice,resume:drop_too_old"
    responses = _run(other, "resumer", "--dialect", "responses", "--only", only)
    assert responses.code == 0, responses.stdout
    assert responses.outcomes("resume") == {"pass": 2}
    twice = next(c for c in responses.cases("resume") if c["fault"] == "drop_twice")
    kinds = [r["cursor_kind"] for r in twice["requests"]]
    assert kinds == [None, "starting_after", "starting_after"]
    assert "ok: reported the refused resume (exit 1)" in responses.stdout


def test_gemini_interactions_resumed_by_event_id_or_restarted(tmp_path: Path) -> None:
    """The correct resumer sends the last event_id it had whole (``last_event_id``), and
    reports the refused resume; one that restarts without it is caught duplicating."""
    only = "resume:drop_twice,resume:drop_start,resume:drop_too_old"
    good = _run(tmp_path, "resumer", "--dialect", "gemini", "--only", only)
    assert good.code == 0, good.stdout
    assert good.outcomes("resume") == {"pass": 3}
    twice = next(c for c in good.cases("resume") if c["fault"] == "drop_twice")
    requests = twice["requests"]
    assert [r["cursor_kind"] for r in requests] == [None, "event_id", "event_id"]
    assert [r["cursor"] for r in requests[1:]] == [
        f"evt_{r['delivered']:06d}" for r in requests[:2]
    ]
    other = tmp_path / "restart"
    other.mkdir()
    bad = _run(other, "restart_without_cursor", "--dialect", "gemini", "--only", "resume:drop")
    assert bad.code == 1, bad.stdout
    case = _one(bad)
    assert case["outcome"] == "duplicated"
    assert "reconnected without last_event_id" in case["diagnosis"]["reason"]
    assert "streamGenerateContent?alt=sse (resume: /v1beta/interactions)" in bad.stdout
    assert case["requests"][1]["cursor"] is None


def test_chromium_s_own_event_source_resumes_exactly(tmp_path: Path) -> None:
    report = tmp_path / "report.json"
    options = HarnessOptions(
        command=(),
        dialect="text",
        browser="chromium",
        script=str(BROWSER_CLIENTS / "event_source_resume.mjs"),
        only=("resume:drop", "resume:drop_twice", "resume:drop_primed", "resume:drop_204"),
        resume=True,
        jobs=2,
        report=str(report),
    )
    out = tmp_path / "out.txt"
    with out.open("w", encoding="utf-8") as stream:
        code = run_test_client(options, out=stream)
    text = out.read_text("utf-8")
    assert code == 0, text
    assert "4 cases, 4 passed, 0 failed" in text
    # drop_primed: from the priming event, after the retry it set (500 ms). Under load
    # Chromium now and then loses the bytes that came just before the connection broke
    # (a Python resumer behind the same proxy does not): then it saw neither the id nor
    # the retry, and waits its own 3 s with no cursor.
    cases = {c["fault"]: c for c in json.loads(report.read_text("utf-8"))["cases"]}
    cut, again = cases["drop_primed"]["requests"][:2]
    if again["cursor"] is None:
        assert again["at_s"] - cut["cut_at_s"] > 2.0, cases["drop_primed"]
        assert cases["drop_primed"]["outcome"] == "info", cases["drop_primed"]
    else:
        assert again["cursor"] == "0", cases["drop_primed"]
        assert "Last-Event-ID 0" in text
    # drop_204: stopped at the cursor it resumed with, the last event sent before the cut
    # or (those lost in flight, as above) an earlier one
    stop = cases["drop_204"]["requests"]
    assert 0 < int(stop[1]["cursor"]) <= stop[0]["delivered"], cases["drop_204"]


@pytest.mark.parametrize(
    ("args", "says"),
    [
        (("--dialect", "openai", "--resume"), "the openai dialect has no stream its API resumes"),
        (("--dialect", "text", "--only", "resume"), "the resume group needs --resume"),
        (("--resume", "--dialect", "text", "--only", "resume:nap"), "unknown drop 'nap'"),
        (("--resume", "--dialect", "responses", "--only", "resume:drop_204"), "does not apply"),
        (("--resume", "--dialect", "responses", "--tools"), "drop --tools"),
    ],
)
def test_resume_usage_errors_are_one_line(
    args: tuple[str, ...], says: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["test-client", *args, "--", "true"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert says in lines[0]


# -- the verdicts, judged alone ---------------------------------------------------------------


def _served(at: float, cursor: str | None, status: int = 200, **more: Any) -> Served:
    return Served(
        at=at,
        method="GET",
        target="/v1/text",
        dialect="text",
        cursor=cursor,
        cursor_kind=None if cursor is None else "last_event_id",
        attempt=0,
        fault="drop",
        status=status,
        retry=0.5,
        **more,
    )


def _judge(*requests: Served, output: str = MESSAGE, kind: str = "drop") -> tuple[str, str]:
    outcome, diagnosis, _ = diagnose_resume(
        kind,
        dialect="text",
        seen=ResumeSeen(requests, 0.0),
        output=output,
        exit_code=0,
        hung=False,
        patience=5.0,
    )
    return outcome, "" if diagnosis is None else diagnosis.reason


def test_each_verdict_of_a_drop() -> None:
    cut = _served(0.0, None, delivered=10, cut_at=0.1)
    assert _judge(cut, _served(0.7, "10"), _served(1.5, str(len(TOKENS)), 204))[0] == "pass"
    outcome, reason = _judge(cut, _served(0.7, "11"), output=MESSAGE.replace(" brown", ""))
    assert outcome == "lost"
    assert "past event 10" in reason
    outcome, reason = _judge(cut, *(_served(0.7 + i / 10, "10") for i in range(4)))
    assert outcome == "storm"
    assert "4 reconnects for 1 drops" in reason
    # restarting without its cursor after every end, nothing tells it to stop: the storm is
    # the restarts', and what they show twice comes first
    restarts = (_served(0.7 * (i + 1), None) for i in range(4))
    outcome, reason = _judge(cut, *restarts, output=MESSAGE * 3)
    assert outcome == "duplicated"
    assert reason.endswith("; also storm")
    refused = _served(0.7, "10", 204)
    outcome, reason = _judge(cut, refused, _served(1.3, "10"), kind="drop_204")
    assert outcome == "looped"
    assert "a 204 means stop" in reason
    outcome, _ = _judge(cut, refused, output="".join(TOKENS[:10]), kind="drop_204")
    assert outcome == "pass"
    # a cursor before the last event it was sent, then the 204: that event never reached
    # it whole, and it printed what its cursor names (a note); printing less is its own
    early = _served(0.7, "9", 204)
    outcome, reason = _judge(cut, early, output="".join(TOKENS[:9]), kind="drop_204")
    assert outcome == "info"
    assert "its cursor at event 9, before event 10, the last one sent whole before the" in reason
    outcome, reason = _judge(cut, early, output="".join(TOKENS[:8]), kind="drop_204")
    assert outcome == "wrong"
    assert "with Last-Event-ID: 9, before event 10, the last one sent whole before" in reason
    assert _judge(cut, early, output="".join(TOKENS[:10]), kind="drop_204")[0] == "pass"
    # without its cursor, stopped by the 204: nothing came twice, but it would have
    restart = _served(0.7, None, 204)
    outcome, reason = _judge(cut, restart, output="".join(TOKENS[:10]), kind="drop_204")
    assert outcome == "info"
    assert "reconnected without Last-Event-ID and stopped at the 204" in reason


def test_a_responses_restart_is_named_by_its_own_cursor() -> None:
    cut = _served(0.0, None, delivered=28, cut_at=0.1)
    outcome, diagnosis, expected = diagnose_resume(
        "drop",
        dialect="responses",
        seen=ResumeSeen((cut, _served(0.7, None)), 0.0),
        output=MESSAGE[:85] + MESSAGE,
        exit_code=0,
        hung=False,
        patience=5.0,
    )
    assert outcome == "duplicated"
    assert diagnosis is not None
    assert "reconnected without starting_after" in diagnosis.reason
    assert expected == MESSAGE
