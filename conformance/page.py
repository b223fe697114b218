"""docs/conformance.md from the clients' JSON reports, and the verdicts read back from it."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

_DATA = re.compile(r"```json verdicts\n(?P<data>.*?)\n```", re.DOTALL)
_OUTCOMES = ("wrong", "crash", "hang", "silent", "undelivered")


def _verdicts(report: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for group, counts in report["summary"].items():
        bad = [o for o in _OUTCOMES if counts.get(o)]
        out[group] = "pass" if not bad else "+".join(bad)
    return out


def published(page: str, name: str) -> dict[str, str]:
    """The verdicts of row ``name`` as the page publishes them ({} when it has none)."""
    found = _DATA.search(page)
    if found is None:
        return {}
    return dict(json.loads(found["data"]).get(name, {}))


def _local(text: str, here: Path) -> str:
    """A reproduce line as it runs from conformance/ on any machine."""
    return text.replace(f"{here}/.venv/bin/python", ".venv/bin/python").replace(f"{here}/", "")


def _cell(verdict: str | None) -> str:
    if verdict is None:
        return "·"
    return "✓" if verdict == "pass" else f"**{verdict}**"


def write_page(
    page: Path,
    clients: Sequence[Any],
    reports: Mapping[str, Mapping[str, Any]],
    versions: Mapping[str, str],
    date: str,
    bugs: Path,
) -> None:
    from sse_proxy import __version__

    here = page.parent.parent / "conformance"
    rows = [c for c in clients if c.name in reports]
    table = {c.name: _verdicts(reports[c.name]) for c in rows}
    groups: list[str] = []
    for c in rows:
        groups += [g for g in table[c.name] if g not in groups]
    out = [
        "# Conformance matrix: popular streaming clients under sse-proxy test-client",
        "",
        "This page answers: which popular SSE and LLM streaming clients survive the reads, "
        "line endings, stream shapes and broken streams real networks and providers produce, "
        "at which version, and where exactly the others break.",
        "",
        f"Generated on {date} with sse-proxy {__version__}: every group of "
        "[`sse-proxy test-client`](test-client.md) (one seed each: `--seeds 1`), each client "
        "against the built-in mock upstream in the dialect it speaks. Regenerate it with one "
        "command, which installs the pinned clients (PyPI into `conformance/.venv`, npm into "
        "`conformance/node_modules`, from `conformance/requirements.txt` and "
        "`conformance/package-lock.json`) and reruns them all (about half an hour on two "
        "cores):",
        "",
        "```sh",
        ".venv/bin/python conformance/run.py",
        "```",
        "",
        "`--only NAME,...` reruns some rows; `--check NAME ...` reruns rows and exits 1 when "
        "a verdict differs from this page (the test suite does that for a small subset: "
        "`tests/tools/test_conformance_subset.py`). Each client is a few lines in "
        "`conformance/clients/` that print the streamed text; the reproduce lines below run "
        "from `conformance/`.",
        "",
        "A cell is ✓ (every case of the group passed) or the failures' outcome: **wrong** "
        "(wrong text), **crash** (non-zero exit, or a rejection in the browser), **hang**, "
        "**silent** (a broken stream taken for a whole one), **undelivered** (the harness "
        "could not get its cuts through: says nothing about the client). `·`: the group does "
        "not apply to that dialect. Groups marked *spec* are streams the spec allows and "
        "providers rarely send; the others are seen in the field. A shape that providers "
        "send only when the request asks for it (choice 1 with `n > 1`, the `include_usage` "
        "chunk, tool calls) is not served to a client whose request does not ask: such a "
        "case is not applicable and fails nothing (listed under each client below).",
        "",
        "## The clients",
        "",
        "| # | client | runtime | version | dialect | groups passed | failures (diagnosis) |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, c in enumerate(rows, 1):
        verdict = table[c.name]
        passed = sum(v == "pass" for v in verdict.values())
        causes = sorted(reports[c.name].get("root_causes", {}))
        out.append(
            f"| {i} | [{c.title}](#{c.name}) | {c.runtime} | {versions.get(c.name, '?')} | "
            f"{c.dialect} | {passed} of {len(verdict)} | {', '.join(causes) or 'none'} |"
        )
    out += [
        "",
        "## Every group",
        "",
        "| group | seen | " + " | ".join(str(i) for i in range(1, len(rows) + 1)) + " |",
    ]
    out.append("|---|---|" + "---|" * len(rows))
    severity: dict[str, str] = {}
    for c in rows:
        for case in reports[c.name]["cases"]:
            severity.setdefault(
                case["group"]
                if case["group"] not in ("shapes", "tokens")
                else f"{case['group']}:{case['strategy']}",
                case["severity"],
            )
    for group in groups:
        cells = " | ".join(_cell(table[c.name].get(group)) for c in rows)
        out.append(f"| `{group}` | {severity.get(group, '')} | {cells} |")
    out += ["", "## Each client's failures", ""]
    for i, c in enumerate(rows, 1):
        report = reports[c.name]
        out += [f"### {c.name}", ""]
        where = f"`{c.script}` in {c.runtime}" if c.browser else f"`{' '.join(c.run)}`"
        out.append(
            f"{i}. {c.title} {versions.get(c.name, '?')} ({c.runtime}), {where}, dialect `{c.dialect}`."
        )
        bug = bugs / f"{c.name}.md"
        if bug.is_file():
            out.append(
                f"For upstream (a report ready to file, or why there is none): [bugs/{bug.name}](bugs/{bug.name})."
            )
        out.append("")
        failed: dict[str, dict[str, Any]] = {}
        skipped = [
            f"`{case['group']}:{case['strategy']}` ({case.get('requires', '?')})"
            for case in report["cases"]
            if case["outcome"] == "not_applicable"
        ]
        for case in report["cases"]:
            if case["outcome"] not in ("pass", "not_applicable"):
                key = (
                    case["group"]
                    if case["group"] not in ("shapes", "tokens")
                    else f"{case['group']}:{case['strategy']}"
                )
                failed.setdefault(key, case)
        if skipped:
            out += [
                "Not applicable to its request (providers send these only when a request "
                f"asks for what is in brackets): {', '.join(skipped)}.",
                "",
            ]
        if not failed:
            out += ["Every group passed.", ""]
            continue
        for group, case in failed.items():
            d = case.get("diagnosis") or {}
            reason = str(d.get("reason", "")).replace("\n", " ")
            if len(reason) > 400:
                reason = reason[:400] + "..."
            site = d.get("crash_site")
            at = (
                f" (inside {site['package']} {site['version'] or ''}, {site['file']}:{site['line']})"
                if site
                else ""
            )
            out.append(f"- `{group}`: **{case['outcome']}**, {d.get('family', '?')}{at}: {reason}")
            out.append(f"  - reproduce: `{_local(str(case.get('reproduce', '')), here)}`")
        out.append("")
    data = json.dumps(table, indent=1, sort_keys=True, ensure_ascii=False)
    out += [
        "## The verdicts as data",
        "",
        "What `conformance/run.py --check` compares with:",
        "",
        "```json verdicts",
        data,
        "```",
        "",
    ]
    page.write_text("\n".join(out), encoding="utf-8")
