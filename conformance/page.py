"""docs/conformance.md from the clients' JSON reports, and the verdicts read back from it."""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

_DATA = re.compile(r"```json (?:mcp-)?verdicts\n(?P<data>.*?)\n```", re.DOTALL)
_MCP_RESUME_DATA = re.compile(r"```json mcp-resume-verdicts\n(?P<data>.*?)\n```", re.DOTALL)
_OUTCOMES = ("wrong", "crash", "hang", "silent", "undelivered")
_STALLS_START = "<!-- stalls: conformance/run.py --stalls rewrites this section -->"
_STALLS_END = "<!-- /stalls -->"
_STALL_FAULTS = ("stall_keepalive", "stall_silent", "linger", "drip")
_MCP_START = "<!-- mcp: conformance/run.py --mcp rewrites this section -->"
_MCP_END = "<!-- /mcp -->"
_RESUME_START = "<!-- resume: conformance/run.py --resume rewrites this section -->"
_RESUME_END = "<!-- /resume -->"
RESUME_DROPS = {
    "text": (
        "drop",
        "drop_twice",
        "drop_start",
        "drop_primed",
        "drop_retry_invalid",
        "drop_retry_large",
        "drop_id_nul",
        "drop_idless",
        "drop_204",
    ),
    "responses": ("drop", "drop_twice", "drop_start", "drop_too_old"),
    "mcp": (
        "drop",
        "drop_twice",
        "drop_start",
        "drop_primed",
        "drop_retry_invalid",
        "drop_retry_large",
    ),
    "gemini": ("drop", "drop_twice", "drop_start", "drop_too_old"),
}
"""The drops of each way of resuming, in the section's columns (test-client's order)."""
_RESUME_TITLES = {
    "text": "Raw SSE, by `Last-Event-ID` (`--dialect text`)",
    "responses": "OpenAI Responses in background mode, by `starting_after` (`--dialect responses`)",
    "gemini": "Gemini Interactions, by `last_event_id` (`--dialect gemini`)",
}


def verdicts_of(report: Mapping[str, Any]) -> dict[str, str]:
    """Each group's verdict in one word: pass, or the failures' outcomes."""
    return _verdicts(report)


def _verdicts(report: Mapping[str, Any]) -> dict[str, str]:
    out: dict[str, str] = {}
    for group, counts in report["summary"].items():
        bad = [o for o in _OUTCOMES if counts.get(o)]
        out[group] = "pass" if not bad else "+".join(bad)
    return out


def published(page: str, name: str) -> dict[str, str]:
    """The verdicts of row ``name`` as the page publishes them ({} when it has none)."""
    for found in _DATA.finditer(page):  # the LLM clients', then the MCP section's
        row = json.loads(found["data"]).get(name)
        if row is not None:
            return dict(row)
    return {}


def _local(text: str, here: Path) -> str:
    """A reproduce line as it runs from conformance/ on any machine."""
    return text.replace(f"{here}/.venv/bin/python", ".venv/bin/python").replace(f"{here}/", "")


def _cell(verdict: str | None) -> str:
    if verdict is None:
        return "·"
    return "✓" if verdict == "pass" else f"**{verdict}**"


def _stall_cell(case: Mapping[str, Any] | None, crashes_on_comments: bool = False) -> str:
    """One stalls case: ✓ (with when it ended, from the fault's start), or its outcome; a
    drip read on through the patience is information (no whole-answer deadline). A client
    that fails the ``keepalive`` rewrite ends a kept-alive stall by crashing on a comment:
    its ✓ there says so."""
    if case is None:
        return "·"
    timing = case.get("timing") or {}
    into = timing.get("into_fault_s")
    when = "" if into is None else f" {into:.1f} s"
    outcome = case["outcome"]
    if outcome == "pass" and crashes_on_comments and case["fault"] == "stall_keepalive":
        return f"✓{when}, a crash on the comment"
    if outcome == "pass":
        return f"✓{when}"
    if outcome == "info" or (outcome == "hang" and case["fault"] == "drip"):
        return "no deadline"
    return f"**{outcome}**"


def _stall_rows(
    rows: Sequence[Any],
    stalls: Mapping[str, Mapping[str, Any]],
    fixed: Mapping[str, Mapping[str, Any]],
    versions: Mapping[str, str],
    verdicts: Mapping[str, Mapping[str, str]] | None,
) -> list[str]:
    """The stalls table's rows: each client as it comes, then with its setting."""
    out: list[str] = []
    for c in rows:
        for label, report in (("as it comes", stalls.get(c.name)), (c.fix, fixed.get(c.name))):
            if report is None:
                continue
            cases = {str(k["fault"]): k for k in report["cases"] if k["group"] == "stalls"}
            keepalive = (verdicts or {}).get(c.name, {}).get("keepalive", "pass")
            crashes = keepalive != "pass"
            cells = " | ".join(_stall_cell(cases.get(f), crashes) for f in _STALL_FAULTS)
            first = label == "as it comes"
            name = f"[{c.title}](#{c.name}) ({c.runtime})" if first else ""
            version = versions.get(c.name, "?") if first else ""
            out.append(f"| {name} | {version} | {label or 'no setting'} | {cells} |")
    return out


def stalls_section(
    clients: Sequence[Any],
    stalls: Mapping[str, Mapping[str, Any]],
    fixed: Mapping[str, Mapping[str, Any]],
    versions: Mapping[str, str],
    bugs: Path,
    patience: float,
    seconds: float,
    verdicts: Mapping[str, Mapping[str, str]] | None = None,
) -> str:
    """The time boundary's section: each client as it comes and with its own timeout.
    ``verdicts``: the clients' other groups (its ``keepalive`` verdict explains a ✓)."""
    rows = [c for c in clients if c.name in stalls]
    out = [
        _STALLS_START,
        "## The time boundary: `stalls`",
        "",
        "What each client does when a stream stalls behind keep-alive comments (or "
        "Anthropic's `ping` events), stalls in silence, stays open after its terminal marker "
        "(`linger`) or drips a few bytes a second ([the faults](test-client.md#stalls-the-"
        f"time-boundary)): `--only stalls --patience {patience:g}`, once as the client comes "
        f"and once with its own timeout setting at {seconds:g} s (the last column names "
        "it). ✓ with the seconds from the fault's start to the client's end: it reported the "
        "stall (or, after a linger, ended with the whole answer) within the patience; "
        "**hang**: still running then; **silent**: exit 0 with part of the answer; "
        "**crash** after a linger: its deadline fired while it waited for the close; a "
        "client that fails the `keepalive` rewrite above ends a kept-alive stall by crashing "
        "on the first comment, which the cell says; "
        "no deadline: a drip read on through the patience, so the client has no whole-answer "
        "deadline that short (information, not a failure); `·`: does not apply (no terminal "
        "marker). Regenerate this section alone with `.venv/bin/python "
        "conformance/run.py --stalls` (minutes).",
        "",
        "| client | version | run | `stall_keepalive` | `stall_silent` | `linger` | `drip` |",
        "|---|---|---|---|---|---|---|",
    ]
    out += _stall_rows(rows, stalls, fixed, versions, verdicts)
    notes = [c for c in rows if (bugs / f"{c.name}-stalls.md").is_file()]
    if notes:
        out += [
            "",
            "Clients that hang by default, with the report for upstream: "
            + ", ".join(f"[{c.name}](bugs/{c.name}-stalls.md)" for c in notes)
            + ".",
        ]
    out += ["", _STALLS_END]
    return "\n".join(out)


def stall_outcome(cell: str) -> str:
    """A stalls cell read back as an outcome: pass, hang, silent, crash, info or n/a."""
    cell = cell.strip()
    if cell.startswith("✓"):
        return "pass"
    if cell == "no deadline":
        return "info"
    if cell == "·":
        return "n/a"
    return cell.strip("*")


def published_stalls(page: str, name: str) -> list[dict[str, str]]:
    """Row ``name``'s stalls runs as the page publishes them: as it comes, then with its
    setting; each fault's outcome (:func:`stall_outcome`)."""
    start, end = page.find(_STALLS_START), page.find(_STALLS_END)
    rows: list[dict[str, str]] = []
    mine = False
    for line in page[start:end].splitlines():
        if not line.startswith("| ") or line.startswith(("| client", "|---")):
            continue
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        if cells[0]:
            mine = f"(#{name})" in cells[0]
        if mine:
            rows.append(dict(zip(_STALL_FAULTS, map(stall_outcome, cells[3:]), strict=True)))
    return rows


def _replace(page: str, start_mark: str, end_mark: str, section: str, *, before: str) -> str:
    """``page`` with the section between the marks replaced, or put before the heading
    ``before`` when the page has none yet."""
    start, end = page.find(start_mark), page.find(end_mark)
    if start >= 0 and end > start:
        return page[:start] + section + page[end + len(end_mark) :]
    at = page.index(before)
    return page[:at] + section + "\n\n" + page[at:]


def update_stalls(page: str, section: str) -> str:
    """``page`` with its stalls section replaced (or put before the clients' failures)."""
    return _replace(page, _STALLS_START, _STALLS_END, section, before="## Each client's failures")


def _failures(
    rows: Sequence[Any],
    reports: Mapping[str, Mapping[str, Any]],
    versions: Mapping[str, str],
    bugs: Path,
    here: Path,
) -> list[str]:
    """Each row's failed groups, one line each with its diagnosis and reproduce line."""
    out: list[str] = []
    for i, c in enumerate(rows, 1):
        report = reports[c.name]
        out += [f"### {c.name}", ""]
        where = f"`{c.script}` in {c.runtime}" if c.browser else f"`{' '.join(c.run)}`"
        out.append(
            f"{i}. {c.title} {versions.get(c.name, '?')} ({c.runtime}), {where}, dialect `{c.dialect}`."
        )
        bug = bugs / f"{getattr(c, 'note', '') or c.name}.md"
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
    return out


def _client_row(
    i: int,
    c: Any,
    what: str,
    table: Mapping[str, Mapping[str, str]],
    reports: Mapping[str, Mapping[str, Any]],
    versions: Mapping[str, str],
) -> str:
    """One client's line of a section's table: ``what`` is its dialect or its revision."""
    verdict = table[c.name]
    passed = sum(v == "pass" for v in verdict.values())
    causes = sorted(reports[c.name].get("root_causes", {}))
    return (
        f"| {i} | [{c.title}](#{c.name}) | {c.runtime} | {versions.get(c.name, '?')} | "
        f"{what} | {passed} of {len(verdict)} | {', '.join(causes) or 'none'} |"
    )


def _negotiated(report: Mapping[str, Any]) -> str:
    """The revisions the client's tool calls came in, as the mock's MCP server saw them."""
    seen = sorted({str(c["mcp"]["revision"]) for c in report["cases"] if c.get("mcp")})
    return ", ".join(seen) or "no tool call"


def mcp_resume_verdicts(report: Mapping[str, Any]) -> dict[str, str]:
    """Each drop's outcome in an MCP row's resume run."""
    return {str(c["fault"]): str(c["outcome"]) for c in report["cases"] if c["group"] == "resume"}


def published_mcp_resume(page: str, name: str) -> dict[str, str]:
    """The drops' outcomes the page publishes for MCP row ``name`` ({} when none)."""
    found = _MCP_RESUME_DATA.search(page)
    return dict(json.loads(found["data"]).get(name, {})) if found else {}


def _mcp_resume_rows(
    rows: Sequence[Any],
    resumes: Mapping[str, Mapping[str, Any]],
    versions: Mapping[str, str],
    here: Path,
) -> list[str]:
    """The drops table of the MCP rows (a column per drop) and each failure's diagnosis."""
    drops = RESUME_DROPS["mcp"]
    out = [
        "",
        "### Drops: resumed or re-issued (`--resume --only resume`)",
        "",
        "Each tool call's stream cut by the mock's MCP server the MCP way "
        "([the drops](test-client.md#drops---dialect-mcp---resume)): in 2025-11-25 the "
        "client must resume it by `GET` with `Last-Event-ID` after the `retry` delay, from "
        "the last event it had whole (`drop_start`: no id arrived, so it must fail the call "
        "or re-issue it); in 2026-07-28 it must re-issue the call under a new request id "
        "(n/a: a drop that revision does not have). The client as it comes, default "
        "options; cells read as in [the connection boundary](#the-connection-boundary-resume).",
        "",
        "| client | version | revision | " + " | ".join(f"`{d}`" for d in drops) + " |",
        "|---|---|---|" + "---|" * len(drops),
    ]
    failures: list[str] = []
    for c in rows:
        report = resumes[c.name]
        cases = {str(k["fault"]): k for k in report["cases"] if k["group"] == "resume"}
        cells = " | ".join(_resume_cell(cases.get(d)) for d in drops)
        out.append(
            f"| [{c.title}](#{c.name}) ({c.runtime}) | {versions.get(c.name, '?')} | "
            f"{c.revision} | {cells} |"
        )
        for drop in drops:
            case = cases.get(drop)
            if case is None or case["outcome"] in ("pass", "info", "not_applicable"):
                continue
            d = case.get("diagnosis") or {}
            reason = str(d.get("reason", "")).replace("\n", " ")
            if len(reason) > 400:
                reason = reason[:400] + "..."
            outcome = str(case["outcome"]).replace("_", " ")
            failures.append(
                f"- `{c.name}` `{drop}`: **{outcome}**, {d.get('family', '?')}: {reason}"
            )
            failures.append(f"  - reproduce: `{_local(str(case.get('reproduce', '')), here)}`")
    if failures:
        out += ["", *failures]
    return out


def mcp_section(
    clients: Sequence[Any],
    reports: Mapping[str, Mapping[str, Any]],
    stalls: Mapping[str, Mapping[str, Any]],
    fixed: Mapping[str, Mapping[str, Any]],
    versions: Mapping[str, str],
    bugs: Path,
    patience: float,
    seconds: float,
    resumes: Mapping[str, Mapping[str, Any]] | None = None,
) -> str:
    """The MCP clients' section: a row per client and revision, every group, the time
    boundary, the drops (``resumes``: each row's resume run), each row's failures, the rows
    that cannot run yet, and the verdicts as data."""
    resumes = resumes or {}
    here = bugs.parent.parent / "conformance"
    rows = [c for c in clients if c.name in reports]
    table = {c.name: _verdicts(reports[c.name]) for c in rows}
    groups: list[str] = []
    for c in rows:
        groups += [g for g in table[c.name] if g not in groups]
    out = [
        _MCP_START,
        "## MCP clients: the official SDKs over Streamable HTTP",
        "",
        "Which official MCP SDK survives what the streams of a tool call meet on the way "
        "(reads cut anywhere, line endings, comments, broken streams, stalls), at which "
        "version and in which protocol revision. Each row is a client of the official "
        "Python or TypeScript SDK, as a user writes it (default options, a progress "
        "callback), under [`sse-proxy test-client --dialect mcp`](test-client.md): it "
        "connects to the mock's MCP server through the proxy, calls the tool "
        "`SSE_PROXY_MCP_TOOL` with `SSE_PROXY_MCP_ARGS` and prints the result's text; every "
        "group runs on the tool call's SSE stream (one seed each). A client speaks "
        "2025-11-25 by default (the server primes each stream, sends `retry` and an id on "
        "every event); 2026-07-28 is the stateless revision a client opts into (no "
        "session, no ids, no resumption). The mock is a dual-era server, which answers "
        "`server/discover` with both eras; the Python `Client`'s 2025-11-25 row connects "
        "to it as to a handshake-era server (`?mcp=era%3Dlegacy`: the probe gets a 400), "
        "so that it probes and falls back to `initialize`, as it does against such a "
        "server. Regenerate this section alone with "
        "`.venv/bin/python conformance/run.py --mcp` (about 10 minutes on two cores), which installs "
        "the pinned SDKs: `mcp` 2.x into `conformance/.venv-mcp` "
        "(`conformance/requirements-mcp.txt`), 1.x into `conformance/.venv-mcp1` "
        "(`requirements-mcp1.txt`: one environment cannot hold both), the npm packages "
        "from `conformance/package-lock.json`. Cells read as in the tables above.",
        "",
        "| # | client | runtime | version | revision (negotiated) | groups passed | failures (diagnosis) |",
        "|---|---|---|---|---|---|---|",
    ]
    for i, c in enumerate(rows, 1):
        out.append(_client_row(i, c, _negotiated(reports[c.name]), table, reports, versions))
    pending = [c for c in clients if c.pending]
    if pending:
        out += [
            "",
            "Not run yet: "
            + "; ".join(f"{c.title} in {c.revision} (`{c.name}`): {c.pending}" for c in pending)
            + ".",
        ]
    out += [
        "",
        "| group | " + " | ".join(str(i) for i in range(1, len(rows) + 1)) + " |",
        "|---|" + "---|" * len(rows),
    ]
    for group in groups:
        cells = " | ".join(_cell(table[c.name].get(group)) for c in rows)
        out.append(f"| `{group}` | {cells} |")
    timed = [c for c in rows if c.name in stalls]
    if timed:
        out += [
            "",
            f"The time boundary (`--only stalls --patience {patience:g}`, as in "
            "[its section](#the-time-boundary-stalls)), as the client comes and with its "
            f"own timeout at {seconds:g} s (`CONFORMANCE_TIMEOUT`; the setting is named):",
            "",
            "| client | version | run | `stall_keepalive` | `stall_silent` | `linger` | `drip` |",
            "|---|---|---|---|---|---|---|",
            *_stall_rows(timed, stalls, fixed, versions, table),
        ]
    dropped = [c for c in rows if c.name in resumes]
    if dropped:
        out += _mcp_resume_rows(dropped, resumes, versions, here)
    stems = {getattr(c, "note", "") or c.name for c in clients}
    notes = sorted(n for n in stems if (bugs / f"{n}.md").is_file())
    if notes:
        out += [
            "",
            "Bug notes, with the report for upstream: "
            + ", ".join(f"[{n}](bugs/{n}.md)" for n in notes)
            + ".",
        ]
    out += ["", *_failures(rows, reports, versions, bugs, here)]
    data = json.dumps(table, indent=1, sort_keys=True, ensure_ascii=False)
    out += ["The MCP rows' verdicts, as `--check` reads them:", "", "```json mcp-verdicts"]
    out += [data, "```"]
    if dropped:
        drops = {c.name: mcp_resume_verdicts(resumes[c.name]) for c in dropped}
        data = json.dumps(drops, indent=1, sort_keys=True, ensure_ascii=False)
        out += ["", "Their drops' outcomes:", "", "```json mcp-resume-verdicts", data, "```"]
    out += ["", _MCP_END]
    return "\n".join(out)


def update_mcp(page: str, section: str) -> str:
    """``page`` with its MCP section replaced (or put before the verdicts as data)."""
    return _replace(page, _MCP_START, _MCP_END, section, before="## The verdicts as data")


def _resume_cell(case: Mapping[str, Any] | None) -> str:
    """One resume case: ✓, ✓ replayed (exact, by asking for the whole stream again), ✓ in
    flight (stopped at a 204 at its own cursor, what followed lost with the connection), or
    its outcome."""
    if case is None:
        return "·"
    outcome = str(case["outcome"])
    if outcome == "pass":
        return "✓"
    if outcome == "not_applicable":  # a drop the client's revision does not have
        return "n/a"
    if outcome == "info":
        family = str((case.get("diagnosis") or {}).get("family", ""))
        return "✓ in flight" if family.endswith("(lost in flight)") else "✓ replayed"
    return f"**{outcome.replace('_', ' ')}**"


def resume_outcome(cell: str) -> str:
    """A resume cell read back as an outcome: pass, info, n/a or the failure's."""
    cell = cell.strip()
    if cell == "✓":
        return "pass"
    if cell in ("✓ replayed", "✓ in flight"):
        return "info"
    if cell == "·":
        return "n/a"
    if cell == "n/a":
        return "not_applicable"
    return cell.strip("*").replace(" ", "_")


def resume_section(
    resumers: Sequence[Any],
    clients: Mapping[str, Any],
    reports: Mapping[str, Mapping[str, Any]],
    fixed: Mapping[str, Mapping[str, Any]],
    versions: Mapping[str, str],
    bugs: Path,
) -> str:
    """The connection boundary's section: each client written to resume, on each drop of
    its way of resuming; as its library comes, and with a caller's fix where one is needed."""
    out = [
        _RESUME_START,
        "## The connection boundary: `resume`",
        "",
        "What each client does when its connection drops mid-stream and the API lets it "
        "resume ([the drops and verdicts](resume.md#the-drops)): `--resume --only resume`, "
        "each client written to resume the way its library offers (`conformance/clients/*"
        "resume*`, `*helper*`), never made to do more. ✓: resumed exactly (the text equal, "
        "one reconnect per drop, from the last event it had whole, after the `retry` delay; "
        "stopped at a 204; reported a refused resume); ✓ replayed: exact, by asking for the "
        "whole stream again and skipping what it had (the upstream sends it twice); ✓ in "
        "flight: stopped at a 204 with the text of its own cursor, the events after it lost "
        "with the connection; "
        "**duplicated**, **lost**, **no resume** (a hang, or part of the answer), **too "
        "early** (ignored `retry`), **storm**, **looped** (after a 204), or the text "
        "misread (**wrong**). Neither openai SDK resumes by itself: the loop that catches "
        "the drop and resumes is the caller's (by hand with `responses.retrieve`, or with "
        "the helper); nor do the google-genai SDKs (`interactions.get` with the last "
        "`event_id`, by hand). Regenerate this section alone with `.venv/bin/python "
        "conformance/run.py --resume` (minutes).",
    ]
    for dialect, drops in RESUME_DROPS.items():
        rows = [r for r in resumers if r.dialect == dialect and r.name in reports]
        if not rows:
            continue
        out += [
            "",
            f"### {_RESUME_TITLES[dialect]}",
            "",
            "| client | version | how it resumes | " + " | ".join(f"`{d}`" for d in drops) + " |",
            "|---|---|---|" + "---|" * len(drops),
        ]
        for r in rows:
            client = clients[r.client]
            runs = [(r.how, reports[r.name])]
            if r.fix and r.name in fixed:
                runs.append((f"and {r.fix}", fixed[r.name]))
            for n, (how, report) in enumerate(runs):
                cases = {str(k["fault"]): k for k in report["cases"] if k["group"] == "resume"}
                cells = " | ".join(_resume_cell(cases.get(d)) for d in drops)
                name = f"[{client.title}](#{client.name}) ({client.runtime})" if not n else ""
                version = versions.get(r.client, "?") if not n else ""
                out.append(f"| {name} | {version} | {how} | {cells} |")
    notes = [r for r in resumers if r.name in reports and (bugs / f"{r.name}-resume.md").is_file()]
    if notes:
        out += [
            "",
            "Why each failure happens, with the report for upstream: "
            + ", ".join(f"[{r.name}](bugs/{r.name}-resume.md)" for r in notes)
            + ".",
        ]
    out += ["", _RESUME_END]
    return "\n".join(out)


def published_resume(page: str, client: str, how: str) -> list[dict[str, str]]:
    """The runs the page publishes for the resume row of matrix row ``client`` that resumes
    ``how``: as it comes, then with its fix; each drop's outcome (:func:`resume_outcome`)."""
    start, end = page.find(_RESUME_START), page.find(_RESUME_END)
    drops: list[str] = []
    runs: list[dict[str, str]] = []
    mine = False
    for line in page[start:end].splitlines():
        if line.startswith("| client |"):
            drops = [c.strip().strip("`") for c in line.strip("|").split(" | ")[3:]]
        if not line.startswith("| ") or line.startswith(("| client", "|---")):
            continue
        cells = [c.strip() for c in line.strip("|").split(" | ")]
        if cells[0]:
            mine = f"(#{client})" in cells[0] and cells[2] == how
        if mine:
            runs.append(dict(zip(drops, map(resume_outcome, cells[3:]), strict=True)))
    return runs


def update_resume(page: str, section: str) -> str:
    """``page`` with its resume section replaced (or put before the clients' failures)."""
    return _replace(page, _RESUME_START, _RESUME_END, section, before="## Each client's failures")


def write_page(
    page: Path,
    clients: Sequence[Any],
    reports: Mapping[str, Mapping[str, Any]],
    versions: Mapping[str, str],
    date: str,
    bugs: Path,
    stalls: str = "",
    mcp: str = "",
    resume: str = "",
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
        "against the built-in mock upstream in the dialect it speaks; the `stalls` group has "
        "[a section of its own](#the-time-boundary-stalls), and so has `resume`, run with "
        "clients written to resume ([the connection boundary](#the-connection-boundary-"
        "resume)). Regenerate it with one "
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
        out.append(_client_row(i, c, c.dialect, table, reports, versions))
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
    if stalls:
        out += ["", stalls]
    if resume:
        out += ["", resume]
    out += ["", "## Each client's failures", ""]
    out += _failures(rows, reports, versions, bugs, here)
    if mcp:
        out += [mcp, ""]
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
