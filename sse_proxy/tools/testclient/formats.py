"""The machine-readable reports: JSON (``--report FILE``) and JUnit XML (``--junit FILE``).

The JSON report only ever gains keys: each case's ``delivery`` (cuts, read apart,
attempts), its ``timing`` (a ``stalls`` case: when the fault began, when the client ended)
and its diagnosis' ``hint``, the run's ``delivery`` total (per group too) and its
``root_causes`` came after the first consumers; then each shape case's ``requires``,
``reason`` (``not_applicable`` cases) and ``forced``, and the run's ``all_shapes`` and
``cases_not_applicable``. JUnit reports a ``not_applicable`` case as skipped, with the
reason, and a forced one with a ``forced`` property.
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from collections.abc import Sequence
from typing import Any

from sse_proxy.tools.testclient.commands import _cmd_text, by_hand, rerun_line
from sse_proxy.tools.testclient.diagnose import first_difference, short_diff
from sse_proxy.tools.testclient.fixture import Fixture
from sse_proxy.tools.testclient.hints import hint_for, runtime_of
from sse_proxy.tools.testclient.plan import HarnessOptions
from sse_proxy.tools.testclient.report import _groups, delivery_total, exit_passed
from sse_proxy.tools.testclient.run import NOT_APPLICABLE, OUTCOMES, CaseResult, RunResult
from sse_proxy.tools.testclient.severity import LEVELS
from sse_proxy.tools.testclient.summary import root_causes

__all__ = ["report_json", "report_junit"]


def _result_json(options: HarnessOptions, fixture: Fixture, result: CaseResult) -> dict[str, Any]:
    case = result.case
    item: dict[str, Any] = {
        "name": case.name,
        "group": case.group,
        "strategy": case.strategy,
        "seed": None if case.cut is not None or case.fault is not None else case.seed,
        "cut": case.cut,
        "fault": case.fault,
        "severity": case.severity,
        "outcome": result.outcome,
        "exit_code": result.exit_code,
        "duration_s": result.duration,
        "timing": None if result.timing is None else result.timing.fields(),
        "delivery": None
        if result.delivered is None
        else {
            "cuts": result.delivered.cuts,
            "read_apart": result.delivered.read_apart,
            "attempts": result.attempts,
        },
    }
    if result.mcp_calls is not None:  # MCP: the tool calls the server answered
        item["mcp"] = {
            "calls": len(result.mcp_calls),
            "progress_asked": any(c.progress_token is not None for c in result.mcp_calls),
            "progress_sent": sum(
                c.progress for c in result.mcp_calls if c.progress_token is not None
            ),
        }
    if result.not_applicable is not None:
        item["requires"] = result.not_applicable
        item["reason"] = result.applicability
    elif result.forced is not None:
        item["requires"] = result.forced
        item["forced"] = result.applicability
    if result.diagnosis is not None:
        d = result.diagnosis
        item["diagnosis"] = {
            "family": d.family,
            "reason": d.reason,
            "rule": d.rule,
            "hint": (
                d.hint if d.chunk is not None else hint_for(d.family, runtime_of(options.subject))
            ),
            **(
                {"chunk": d.chunk, "providers": list(d.providers), "sources": list(d.sources)}
                if d.chunk is not None
                else {}
            ),
            "crash_site": None
            if d.site is None
            else {
                "package": d.site.package,
                "version": d.site.version,
                "file": d.site.file,
                "line": d.site.line,
            },
        }
        if result.parts:
            item["parts"] = {p: None if v is None else v.family for p, v in result.parts.items()}
        item["output"] = result.output[:4000]
        item["diff"] = short_diff(result.expected, result.output)
        item["first_difference"] = first_difference(result.expected, result.output)
        item["stderr_tail"] = result.stderr_tail()
        item["reproduce"] = rerun_line(options, case)
        item["by_hand"] = by_hand(options, fixture, case)
        if result.cut_context:
            item["cut_context"] = result.cut_context
    return item


def report_json(options: HarnessOptions, fixture: Fixture, run: RunResult) -> dict[str, Any]:
    """The machine-readable report (``--report FILE``)."""
    summary: dict[str, dict[str, int]] = {}
    delivered: dict[str, dict[str, int | None]] = {}
    for group, items in _groups(run.results).items():
        summary[group] = {o: sum(1 for r in items if r.outcome == o) for o in OUTCOMES}
        summary[group]["cases"] = len(items)
        group_cuts, group_apart = delivery_total(items)
        delivered[group] = {"cuts": group_cuts, "read_apart": group_apart}
    cuts, apart = delivery_total(run.results)
    return {
        "tool": "sse-proxy test-client",
        "command": list(options.command),
        "browser": options.browser,
        "script": options.script,
        "dialect": fixture.dialect,
        "fixture": options.fixture,
        "endpoint": fixture.path,
        "expected_text": fixture.expected,
        "tools": fixture.tools,
        "all_shapes": options.all_shapes,
        "fail_on": list(options.fail_on),
        "passed": exit_passed(options, run),
        "cases_total": len(run.results),
        "cases_failed": sum(1 for r in run.results if not r.passed),
        "cases_failed_by_severity": {
            level: sum(1 for r in run.results if not r.passed and r.case.severity == level)
            for level in LEVELS
        },
        "cases_not_run": run.not_run,
        "cases_not_applicable": sum(1 for r in run.results if r.outcome == NOT_APPLICABLE),
        "summary": summary,
        "delivery": {
            "cuts": cuts,
            "read_apart": apart,
            "undelivered": sum(1 for r in run.results if r.outcome == "undelivered"),
            "groups": delivered,
        },
        "root_causes": {
            cause: sorted({r.case.group for r in items})
            for cause, items in root_causes(run.results).items()
        },
        "cases": [_result_json(options, fixture, r) for r in run.results],
    }


def report_junit(options: HarnessOptions, results: Sequence[CaseResult]) -> ET.ElementTree:
    """JUnit XML (``--junit FILE``): one testcase per case, grouped by strategy."""
    failures = sum(1 for r in results if not r.passed)
    skipped = sum(1 for r in results if r.outcome == NOT_APPLICABLE)
    suites = ET.Element("testsuites")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name="sse-proxy test-client",
        tests=str(len(results)),
        failures=str(failures),
        errors="0",
        skipped=str(skipped),
        time=f"{sum(r.duration for r in results):.3f}",
    )
    props = ET.SubElement(suite, "properties")
    ET.SubElement(
        props, "property", name="command", value=_cmd_text(options.command or options.subject)
    )
    ET.SubElement(props, "property", name="dialect", value=options.dialect)
    for result in results:
        tc = ET.SubElement(
            suite,
            "testcase",
            classname=f"sse-proxy.{result.case.group}",
            name=result.case.name,
            time=f"{result.duration:.3f}",
        )
        if result.forced is not None:
            props = ET.SubElement(tc, "properties")
            ET.SubElement(props, "property", name="forced", value=result.applicability or "")
        if result.not_applicable is not None:
            ET.SubElement(tc, "skipped", message=result.applicability or "")
            continue
        if result.diagnosis is None:
            continue
        if result.passed:  # information (a drip read without a deadline): not a failure
            d = result.diagnosis
            ET.SubElement(tc, "system-out").text = f"{d.family}: {d.reason}"
            continue
        failure = ET.SubElement(
            tc,
            "failure",
            type=result.diagnosis.family,
            message=f"{result.diagnosis.family}: {result.diagnosis.reason}"
            + (f" ({result.applicability})" if result.forced is not None else ""),
        )
        body = [f"reproduce: {rerun_line(options, result.case)}"]
        if result.forced is not None:
            body.append(f"{result.applicability} (--all-shapes)")
        if result.diagnosis.rule:
            body.append(f"spec rule: {result.diagnosis.rule}")
        if result.cut_context:
            body.append(f"the cut falls {result.cut_context}")
        if result.outcome in ("wrong", "silent"):
            body.append(short_diff(result.expected, result.output))
        failure.text = "\n".join(body)
        if result.stderr:
            ET.SubElement(tc, "system-err").text = result.stderr_tail(40)
    ET.indent(suites)
    return ET.ElementTree(suites)
