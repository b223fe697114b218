"""The short report: one block per root cause, however many groups showed it.

A client with one bug fails many groups the same way (a per-read decoder fails ``utf8``,
``random``, ``bytewise`` and every combination that cuts characters). The diagnosis family
names the root cause, the same one in every group (a combination takes the family its
failing part got alone), so the short report gives each family once: the groups it showed
in, its first case with the diagnosis, the spec rule, the fix in CMD's language and the
command that reproduces it. ``--verbose`` gives the long form instead (every failing
group, the by-hand command, the diff: :func:`.report.failure_block`).
"""

from __future__ import annotations

from collections.abc import Sequence

from sse_proxy.tools.testclient.commands import rerun_line
from sse_proxy.tools.testclient.diagnose import OUTSIDE, first_difference
from sse_proxy.tools.testclient.hints import hint_for, runtime_of
from sse_proxy.tools.testclient.plan import (
    BASELINE,
    CUT,
    FAULTS,
    STALLS,
    HarnessOptions,
    fault_description,
)
from sse_proxy.tools.testclient.run import CaseResult
from sse_proxy.tools.testclient.shapes import variant_lines

__all__ = ["UNDELIVERED", "root_causes", "short_blocks", "wiring_fits"]

UNDELIVERED = "not delivered"
"""The block of cases whose cuts did not reach the client: the harness's, not a bug."""
_TAIL_LINES = 5


def _label(result: CaseResult) -> str:
    case = result.case
    if case.group in (FAULTS, STALLS):
        return f"{case.group}:{case.fault}"
    if case.group == CUT:
        return "cut"
    return "baseline" if case.group == BASELINE else case.group


def root_causes(results: Sequence[CaseResult]) -> dict[str, list[CaseResult]]:
    """The failing cases by root cause (diagnosis family), in plan order."""
    causes: dict[str, list[CaseResult]] = {}
    for result in results:
        if result.passed:
            continue
        if result.outcome == "undelivered":
            key = UNDELIVERED
        else:
            key = result.diagnosis.family if result.diagnosis is not None else "?"
        causes.setdefault(key, []).append(result)
    return causes


def wiring_fits(result: CaseResult) -> bool:
    """Whether a failed baseline looks like CMD not reaching its stream at all (no family
    tells anything more): nothing printed, or something else entirely."""
    d = result.diagnosis
    if d is None:
        return False
    if d.family.startswith("wiring"):
        return True
    return d.family == "wrong output" or (not result.output and d.site is None)


def short_blocks(options: HarnessOptions, items: dict[str, list[CaseResult]]) -> list[str]:
    """The report's failure blocks, one per root cause."""
    runtime = runtime_of(options.subject)
    out: list[str] = []
    for cause, cases in items.items():
        groups = list(dict.fromkeys(_label(r) for r in cases))
        many = "case" if len(cases) == 1 else "cases"
        out += ["", f"== {cause}: {', '.join(groups)} ({len(cases)} {many})"]
        first = cases[0]
        got = f": {first.delivered}" if first.delivered is not None else ""
        out.append(f"first failing case: {first.case.name}{got}")
        if cause == UNDELIVERED and first.cut_context == OUTSIDE:
            out.append(
                "  the cut falls past the end of the stream this client was sent (an MCP "
                "stream answers the client's own request, whose id and progress token make "
                "it shorter than the example's): this says nothing about the client"
            )
        elif cause == UNDELIVERED:
            out.append(
                "  the client passed, but some cuts did not reach it as reads of their "
                f"own in {first.attempts} runs (a loaded machine?): this says nothing "
                "about the client; run it again"
            )
        if cause == UNDELIVERED:
            out.append(f"  reproduce: {rerun_line(options, first.case)}")
            continue
        if first.case.fault is not None:
            out.append(f"  the fault: {fault_description(first.case.fault)}")
        if first.cut_context:
            out.append(f"  the cut falls {first.cut_context}")
        d = first.diagnosis
        assert d is not None
        out.append(f"  diagnosis: {d.family}: {d.reason}")
        if first.forced is not None:
            out.append(f"  {first.applicability} (--all-shapes)")
        if d.chunk is not None:  # a shape or token variant: the chunk and who sends it
            out += variant_lines(d, first.case.severity)
        elif d.rule:
            out.append(f"  spec rule: {d.rule}")
        hint = None if d.chunk is not None else hint_for(d.family, runtime)
        if hint:
            out.append(f"  fix{f' ({runtime})' if runtime else ''}: {hint}")
        out.append(f"  reproduce: {rerun_line(options, first.case)}")
        if first.outcome == "wrong" and not first.flooded:
            out.append(f"  first difference {first_difference(first.expected, first.output)}")
        tail = first.stderr_tail(_TAIL_LINES)
        if tail and first.outcome in ("crash", "hang"):
            out.append("  stderr tail:")
            out += ["    " + line for line in tail.splitlines()]
        if first.case.group == CUT and len(cases) > 1:
            cuts = [str(r.case.cut) for r in cases if r.case.cut is not None]
            more = f" and {len(cuts) - 20} more" if len(cuts) > 20 else ""
            out.append(f"  failing cuts: {', '.join(cuts[:20])}{more}")
    if out:
        out += ["", "(--verbose: every failing group, the by-hand command and the diff)"]
    return out
