"""The reports: text (a table, then one block per finding), JSON (``--report``, in
test-client's form: cases with ``group``, ``outcome``, ``diagnosis``), JUnit and HTML."""

from __future__ import annotations

import shlex
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

from sse_proxy.tools.testclient.plan import BASELINE, FAULTS, Case
from sse_proxy.tools.testclient.shapes import SEEDED, is_variant_group
from sse_proxy.tools.testgateway.compare import OUTCOMES, Finding
from sse_proxy.tools.testgateway.meaning import Meaning
from sse_proxy.tools.testgateway.options import GatewayOptions
from sse_proxy.tools.testgateway.router import CASE_HEADER
from sse_proxy.tools.testgateway.run import GatewayCase, GatewayRun

__all__ = [
    "by_family",
    "exit_passed",
    "render_text",
    "report_json",
    "report_junit",
    "rerun_line",
    "row_of",
    "write_html",
]

_FAILED = tuple(o for o in OUTCOMES if o != "pass")
_CHANNEL = {
    "header": f"the {CASE_HEADER} header",
    "model": "a suffix of the model name",
    "order": "the order of the cases (neither the header nor the model name reached the "
    "upstream: one case at a time)",
}


def exit_passed(options: GatewayOptions, run: GatewayRun) -> bool:
    return not any(not r.passed and r.case.severity in options.fail_on for r in run.results)


def rerun_line(options: GatewayOptions, case: Case) -> str:
    """`sse-proxy test-gateway` re-running exactly ``case``."""
    parts = ["sse-proxy", "test-gateway", "--dialect", options.dialect]
    if options.tools:
        parts.append("--tools")
    for header in options.headers:
        parts += ["--header", header]
    for flag, value in (
        ("--path", options.path),
        ("--model", options.model),
        ("--ready-path", options.ready_path),
    ):
        if value:
            parts += [flag, value]
    if options.case_key != "auto":
        parts += ["--case-key", options.case_key]
    if not options.usage:
        parts.append("--no-usage")
    if case.cut is not None:
        parts += ["--only", f"cut:{case.cut}"]
    elif case.fault is not None:
        parts += ["--only", f"{FAULTS}:{case.fault}"]
    elif is_variant_group(case.group):
        parts += ["--only", case.row]
        if case.strategy in SEEDED:
            parts += ["--seed", str(case.seed)]
    else:
        parts += ["--only", case.group, "--seed", str(case.seed)]
    return f"{shlex.join(parts)} -- {shlex.join(options.command)}"


def row_of(case: Case) -> str:
    """The report's row: the group; a variant or a fault on a row of its own."""
    return f"{FAULTS}:{case.fault}" if case.fault is not None else case.row


def _rows(results: Sequence[GatewayCase]) -> dict[str, list[GatewayCase]]:
    rows: dict[str, list[GatewayCase]] = {}
    for r in results:
        rows.setdefault(row_of(r.case), []).append(r)
    return rows


def _main(r: GatewayCase) -> Finding | None:
    if r.judgement is not None and r.judgement.main is not None:
        return r.judgement.main
    if not r.passed:
        return Finding(r.outcome, f"gateway ({r.outcome})", r.note or r.outcome)
    return None


def by_family(results: Sequence[GatewayCase]) -> dict[str, list[tuple[GatewayCase, Finding]]]:
    """Every failing case under each finding's family (a case may count in several)."""
    out: dict[str, list[tuple[GatewayCase, Finding]]] = {}
    for r in results:
        if r.passed:
            continue
        findings = list(r.judgement.findings) if r.judgement is not None else []
        if not findings:
            main = _main(r)
            findings = [main] if main is not None else []
        for f in findings:
            out.setdefault(f.family, []).append((r, f))
    return out


def _setup_lines(options: GatewayOptions, run: GatewayRun) -> list[str]:
    s = run.setup
    path = options.path or s.gateway_url.split(":", 2)[-1].partition("/")[2]
    lines = [
        f"sse-proxy test-gateway: {shlex.join(s.command)}",
        f"gateway ready in {s.ready_s:g} s; the client speaks {options.dialect} "
        f"(POST /{path.lstrip('/')}), the gateway calls the upstream's POST "
        f"{s.upstream_path} ({s.upstream_dialect})",
        f"the case reached the upstream by {_CHANNEL.get(s.channel, s.channel)}",
    ]
    if s.upstream_dialect != options.dialect:
        lines.append(
            f"translation: the gateway answers in {options.dialect} what the upstream sent in "
            f"{s.upstream_dialect} ({options.dialect} <- {s.upstream_dialect}): compared by "
            "meaning"
        )
    return lines


def _delivery_line(results: Sequence[GatewayCase], paced: bool) -> str | None:
    got = [
        r.judgement.delivery
        for r in results
        if r.case.group == BASELINE and r.judgement is not None
    ]
    timed = [d for d in got if d is not None and d.added_first_output is not None]
    if not timed:
        return None
    first = max(d.added_first_output or 0.0 for d in timed)
    held = max(d.held_back for d in timed)
    return (
        f"delivery (baseline{', paced upstream' if paced else ''}): up to "
        f"{first * 1000:.0f} ms added to the first output; output held back up to "
        f"{held * 1000:.0f} ms beyond its least lag; output events upstream/client "
        f"{timed[0].upstream_events}/{timed[0].gateway_events}, the longest gap between "
        f"two {timed[0].upstream_gap_max * 1000:.0f}/{timed[0].gateway_gap_max * 1000:.0f} ms"
    )


def render_text(options: GatewayOptions, run: GatewayRun) -> str:
    results = run.results
    out = [*_setup_lines(options, run), ""]
    rows = _rows(results)
    width = max([len(k) for k in rows] + [24])
    header = f"{'case group':<{width}}  {'seen':<4}  {'cases':>5}  " + "  ".join(
        f"{o:>6}" for o in OUTCOMES
    )
    out += [header + "  verdict", "-" * (len(header) + 30)]
    for row, items in rows.items():
        counts = {o: sum(1 for r in items if r.outcome == o) for o in OUTCOMES}
        families: list[str] = []
        for r in items:
            main = _main(r)
            if main is not None and main.family not in families:
                families.append(main.family)
        verdict = "ok" if not families else "FAIL: " + ", ".join(families)
        out.append(
            f"{row:<{width}}  {items[0].case.severity:<4}  {len(items):>5}  "
            + "  ".join(f"{counts[o]:>6}" for o in OUTCOMES)
            + f"  {verdict}"
        )
    out.append("-" * (len(header) + 30))
    failed = sum(1 for r in results if not r.passed)
    out.append(f"{len(results)} cases, {len(results) - failed} passed, {failed} failed")
    line = _delivery_line(results, options.pace_ms > 0)
    if line:
        out.append(line)
    for family, found in by_family(results).items():
        first, finding = found[0]
        groups = list(dict.fromkeys(row_of(r.case) for r, _ in found))
        shown = ", ".join(groups[:8]) + (f" and {len(groups) - 8} more" if len(groups) > 8 else "")
        out += ["", f"== {family} ({finding.outcome}): {len(found)} cases: {shown}"]
        out.append(f"  first case: {first.case.name}")
        out.append(f"  what changed: {finding.reason}")
        if finding.evidence:
            lines = finding.evidence.splitlines()
            out.append(f"  evidence:     {lines[0]}")
            out += [f"                {x}" for x in lines[1:]]
        if finding.fix:
            out.append(f"  fix:          {finding.fix}")
        if first.judgement is not None and first.judgement.translation:
            out.append(f"  translation:  {first.judgement.translation}")
        if first.note:
            out.append(f"  note:         {first.note}")
        out.append(f"  reproduce:    {rerun_line(options, first.case)}")
    changes = _changes(results)
    if changes:
        out += ["", "changed without consequence for a client (not failures):"]
        out += [f"  {text} ({n} cases)" for text, n in changes[:8]]
    if options.verbose:
        out += ["", "every case:"]
        for r in results:
            out.append(f"  {r.case.name}: {r.outcome}")
            if r.judgement is not None:
                out += [f"    - {f.family}: {f.reason}" for f in r.judgement.findings]
                out += [f"    . {c}" for c in r.judgement.changes]
            if r.note:
                out.append(f"    note: {r.note}")
    return "\n".join(out) + "\n"


def _changes(results: Sequence[GatewayCase]) -> list[tuple[str, int]]:
    counts: dict[str, int] = {}
    for r in results:
        for change in r.judgement.changes if r.judgement is not None else ():
            if change.startswith(("events:", "bytes:")):
                continue
            counts[change] = counts.get(change, 0) + 1
    return sorted(counts.items(), key=lambda kv: -kv[1])


def _side(m: Meaning | None) -> dict[str, Any] | None:
    if m is None:
        return None
    return {
        "dialect": m.dialect,
        "status": m.status,
        "end": m.end,
        "text_length": len(m.text),
        "tool_calls": [{"name": n, "arguments": a} for n, a in m.calls],
        "finish_reasons": list(m.finish),
        "usage": None if m.usage is None else {"input": m.usage[0], "output": m.usage[1]},
        "errors": [{"type": e.kind, "message": e.message} for e in m.errors],
        "events": m.events,
        "bytes": m.bytes,
        "model": m.model,
        "first_byte_s": m.first_byte,
        "first_output_s": m.first_output,
        "tail": list(m.tail[-2:]),
    }


def _finding(f: Finding) -> dict[str, Any]:
    return {
        "outcome": f.outcome,
        "family": f.family,
        "reason": f.reason,
        "evidence": f.evidence,
        "fix": f.fix,
    }


def _case_json(options: GatewayOptions, r: GatewayCase) -> dict[str, Any]:
    case = r.case
    item: dict[str, Any] = {
        "name": case.name,
        "group": case.group,
        "strategy": case.strategy,
        "seed": None if case.cut is not None or case.fault is not None else case.seed,
        "cut": case.cut,
        "fault": case.fault,
        "severity": case.severity,
        "outcome": r.outcome,
        "duration_s": r.duration,
        "upstream_calls": r.calls,
        "case_key": r.channel,
        "upstream_path": r.upstream_path,
        "translation": r.judgement.translation if r.judgement else None,
        "note": r.note,
    }
    main = _main(r)
    if main is not None:
        item["diagnosis"] = _finding(main)
        item["reproduce"] = rerun_line(options, case)
    j = r.judgement
    item["findings"] = [_finding(f) for f in j.findings] if j else []
    item["changes"] = list(j.changes) if j else []
    item["delivery"] = j.delivery.fields() if j and j.delivery else None
    item["upstream"] = _side(r.upstream)
    item["gateway"] = _side(r.gateway)
    return item


def report_json(options: GatewayOptions, run: GatewayRun) -> dict[str, Any]:
    summary: dict[str, dict[str, int]] = {}
    for group, items in _rows(run.results).items():
        summary[group] = {o: sum(1 for r in items if r.outcome == o) for o in OUTCOMES}
        summary[group]["cases"] = len(items)
    s = run.setup
    return {
        "tool": "sse-proxy test-gateway",
        "command": list(options.command),
        "dialect": options.dialect,
        "upstream_dialect": s.upstream_dialect,
        "upstream_path": s.upstream_path,
        "translation": f"{options.dialect} <- {s.upstream_dialect}"
        if s.upstream_dialect != options.dialect
        else None,
        "case_key": s.channel,
        "ready_s": s.ready_s,
        "tools": options.tools,
        "fail_on": list(options.fail_on),
        "passed": exit_passed(options, run),
        "cases_total": len(run.results),
        "cases_failed": sum(1 for r in run.results if not r.passed),
        "summary": summary,
        "families": {
            family: sorted({row_of(r.case) for r, _ in items})
            for family, items in by_family(run.results).items()
        },
        "cases": [_case_json(options, r) for r in run.results],
    }


def report_junit(options: GatewayOptions, run: GatewayRun) -> ET.ElementTree:
    results = run.results
    suites = ET.Element("testsuites")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name="sse-proxy test-gateway",
        tests=str(len(results)),
        failures=str(sum(1 for r in results if not r.passed)),
        errors="0",
        skipped="0",
        time=f"{sum(r.duration for r in results):.3f}",
    )
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="command", value=shlex.join(options.command))
    ET.SubElement(props, "property", name="dialect", value=options.dialect)
    for r in results:
        tc = ET.SubElement(
            suite,
            "testcase",
            classname=f"sse-proxy-gateway.{r.case.group}",
            name=r.case.name,
            time=f"{r.duration:.3f}",
        )
        main = _main(r)
        if main is None:
            continue
        failure = ET.SubElement(
            tc, "failure", type=main.family, message=f"{main.family}: {main.reason}"
        )
        body = [f"reproduce: {rerun_line(options, r.case)}"]
        if main.evidence:
            body.append(f"evidence: {main.evidence}")
        if main.fix:
            body.append(f"fix: {main.fix}")
        failure.text = "\n".join(body)
    ET.indent(suites)
    return ET.ElementTree(suites)


def write_html(options: GatewayOptions, run: GatewayRun, path: str) -> None:
    """``--html FILE``: each case's text through the gateway against the upstream's."""
    from sse_proxy.inspect.report import ReportCase, write_report

    cases = []
    for r in run.results:
        main = _main(r)
        up, gw = r.upstream, r.gateway
        cases.append(
            ReportCase(
                name=r.case.name,
                verdict=r.outcome,
                received=gw.text if gw is not None else "",
                expected=up.text if up is not None else None,
                diagnosis=None if main is None else f"{main.family}: {main.reason}",
                note=f"rerun: {rerun_line(options, r.case)}",
                passed=r.passed,
                dialect=options.dialect,
                strip_if_passed=False,
            )
        )
    failed = sum(1 for r in run.results if not r.passed)
    write_report(
        path,
        f"sse-proxy test-gateway: {shlex.join(run.setup.command)}",
        sorted(cases, key=lambda c: c.passed),
        intro=f"{len(run.results)} cases, {failed} failed; the client speaks "
        f"{options.dialect}, the upstream {run.setup.upstream_dialect}.",
    )
