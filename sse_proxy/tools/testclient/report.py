"""The human report: the tables, then the failures (:mod:`.formats` has JSON and JUnit).

Each failure comes with two ways to reproduce it: ``reproduce`` re-runs exactly that case
through `test-client`, and ``by hand`` is one shell command, pasteable as is, that starts
the upstream and a proxy with the case's settings on free ports, waits until both listen,
runs CMD with every variable the harness sets (dummy keys included), and stops both.
"""

from __future__ import annotations

import json
from collections.abc import Sequence

from sse_proxy.tools.testclient.commands import _cmd_text, by_hand, rerun_line
from sse_proxy.tools.testclient.diagnose import first_difference, short_diff
from sse_proxy.tools.testclient.fixture import Fixture, stream_path
from sse_proxy.tools.testclient.hints import hint_for, runtime_of
from sse_proxy.tools.testclient.mcp import mcp_lines
from sse_proxy.tools.testclient.mcp_resume import mcp_reconnects_line
from sse_proxy.tools.testclient.plan import (
    BASELINE,
    CUT,
    CUT_BUDGET,
    FAULTS,
    RESUME,
    STALLS,
    HarnessOptions,
    fault_description,
)
from sse_proxy.tools.testclient.resume import reconnects_line
from sse_proxy.tools.testclient.run import NOT_APPLICABLE, CaseResult, RunResult
from sse_proxy.tools.testclient.severity import LEVELS
from sse_proxy.tools.testclient.shapes import variant_lines, variant_summary
from sse_proxy.tools.testclient.summary import root_causes, short_blocks, wiring_fits

__all__ = [
    "by_hand",
    "delivery_total",
    "exit_passed",
    "failure_block",
    "render_report",
    "rerun_line",
]

_CHAOS_OUTCOMES = ("pass", "wrong", "crash", "hang")
_FAULT_OUTCOMES = ("reported", "silent", "hang")


def _groups(results: Sequence[CaseResult]) -> dict[str, list[CaseResult]]:
    groups: dict[str, list[CaseResult]] = {}
    for result in results:
        groups.setdefault(result.case.group, []).append(result)
    return groups


def _rows(results: Sequence[CaseResult]) -> dict[str, list[CaseResult]]:
    """The table's rows (each shape and token variant a row of its own), real ones first
    (:mod:`.severity`), in plan order within each level."""
    rows: dict[str, list[CaseResult]] = {}
    for result in results:
        rows.setdefault(result.case.row, []).append(result)
    level = {name: i for i, name in enumerate(LEVELS)}
    return dict(sorted(rows.items(), key=lambda kv: level.get(kv[1][0].case.severity, 0)))


def exit_passed(options: HarnessOptions, run: RunResult) -> bool:
    """Whether the run passes: every case ran, and none failed at a ``--fail-on`` level."""
    failing = [r for r in run.results if not r.passed and r.case.severity in options.fail_on]
    return not failing and not run.not_run


def _group_label(group: str) -> str:
    if group == BASELINE:
        return "baseline (frames)"
    if group == CUT:
        return "cut (every offset)"
    return group


def _families(failed: Sequence[CaseResult]) -> str:
    seen: list[str] = []
    for result in failed:
        if result.diagnosis is not None and result.diagnosis.family not in seen:
            seen.append(result.diagnosis.family)
    return ", ".join(seen)


def _read_apart(items: Sequence[CaseResult]) -> str:
    """``273/273``: the group's cuts read apart of its cuts; ``-``: nothing was cut."""
    got = [r.delivered for r in items if r.delivered is not None and r.delivered.cuts]
    if not got:
        return "-"
    cuts = sum(d.cuts for d in got)
    if any(d.read_apart is None for d in got):
        return f"{cuts} paced"
    return f"{sum(d.read_apart or 0 for d in got)}/{cuts}"


def delivery_total(results: Sequence[CaseResult]) -> tuple[int, int | None]:
    """(cuts, read apart; None: some were paced) over ``results``."""
    got = [r.delivered for r in results if r.delivered is not None]
    cuts = sum(d.cuts for d in got)
    if any(d.read_apart is None and d.cuts for d in got):
        return cuts, None
    return cuts, sum(d.read_apart or 0 for d in got)


def _applicability(items: Sequence[CaseResult]) -> str | None:
    """A shape row's ``not applicable: ...`` or ``forced: ...`` (None: neither)."""
    return next((r.applicability for r in items if r.applicability is not None), None)


def _fault_count(items: Sequence[CaseResult], outcome: str) -> int:
    want = "pass" if outcome == "reported" else outcome
    return sum(1 for r in items if r.outcome == want)


def render_report(options: HarnessOptions, fixture: Fixture, run: RunResult) -> str:
    """The human report: the strategy x outcome table, the faults table, then each failing
    group's first case with its diagnosis and how to reproduce it."""
    results = run.results
    if options.fixture:
        what = "raw capture" if fixture.raw_capture else "recording"
        source = f"{what} {options.fixture}"
    else:
        source = "built-in mock upstream"
    endpoint = fixture.path
    resume_path = stream_path(fixture, resume=True)
    if resume_path != endpoint and any(r.case.group == RESUME for r in results):
        endpoint += f" (resume: {resume_path})"  # Gemini: its resumable stream is an interaction
    out = [
        f"sse-proxy test-client: {_cmd_text(options.command or options.subject)}",
        f"dialect {fixture.dialect}, {source}, endpoint {endpoint}",
    ]
    if fixture.note:
        out.append(f"note: {fixture.note}")
    out.append("")
    groups = _rows(results)
    chaos = {g: items for g, items in groups.items() if g not in (FAULTS, STALLS, RESUME)}
    width = max([len(_group_label(g)) for g in chaos] + [24])
    if chaos:
        header = (
            f"{'strategy':<{width}}  {'seen':<4}  {'cases':>5}  "
            + "  ".join(f"{o:>5}" for o in _CHAOS_OUTCOMES)
            + f"  {'read apart':>10}"
        )
        out += [header + "  verdict", "-" * (len(header) + 30)]
        for group, items in chaos.items():
            counts = {o: sum(1 for r in items if r.outcome == o) for o in _CHAOS_OUTCOMES}
            failed = [r for r in items if not r.passed and r.outcome != "undelivered"]
            undelivered = sum(1 for r in items if r.outcome == "undelivered")
            verdict = "ok" if not failed else f"FAIL: {_families(failed)}"
            if undelivered:
                note = f"NOT DELIVERED ({undelivered} of {len(items)})"
                verdict = note if not failed else f"{verdict}; {note}"
            marked = _applicability(items)
            if marked is not None and all(r.outcome == NOT_APPLICABLE for r in items):
                verdict = marked  # the stream had no such shape: nothing was judged
            elif marked is not None:
                verdict = f"{verdict} ({marked})"
            seen = items[0].case.severity
            row = (
                f"{_group_label(group):<{width}}  {seen:<4}  {len(items):>5}  "
                + "  ".join(f"{counts[o]:>5}" for o in _CHAOS_OUTCOMES)
                + f"  {_read_apart(items):>10}"
            )
            out.append(f"{row}  {verdict}")
        out.append("-" * (len(header) + 30))
        out += variant_summary(results)
    faults = groups.get(FAULTS, [])
    if faults:
        out += ["", "faults: the stream breaks; a correct client must report failure (exit != 0)"]
        header = f"{'fault':<{width}}  " + "  ".join(f"{o:>8}" for o in _FAULT_OUTCOMES)
        out += [header + "  verdict", "-" * (len(header) + 30)]
        for result in faults:
            kind = result.case.fault or ""
            cells = "  ".join(f"{_fault_count([result], o):>8}" for o in _FAULT_OUTCOMES)
            verdict = (
                "ok: reported failure"
                if result.passed
                else f"FAIL: {result.diagnosis.family if result.diagnosis else '?'}"
            )
            out.append(f"{kind:<{width}}  {cells}  {verdict}")
        out.append("-" * (len(header) + 30))
    stalls = groups.get(STALLS, [])
    if stalls:
        out += _stalls_table(options, stalls, width)
    resumed = groups.get(RESUME, [])
    if resumed:
        out += _resume_table(resumed, width)
    total_failed = sum(1 for r in results if not r.passed)
    cuts, apart = delivery_total(results)
    got = ""
    if cuts:
        got = f"; {cuts} cuts, paced" if apart is None else f"; {apart} of {cuts} cuts read apart"
    skipped = sum(1 for r in results if r.outcome == NOT_APPLICABLE)
    passed = len(results) - total_failed - skipped
    tally = f"{len(results)} cases, {passed} passed, {total_failed} failed"
    if skipped:
        tally += f", {skipped} not applicable to this client's request"
    out.append(tally + got)
    out += mcp_lines(results)
    forced = sum(1 for r in results if r.forced is not None)
    dropped = sum(1 for r in results if r.outcome == NOT_APPLICABLE and r.case.group == RESUME)
    if dropped:
        out.append(
            f"({dropped} drops test fields the client's MCP revision does not have: "
            "2026-07-28 has no priming event and no retry)"
        )
    skipped -= dropped
    if skipped:
        out.append(
            f"({skipped} shape variants need what the client's request did not ask for, such "
            "as n > 1 or tools: providers never send them to it; --all-shapes serves them "
            "anyway, for hardening)"
        )
    elif forced:
        out.append(
            f"({forced} shape variants were forced (--all-shapes): the client's request did "
            "not ask for what they need, so providers would not send them to it)"
        )
    ignored = [r for r in results if not r.passed and r.case.severity not in options.fail_on]
    if ignored:
        levels = "/".join(options.fail_on)
        out.append(
            f"({len(ignored)} failed cases are {ignored[0].case.severity}-only and do not fail "
            f"the run: --fail-on {levels})"
        )
    failing = {g: [r for r in items if not r.passed] for g, items in groups.items()}
    failing = {g: items for g, items in failing.items() if items}
    if BASELINE in failing:
        stop = (
            f" The run stopped there: {run.not_run} other cases were not run "
            "(--keep-going runs them anyway)."
            if run.not_run
            else " The failures below may share this cause."
        )
        first = failing[BASELINE][0]
        if wiring_fits(first) and options.browser is not None:
            why = (
                "Check that the script's default export fetches the url it is given (with "
                "the body and headers), resolves to the streamed text only, and settles at "
                "the end of the stream (an EventSource reconnects: close it)."
            )
        elif wiring_fits(first):
            why = (
                "Check that CMD reads its URL from OPENAI_BASE_URL / ANTHROPIC_BASE_URL / "
                "SSE_PROXY_URL / SSE_PROXY_STREAM_URL, prints only the streamed text and "
                "exits at the end of the stream."
            )
        else:
            family = first.diagnosis.family if first.diagnosis is not None else "?"
            why = f"The client reached its stream; its bug is below ({family})."
        out += [
            "",
            "The baseline failed: even whole frames, one per write, do not give the expected "
            f"text. {why}{stop}",
        ]
    if options.verbose:
        for group, items in failing.items():
            out += failure_block(options, fixture, group, items, len(groups[group]))
    else:
        out += short_blocks(options, root_causes(results))
    return "\n".join(out) + "\n"


def _stalls_table(options: HarnessOptions, items: Sequence[CaseResult], width: int) -> list[str]:
    """One row per fault in time: what the client did, and when (from the fault's start)."""
    out = [
        "",
        f"stalls: faults in time; a correct client reports a stall within "
        f"{options.stall_patience:g} s (--patience) and stops at the terminal marker",
    ]
    header = f"{'fault':<{width}}  {'outcome':>8}  {'after':>7}"
    out += [header + "  verdict", "-" * (len(header) + 30)]
    for result in items:
        timing = result.timing
        after = "-"
        if timing is not None and timing.began is not None:
            after = f"{max(timing.ended - timing.began, 0.0):.1f} s"
        d = result.diagnosis
        if result.outcome == "info" and d is not None:
            verdict = f"info: {d.reason.removeprefix('information: ').split(': ')[0]}"
        elif result.passed:
            verdict = (
                "ok: whole answer at the terminal marker"
                if result.case.fault == "linger" or result.exit_code == 0
                else f"ok: reported the stall (exit {result.exit_code})"
            )
        else:
            said = "?" if d is None else d.reason.split(": ")
            verdict = f"FAIL: {': '.join(said[:2] if said[0] == 'hang' else said[:1])}"
        out.append(
            f"{result.case.fault or '':<{width}}  {result.outcome:>8}  {after:>7}  {verdict}"
        )
    out.append("-" * (len(header) + 30))
    return out


def _resume_table(items: Sequence[CaseResult], width: int) -> list[str]:
    """One row per drop: what the client did, its reconnects (the first's delay and cursor)."""
    said = (
        "a correct client resumes from its cursor, once per drop, after the retry delay, and "
        "stops at a 204"
    )
    if items and items[0].mcp_calls is not None:
        said = (
            "a correct MCP client resumes the tool call's stream by GET with Last-Event-ID "
            "after the retry delay (2025-11-25), or re-issues the call under a new id "
            "(2026-07-28); the result once"
        )
    out = ["", f"resume: the connection drops; {said}"]
    header = f"{'drop':<{width}}  {'outcome':>10}  {'reconnects':<36}"
    out += [header + "  verdict", "-" * (len(header) + 30)]
    for result in items:
        seen = result.resume
        line = "-" if seen is None else reconnects_line(seen)
        d = result.diagnosis
        if result.mcp_calls is not None:
            line = "-" if seen is None else mcp_reconnects_line(seen)
            verdict = _mcp_resume_verdict(result)
        elif result.passed:
            verdict = "ok: resumed exactly" if d is None else "ok: replayed and skipped"
            if result.case.fault == "drop_204":
                verdict = "ok: stopped at the 204"
            elif result.case.fault == "drop_too_old":
                verdict = f"ok: reported the refused resume (exit {result.exit_code})"
        else:
            verdict = f"FAIL: {'?' if d is None else d.reason.split(': ')[0]}"
        outcome = "n/a" if result.outcome == NOT_APPLICABLE else result.outcome
        out.append(f"{result.case.fault or '':<{width}}  {outcome:>10}  {line:<36}  {verdict}")
    out.append("-" * (len(header) + 30))
    return out


def _mcp_resume_verdict(result: CaseResult) -> str:
    """An MCP client's ``resume`` row: how it went on after the drop, in its revision's way."""
    d = result.diagnosis
    if not result.passed:
        return f"FAIL: {'?' if d is None else d.reason.split(': ')[0]}"
    if result.outcome == NOT_APPLICABLE:
        return "n/a: 2026-07-28 has no priming, no retry"
    requests = () if result.resume is None else result.resume.requests
    if any(r.method == "GET" and r.cursor is not None for r in requests):
        return "ok: resumed with Last-Event-ID"
    if len(result.mcp_calls or ()) > 1:
        return "ok: re-issued under a new id"
    return f"ok: reported the lost call (exit {result.exit_code})"


def failure_block(
    options: HarnessOptions, fixture: Fixture, group: str, items: list[CaseResult], n: int
) -> list[str]:
    """The long form (``--verbose``): one failing group, its first case in full."""
    first = items[0]
    diagnosis = first.diagnosis
    assert diagnosis is not None
    out = ["", f"== {_group_label(group)}: {len(items)} of {n} failed"]
    got = f": {first.delivered}" if first.delivered is not None else ""
    out.append(f"first failing case: {first.case.name}{got}")
    if first.case.fault is not None:
        out.append(f"  the fault: {fault_description(first.case.fault)}")
    if first.cut_context:
        out.append(f"  the cut falls {first.cut_context}")
    out.append(f"  diagnosis: {diagnosis.family}: {diagnosis.reason}")
    if first.forced is not None:
        out.append(f"  {first.applicability} (--all-shapes)")
    if diagnosis.chunk is not None:
        out += variant_lines(diagnosis, first.case.severity)
    elif diagnosis.rule:
        out.append(f"  spec rule: {diagnosis.rule}")
    runtime = runtime_of(options.subject)
    hint = None if diagnosis.chunk is not None else hint_for(diagnosis.family, runtime)
    if hint:
        out.append(f"  fix{f' ({runtime})' if runtime else ''}: {hint}")
    if first.parts:
        alone = ", ".join(
            f"{p} {'passes' if d is None else 'fails: ' + d.family}" for p, d in first.parts.items()
        )
        out.append(f"  each part alone: {alone}")
    out.append(f"  reproduce: {rerun_line(options, first.case)}")
    hand = by_hand(options, fixture, first.case)
    if hand:
        out.append(f"  by hand:   {hand}")
    if first.outcome == "silent":
        ending = json.dumps(first.output[-40:], ensure_ascii=False)
        out.append(f"  printed {len(first.output)} characters, ending ...{ending}, and exited 0")
        if len(items) > 1:
            out.append(f"  also silent: {', '.join(str(r.case.fault) for r in items[1:])}")
    elif first.outcome == "wrong" and not first.flooded and first.output != first.expected:
        out.append(f"  first difference {first_difference(first.expected, first.output)}")
        out.append("  diff (expected -> got, one word per line):")
        out += ["    " + line for line in short_diff(first.expected, first.output).splitlines()]
    tail = first.stderr_tail()
    if tail:
        out.append("  stderr tail:")
        out += ["    " + line for line in tail.splitlines()]
    elif first.outcome in ("crash", "hang"):
        out.append("  stderr: (empty)")
    if group == CUT and len(items) > 1:
        shown = ", ".join(str(r.case.cut) for r in items[:20])
        more = f" and {len(items) - 20} more" if len(items) > 20 else ""
        out.append(f"  failing cuts: {shown}{more}")
    return out


def cut_pass_note(options: HarnessOptions, fixture: Fixture, results: Sequence[CaseResult]) -> str:
    """Why no cut cases ran by default, when that is so."""
    skipped_cuts = options.only is None and options.exhaustive is None
    if skipped_cuts and not any(r.case.cut is not None for r in results):
        return (
            f"\n(every-cut pass skipped: {len(fixture.short) - 1} cut points in the short "
            f"{fixture.dialect} fixture, over the default budget of {CUT_BUDGET}; "
            "run it with --exhaustive)\n"
        )
    return ""
