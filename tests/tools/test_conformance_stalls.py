"""The matrix's time boundary (docs/conformance.md, made by conformance/run.py --stalls):
every client in it twice, and one row that still holds when run again.

httpx-sse (the test extra's) is run as the matrix runs it, as it comes: its published
outcomes must be what it does now (a regression, or a page to regenerate).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conformance.page import published_stalls, stall_outcome, stalls_section, update_stalls
from conformance.run import BY_NAME, CLIENTS, HERE, PAGE, stalls_command_of
from tests.support.cli import cli_env

FAULTS = ("stall_keepalive", "stall_silent", "linger", "drip")


def test_every_client_is_in_the_section_as_it_comes_and_with_its_setting() -> None:
    page = PAGE.read_text("utf-8")
    for client in CLIENTS:
        runs = published_stalls(page, client.name)
        assert len(runs) == 2, client.name
        assert client.fix, f"{client.name}: its timeout setting (or its lack) is named"
        for run in runs:
            assert set(run) == set(FAULTS)
            assert set(run.values()) <= {"pass", "hang", "silent", "crash", "info", "n/a"}
    # what the time boundary is about: nobody's defaults survive a stall kept alive by
    # comments, short of crashing on the comment
    defaults = [published_stalls(page, c.name)[0]["stall_keepalive"] for c in CLIENTS]
    assert "hang" in defaults


def test_the_section_is_rewritten_in_place() -> None:
    page = PAGE.read_text("utf-8")
    start = page.index("<!-- stalls")
    end = page.index("<!-- /stalls -->") + len("<!-- /stalls -->")
    assert update_stalls(page, page[start:end]) == page
    assert update_stalls(page, "<!-- stalls: x --><!-- /stalls -->") != page
    without = page[:start] + page[end:]
    again = update_stalls(without, page[start:end])
    assert again.index("<!-- stalls") < again.index("## Each client's failures")


def test_a_pass_by_crashing_on_the_comment_says_so(tmp_path: Path) -> None:
    report = {
        "cases": [
            {"group": "stalls", "fault": f, "outcome": "pass", "timing": {"into_fault_s": 0.5}}
            for f in FAULTS
        ]
    }
    client = BY_NAME["google-genai-python"]
    section = stalls_section(
        [client],
        {client.name: report},
        {},
        {},
        tmp_path,
        6,
        1.5,
        {client.name: {"keepalive": "crash"}},
    )
    assert "✓ 0.5 s, a crash on the comment" in section
    assert stall_outcome("✓ 0.5 s, a crash on the comment") == "pass"


def test_httpx_sse_does_as_published(tmp_path: Path) -> None:
    client = BY_NAME["httpx-sse"]
    report = tmp_path / "stalls.json"
    command = stalls_command_of(client, report, fixed=False)
    at = command.index("--") + 1
    command[at] = sys.executable  # the test extra's httpx-sse, not conformance/.venv's
    env = cli_env()
    env.pop("CONFORMANCE_TIMEOUT", None)
    subprocess.run(command, cwd=HERE, env=env, capture_output=True, timeout=180, check=False)
    got = {c["fault"]: c["outcome"] for c in json.loads(report.read_text())["cases"]}
    published = published_stalls(PAGE.read_text("utf-8"), client.name)[0]
    assert {f: "info" if o == "hang" and f == "drip" else o for f, o in got.items()} == published
