"""The matrix's MCP section (docs/conformance.md, made by conformance/run.py --mcp): every
MCP row in it, the section rewritten in place, and one row that still holds when run again.

The official Python SDK's client (`mcp` 2.3.0, the test extra's, the pin of
conformance/requirements-mcp.txt) is run as the matrix runs it, on two cases: its verdicts
must be the page's (a regression, or a page to regenerate).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from conformance.page import (
    RESUME_DROPS,
    mcp_resume_verdicts,
    mcp_section,
    published,
    published_mcp_resume,
    update_mcp,
)
from conformance.run import BY_NAME, HERE, MCP_CLIENTS, PAGE, VENVS, words_of
from sse_proxy.tools.testclient.harness import HarnessOptions, run_test_client

GROUPS = ("baseline", "faults:no_terminal")
"""A clean call, and one whose stream ends without the response (two cases, in parallel)."""


def _section(page: str) -> str:
    start = page.index("<!-- mcp:")
    return page[start : page.index("<!-- /mcp -->", start) + len("<!-- /mcp -->")]


def test_every_mcp_row_is_published_or_says_why_not() -> None:
    page = PAGE.read_text("utf-8")
    section = _section(page)
    for client in MCP_CLIENTS:
        assert client.dialect == "mcp", client.name
        assert client.revision, client.name
        if client.pending:
            assert client.name in section
            assert "Not run yet" in section
            assert published(page, client.name) == {}
            continue
        verdicts = published(page, client.name)
        assert verdicts.get("baseline") == "pass", client.name
        assert f"### {client.name}" in section
    # each SDK is in the matrix in both revisions where it speaks them
    revisions = {(c.package, c.venv, c.revision) for c in MCP_CLIENTS}
    assert ("mcp", ".venv-mcp", "2026-07-28") in revisions
    assert ("@modelcontextprotocol/client", ".venv", "2026-07-28") in revisions


def test_the_mcp_rows_are_apart_from_the_llm_tables() -> None:
    page = PAGE.read_text("utf-8")
    before = page[: page.index("<!-- mcp:")]
    for client in MCP_CLIENTS:
        assert f"](#{client.name})" not in before, client.name


def test_the_section_is_rewritten_in_place(tmp_path: Path) -> None:
    page = PAGE.read_text("utf-8")
    section = _section(page)
    assert update_mcp(page, section) == page
    without = page.replace(section, "")
    again = update_mcp(without, section)
    assert again.index("<!-- mcp:") < again.index("## The verdicts as data")
    client = BY_NAME["mcp-python-2025-11-25"]
    report = {"summary": {"baseline": {"pass": 1}, "faults": {"hang": 1}}, "cases": []}
    made = mcp_section([client], {client.name: report}, {}, {}, {}, tmp_path, 6, 1.5)
    assert made.startswith("<!-- mcp:")
    assert made.endswith("<!-- /mcp -->")
    assert "| `faults` | **hang** |" in made
    assert published(update_mcp(page, made), client.name) == {"baseline": "pass", "faults": "hang"}


def test_the_drops_get_a_column_each_and_their_verdicts_as_data(tmp_path: Path) -> None:
    """An MCP row's resume run: a cell per drop (n/a for one its revision lacks), each
    failure with its diagnosis, and the outcomes as data that ``--check`` reads back."""
    client = BY_NAME["mcp-sdk-node-2025-11-25"]
    report = {"summary": {"baseline": {"pass": 1}}, "cases": []}
    outcomes = dict.fromkeys(RESUME_DROPS["mcp"], "pass")
    outcomes.update(drop_twice="no_resume", drop_primed="not_applicable")
    family = "mcp (Last-Event-ID lost on a reconnect)"
    cases = [
        {
            "group": "resume",
            "fault": drop,
            "outcome": outcome,
            "diagnosis": {"family": family, "reason": "the second GET had no Last-Event-ID"}
            if outcome == "no_resume"
            else None,
            "reproduce": "sse-proxy test-client --only resume:drop_twice",
        }
        for drop, outcome in outcomes.items()
    ]
    resumes = {client.name: {"summary": {}, "cases": cases}}
    assert mcp_resume_verdicts(resumes[client.name]) == outcomes
    made = mcp_section([client], {client.name: report}, {}, {}, {}, tmp_path, 6, 1.5, resumes)
    row = next(line for line in made.splitlines() if line.startswith(f"| [{client.title}]"))
    assert row.endswith("| 2025-11-25 | ✓ | **no resume** | ✓ | n/a | ✓ | ✓ |"), row
    assert f"`{client.name}` `drop_twice`: **no resume**, {family}" in made
    page = update_mcp(PAGE.read_text("utf-8"), made)
    assert published_mcp_resume(page, client.name) == outcomes
    assert published(page, client.name) == {"baseline": "pass"}  # (the groups' data apart)


def test_each_venv_has_its_pinned_requirements() -> None:
    for requirements in VENVS.values():
        lines = (HERE / requirements).read_text().splitlines()
        assert all("==" in p for p in lines if p and not p.startswith("#")), requirements
    pins = {
        c.venv: (HERE / VENVS[c.venv]).read_text() for c in MCP_CLIENTS if c.runtime == "Python"
    }
    assert "mcp==2.3.0" in pins[".venv-mcp"]
    assert "mcp==1.30.0" in pins[".venv-mcp1"]
    node = json.loads((HERE / "package.json").read_text())["dependencies"]
    assert node["@modelcontextprotocol/sdk"] == "1.32.2"
    assert node["@modelcontextprotocol/client"] == "2.4.0"


def test_the_python_sdk_does_as_published(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    client = BY_NAME["mcp-python-2025-11-25"]
    want = published(PAGE.read_text("utf-8"), client.name)
    monkeypatch.chdir(HERE)  # the clients' paths are relative to it
    words = words_of(client)
    words[0] = sys.executable  # the test extra's mcp, at the pin of requirements-mcp.txt
    report = tmp_path / "report.json"
    options = HarnessOptions(
        command=tuple(words),
        dialect="mcp",
        only=GROUPS,
        seeds=1,
        jobs=2,
        keep_going=True,
        report=str(report),
    )
    with open(os.devnull, "w", encoding="utf-8") as out:
        run_test_client(options, out=out)
    got = json.loads(report.read_text("utf-8"))
    for group in (g.split(":")[0] for g in GROUPS):
        counts = got["summary"][group]
        bad = [o for o in ("wrong", "crash", "hang", "silent", "undelivered") if counts.get(o)]
        verdict = "pass" if not bad else "+".join(bad)
        assert verdict == want[group], (
            f"{client.name} {group}: the page says {want[group]}, now {verdict}; "
            "regenerate the MCP section (python conformance/run.py --mcp) if intended"
        )
    # the client really spoke MCP to the mock: one tool call, progress asked, the revision
    (baseline,) = [c["mcp"] for c in got["cases"] if c["group"] == "baseline"]
    assert baseline["calls"] == 1
    assert baseline["progress_asked"]
    assert baseline["revision"] == client.revision
    assert baseline["primed"]
