"""`sse-proxy test-client -- CMD`: break a client on purpose, say which boundary it gets wrong.

CMD is any program, in any language, that streams one answer from the URL it is given and
prints the text. It runs once per case, each case behind its own in-process proxy, and what
it printed is compared with the text it must print:

* a ``frames`` baseline (whole frames, one write each: the friendliest stream there is),
  run first; when it fails the run stops, since every other case would fail the same way;
* every re-chunking strategy, every spec-equivalent rewrite on its own and a few
  combinations, each with several seeds, against the built-in mock upstream (or a
  recording or raw capture, ``--fixture``), the proxy in chaos mode;
* ``shapes`` and ``tokens``: the same message in the shapes real providers send (an Azure
  first chunk without choices, reasoning beside ``content: null``, a ``thinking`` block)
  and in other deltas (one character each, split inside grapheme clusters), one variant
  per case (:mod:`.shapes`); with ``--tools`` the fixture ends with three tool calls, which
  the client prints too (:mod:`sse_proxy.tools.fixtures.tools`);
* ``faults``: the stream stops inside a frame (``unterminated``), ends between frames
  without its terminal marker (``no_terminal``), sends the API's error event
  (``error_event``) or is reset (``reset``): the fixtures' fault names; there the client
  must *report failure*;
* ``stalls``: faults in time (:mod:`.stalls`): the text stops while comments keep the
  connection busy, or with nothing at all, the body stays open after the terminal marker,
  the rest drips; the client must report a stall within ``--patience`` seconds and stop
  at the terminal marker;
* for a short fixture, every two-way cut: the stream is served in exactly two writes, split
  at byte ``c``, for every ``c`` in ``1..n-1``.

With ``--dialect mcp`` CMD is an MCP client: each case has the mock's MCP server, which
answers the client's tool call with the stream the case needs (:mod:`.mcp`).

Every case is ``real`` (real providers and networks produce it) or ``spec`` (allowed,
rarely seen) (:mod:`.severity`); ``--fail-on`` chooses which failures fail the run.

Modules: :mod:`.plan` (options, cases), :mod:`.fixture` (what is served, and its faults),
:mod:`.faults` (the breaking upstream), :mod:`.run` (running), :mod:`.progress`,
:mod:`.diagnose` (verdicts), :mod:`.crash` (crash attribution), :mod:`.hints` (the fix
in CMD's language), :mod:`.process` (running CMD so the harness survives it),
:mod:`.watch` (how the cuts reached the client), :mod:`.shapes` and :mod:`.calls` (the
shape, token and tool-call diagnoses), :mod:`.summary` (one block per root cause),
:mod:`.severity` and :mod:`.report` (text; :mod:`.formats`: JSON, JUnit).
"""

from __future__ import annotations

import asyncio
import json
import os
import shlex
import shutil
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from sse_proxy.core.dialects.registry import DIALECTS
from sse_proxy.errors import UsageError
from sse_proxy.names import DIALECT_PATHS
from sse_proxy.rechunk.timefaults import DAY
from sse_proxy.tools.fixtures.streams import TOOL_DIALECTS
from sse_proxy.tools.testclient.diagnose import Diagnosis, diagnose, diagnose_fault
from sse_proxy.tools.testclient.fixture import load_fixture
from sse_proxy.tools.testclient.formats import report_json, report_junit
from sse_proxy.tools.testclient.plan import (
    DEFAULT_COMBOS,
    Case,
    HarnessOptions,
    fault_kinds,
    plan_cases,
    stall_kinds,
)
from sse_proxy.tools.testclient.progress import Progress
from sse_proxy.tools.testclient.report import cut_pass_note, exit_passed, render_report
from sse_proxy.tools.testclient.run import CaseResult, run_cases
from sse_proxy.tools.testclient.shapes import variants_for

__all__ = [
    "DEFAULT_COMBOS",
    "Case",
    "CaseResult",
    "Diagnosis",
    "HarnessOptions",
    "diagnose",
    "diagnose_fault",
    "plan_cases",
    "run_test_client",
]


def _validate_browser(options: HarnessOptions) -> None:
    from sse_proxy.tools.testclient.browser import find_browser

    if options.command:
        raise UsageError("test-client: give either -- CMD or --browser NAME --script FILE.js")
    if not options.script:
        raise UsageError("--browser needs --script FILE.js (an ES module: its default export)")
    if not Path(options.script).is_file():
        raise UsageError(f"--script: no such file: {options.script!r}")
    find_browser(options.browser or "")


def _validate(options: HarnessOptions) -> None:
    command = options.command
    if options.browser is not None:
        _validate_browser(options)
    elif options.script is not None:
        raise UsageError("--script needs --browser chromium|firefox")
    elif not command:
        raise UsageError(
            "test-client needs a command to test: sse-proxy test-client -- CMD ... "
            "(or --browser chromium|firefox --script FILE.js)"
        )
    else:
        exe = command[0]
        if os.sep not in exe and shutil.which(exe) is None:
            raise UsageError(f"command not found: {exe!r}")
        if os.sep in exe and not os.access(exe, os.X_OK):
            raise UsageError(f"command not found or not executable: {exe!r}")
    if options.dialect not in DIALECT_PATHS:
        raise UsageError(
            f"--dialect must be one of {', '.join(DIALECT_PATHS)}, not {options.dialect!r}"
        )
    if options.seeds < 1:
        raise UsageError("--seeds must be at least 1")
    if options.jobs is not None and options.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if not options.timeout > 0:
        raise UsageError("--timeout must be a positive number of seconds")
    if options.patience is not None and not 0 < options.patience <= DAY:
        raise UsageError(
            f"--patience must be above 0 and at most {DAY:g} seconds, not {options.patience:g}"
        )
    if options.seed is not None and options.seed < 0:
        raise UsageError("--seed must be a non-negative integer")
    if options.tools and options.fixture:
        raise UsageError("--tools serves the built-in tool-call fixture; drop --fixture")
    if options.tools and options.dialect not in TOOL_DIALECTS:
        raise UsageError(f"--tools: the {options.dialect} dialect has no tool calls")
    if DIALECTS[options.dialect].rpc and (options.fixture or options.browser):
        # a recording answers one request id, and a page runs no MCP session
        flag = "--fixture" if options.fixture else "--browser"
        raise UsageError(
            f"{flag} does not apply to --dialect {options.dialect}: its cases run against "
            "the mock's MCP server, which answers each request the client sends"
        )
    if options.chaos_k < 0 or options.delay_ms < 0:
        raise UsageError("--chaos-k and --delay-ms must not be negative")
    for flag, path in (
        ("--report", options.report),
        ("--junit", options.junit),
        ("--html", options.html),
    ):
        if path is not None and not Path(path).resolve().parent.is_dir():
            raise UsageError(f"{flag}: no such directory for {path!r}")


def _configure_proxy_log(path: str | None) -> IO[str]:
    from sse_proxy.obs.logs import configure_logging

    try:
        stream = open(path, "a", encoding="utf-8") if path else open(os.devnull, "w")  # noqa: SIM115
    except OSError as exc:
        raise UsageError(f"cannot write {path!r}: {exc.strerror or exc}") from None
    configure_logging(fmt="json", stream=stream, level="info" if path else "error")
    return stream


def _write_file(path: str, write: Any) -> None:
    try:
        write(path)
    except OSError as exc:
        raise UsageError(f"cannot write {path!r}: {exc.strerror or exc}") from None


def run_test_client(options: HarnessOptions, out: IO[str] | None = None) -> int:
    """Run every case; print the report. 0: all passed, 1: any failed (usage errors raise)."""
    _validate(options)
    fixture = load_fixture(options.dialect, options.fixture, tools=options.tools)
    seeds = [options.seed] if options.seed is not None else list(range(1, options.seeds + 1))
    shapes, tokens = variants_for(fixture.dialect, tools=options.tools)
    cases = plan_cases(
        only=options.only,
        skip=options.skip,
        seeds=seeds,
        cut_points=max(len(fixture.short) - 1, 0),
        exhaustive=options.exhaustive,
        faults=fault_kinds(fixture.dialect),
        variants=[*shapes, *tokens],
        stalls=stall_kinds(fixture.dialect),
    )
    log_stream = _configure_proxy_log(options.proxy_log)
    try:
        run = asyncio.run(run_cases(options, fixture, cases, Progress(cases)))
    finally:
        log_stream.close()
    text = render_report(options, fixture, run)
    if not run.not_run:
        text += cut_pass_note(options, fixture, run.results)
    stream = out if out is not None else sys.stdout
    stream.write(text)
    stream.flush()
    if options.report:
        data = report_json(options, fixture, run)
        _write_file(
            options.report,
            lambda p: Path(p).write_text(
                json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
            ),
        )
    if options.junit:
        tree = report_junit(options, run.results)
        _write_file(options.junit, lambda p: tree.write(p, encoding="utf-8", xml_declaration=True))
    if options.html:
        _write_html(options, fixture, run.results)
    return 0 if exit_passed(options, run) else 1


def _write_html(options: HarnessOptions, fixture: Any, results: Sequence[CaseResult]) -> None:
    """``--html FILE``: the cases as plain values for :mod:`sse_proxy.inspect.report`."""
    from sse_proxy.inspect.report import ReportCase, write_report
    from sse_proxy.tools.testclient.report import delivery_total, rerun_line

    cases = []
    for r in results:
        cut = r.case.cut
        d = r.diagnosis
        cases.append(
            ReportCase(
                name=r.case.name,
                verdict=r.outcome.replace("_", " ") + (" (forced)" if r.forced else ""),
                received=r.output,
                expected=r.expected,
                diagnosis=None if d is None else f"{d.family}: {d.reason}",
                note=(f"{r.applicability}; " if r.applicability else "")
                + (f"cut {r.cut_context}; " if r.cut_context else "")
                + (f"{r.delivered}; " if r.delivered is not None else "")
                + f"rerun: {rerun_line(options, r.case)}",
                stream=fixture.short if cut is not None else (r.sent[0] if r.sent else None),
                cuts=(cut,) if cut is not None else (r.sent[1] if r.sent else ()),
                passed=r.passed,
                dialect=fixture.dialect,
                strip_if_passed=False,
            )
        )
    failed = sum(not r.passed for r in results)
    skipped = sum(1 for r in results if r.not_applicable is not None)
    cuts, apart = delivery_total(results)
    got = ""
    if cuts:
        got = f" {cuts} cuts, paced." if apart is None else f" {apart} of {cuts} cuts read apart."
    if skipped:
        got += f" {skipped} not applicable to this client's request."
    forced = sum(1 for r in results if r.forced is not None)
    if forced:
        got += f" {forced} forced (--all-shapes)."
    write_report(
        options.html or "",
        f"sse-proxy test-client: {shlex.join(options.command or options.subject)}",
        sorted(cases, key=lambda c: c.passed),
        intro=f"{len(results)} cases, {failed} failed; {fixture.dialect} fixture.{got}",
    )
