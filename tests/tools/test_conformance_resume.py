"""The matrix's connection boundary (docs/conformance.md, made by conformance/run.py
--resume): every client written to resume is in it, the ones that must pass do, and one
failing row still fails as published when run again.

fetch-event-source (from conformance/node_modules, `npm ci` by scripts/js-deps.sh) is run
as the matrix runs it, with its 204 fix, on two drops: its published outcomes (lost: it
takes an id before its event arrived; too early: it takes `retry: 10ms`) must be what it
does now (a regression of the harness or the library, or a page to regenerate).
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path
from typing import Any

from conformance.page import (
    RESUME_DROPS,
    published_resume,
    resume_outcome,
    resume_section,
    update_resume,
)
from conformance.run import BY_NAME, HERE, PAGE, RESUMER_BY_NAME, RESUMERS, resume_command_of
from sse_proxy.tools.testclient.resume import NOTES
from tests.support.cli import cli_env

OUTCOMES = {"pass", "info", "duplicated", "lost", "no_resume", "too_early", "storm", "looped"}
OUTCOMES |= {"hang", "silent", "wrong", "crash"}


def _runs(name: str) -> list[dict[str, str]]:
    resumer = RESUMER_BY_NAME[name]
    return published_resume(PAGE.read_text("utf-8"), resumer.client, resumer.how)


def test_every_resumer_is_in_the_section_on_every_drop_of_its_dialect() -> None:
    for resumer in RESUMERS:
        runs = _runs(resumer.name)
        assert len(runs) == (2 if resumer.fix else 1), resumer.name
        for run in runs:
            assert tuple(run) == RESUME_DROPS[resumer.dialect], resumer.name
            assert set(run.values()) <= OUTCOMES, run


def test_the_browsers_and_a_hand_written_resumer_resume_exactly() -> None:
    """What the connection boundary asks of a correct client, on the published page: the
    browsers' EventSource resume every raw SSE drop by themselves, a loop around the
    openai SDKs' raw retrieve with starting_after every Responses drop, and one around
    google-genai's interactions.get with last_event_id (Python and Node) every Interactions
    drop."""
    for name in (
        "browser-eventsource-chromium",
        "browser-eventsource-firefox",
        "openai-python-retrieve",
        "openai-node-retrieve",
        "google-genai-python-interactions",
        "google-genai-node-interactions",
    ):
        assert set(_runs(name)[0].values()) == {"pass"}, name
    # the helpers ask for the whole stream again: exact, but sent twice (information)
    assert _runs("openai-python-helper")[0]["drop"] == "info"
    # and a library without a stop signal is caught looping after the 204
    assert _runs("fetch-event-source")[0]["drop_204"] == "looped"


def test_the_section_is_rewritten_in_place(tmp_path: Path) -> None:
    page = PAGE.read_text("utf-8")
    start = page.index("<!-- resume")
    end = page.index("<!-- /resume -->") + len("<!-- /resume -->")
    assert update_resume(page, page[start:end]) == page
    without = page[:start] + page[end:]
    again = update_resume(without, page[start:end])
    assert again.index("<!-- resume") < again.index("## Each client's failures")
    report = {"cases": [{"group": "resume", "fault": "drop", "outcome": "info"}]}
    resumer = RESUMER_BY_NAME["openai-node-helper"]
    section = resume_section(RESUMERS, BY_NAME, {resumer.name: report}, {}, {}, tmp_path)
    line = next(ln for ln in section.splitlines() if resumer.how in ln)
    assert "| ✓ replayed | · | · | · |" in line
    lost: dict[str, Any] = {"group": "resume", "fault": "drop", "outcome": "info"}
    lost["diagnosis"] = {"family": NOTES["in_flight"]}  # the verdict's, as the page reads it
    in_flight = {"cases": [lost]}
    section = resume_section(RESUMERS, BY_NAME, {resumer.name: in_flight}, {}, {}, tmp_path)
    line = next(ln for ln in section.splitlines() if resumer.how in ln)
    assert "| ✓ in flight | · | · | · |" in line
    assert resume_outcome("✓ in flight") == "info"


def test_fetch_event_source_fails_as_published(tmp_path: Path) -> None:
    assert (HERE / "node_modules" / "@microsoft" / "fetch-event-source").is_dir(), (
        "run scripts/js-deps.sh"
    )
    resumer = RESUMER_BY_NAME["fetch-event-source"]
    report = tmp_path / "resume.json"
    command = resume_command_of(resumer, report)
    at = command.index("resume", command.index("--only"))
    command[at] = "resume:drop,resume:drop_retry_invalid"
    env = cli_env(CONFORMANCE_RESUME_FIX="1")
    subprocess.run(command, cwd=HERE, env=env, capture_output=True, timeout=180, check=False)
    got = {c["fault"]: c["outcome"] for c in json.loads(report.read_text())["cases"]}
    published = _runs(resumer.name)[1]
    assert got == {k: published[k] for k in got}
    assert got == {"drop": "lost", "drop_retry_invalid": "too_early"}
