"""Running the cases: per case an upstream and a proxy on this loop, CMD as a process.

The baseline runs first; when it fails the run stops there (unless ``keep_going``): a
client that cannot read the friendliest stream would fail every other case for the same
reason, and a hanging one would cost the timeout in each. Then the other cases run in
parallel. A combination that fails has its parts run alone (``probe`` cases, reusing the
run's own results where they exist) so its diagnosis names the part at fault.

Every case's cuts are counted as they reach the client (:mod:`.watch`): a case some of
whose cuts were not read apart is run again (:data:`ATTEMPTS` in all); one that passed
without ever getting them all through proved nothing about them and is reported
``undelivered``: never a pass, and not the client's failure either. With the built-in mock or a
recording the upstream and the proxy run in lockstep (:mod:`sse_proxy.tools.lockstep`), so
a seed makes the same cuts on every run.
"""

from __future__ import annotations

import asyncio
import json
import os
import time
from collections.abc import Mapping, Sequence
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Final

from sse_proxy.core.dialects.registry import DIALECTS
from sse_proxy.names import DIALECT_PATHS
from sse_proxy.recording import Recording
from sse_proxy.server.keys import STREAM_TAPS
from sse_proxy.server.taps import ClientWrites
from sse_proxy.tools.fixtures.mcp import McpCall
from sse_proxy.tools.fixtures.resume import INTERACTIONS_PATH
from sse_proxy.tools.lockstep import Lockstep
from sse_proxy.tools.stack import Stack, Stoppable, UpstreamStarter, proxy_stack
from sse_proxy.tools.testclient.diagnose import (
    Diagnosis,
    attribute_crash,
    describe_cut,
    diagnose,
    diagnose_fault,
    flood_diagnosis,
    normalize_output,
    split_parts,
    wiring_diagnosis,
)
from sse_proxy.tools.testclient.fixture import (
    DUMMY_KEYS,
    Fixture,
    request_body,
    stream_path,
    uses_first_text,
)
from sse_proxy.tools.testclient.mcp import (
    MCP_ENV,
    WRONG_FAMILIES,
    McpSeen,
    explain_mcp,
    hang_on_broken_stream,
    judge_reissue,
    mcp_upstream,
    sent_short,
    sent_stream,
)
from sse_proxy.tools.testclient.mcp_resume import diagnose_mcp_resume
from sse_proxy.tools.testclient.plan import BASELINE, RESUME, STALLS, Case, HarnessOptions
from sse_proxy.tools.testclient.process import Ran, output_limit, run_command
from sse_proxy.tools.testclient.progress import Progress
from sse_proxy.tools.testclient.resume import (
    RESUME_LARGE,
    RESUME_PACE,
    RESUME_RETRY,
    ResumeLog,
    ResumeSeen,
    diagnose_resume,
)
from sse_proxy.tools.testclient.shapes import diagnose_variant, is_variant_group
from sse_proxy.tools.testclient.stalls import (
    Timing,
    diagnose_stall,
    keepalive_every,
    notes_before,
    proxy_settings,
    text_before,
)
from sse_proxy.tools.testclient.watch import CaseWatch, Delivered

if TYPE_CHECKING:
    from sse_proxy.tools.testclient.browser import BrowserRun

__all__ = [
    "ATTEMPTS",
    "DUMMY_KEYS",
    "NOT_APPLICABLE",
    "OUTCOMES",
    "CaseResult",
    "RunResult",
    "case_stack",
    "client_env",
    "request_body",
    "run_cases",
]

OUTCOMES: Final[tuple[str, ...]] = (
    "pass",
    "wrong",
    "crash",
    "hang",
    "silent",
    "undelivered",
    "not_applicable",
    "info",
    "duplicated",
    "lost",
    "no_resume",
    "too_early",
    "storm",
    "looped",
)
"""``silent``: a fault case the client did not report (exit 0 on a broken stream);
``undelivered``: the client passed, but not every cut reached it as a read boundary;
``not_applicable``: a shape variant the client's request did not make possible (``n > 1``,
tools...) was left out of its stream: the case says nothing, and does not fail; ``info``:
not a failure, but worth knowing (a ``stalls:drip`` case the client read on through
without a whole-answer deadline, a drop it resumed by a whole replay). The ``resume``
group's own: ``duplicated``, ``lost``, ``no_resume``, ``too_early``, ``storm``, ``looped``
(:mod:`.resume`)."""
NOT_APPLICABLE: Final = "not_applicable"
ATTEMPTS: Final = 3
"""Runs of a case that passed without every cut read apart, before it is ``undelivered``."""
_STDERR_TAIL_LINES = 12


@dataclass(slots=True)
class CaseResult:
    """What one run of CMD did and what the harness made of it."""

    case: Case
    outcome: str
    exit_code: int | None
    output: str
    stderr: str
    duration: float
    expected: str
    diagnosis: Diagnosis | None = None
    cut_context: str | None = None
    parts: dict[str, Diagnosis | None] = field(default_factory=dict)
    sent: tuple[bytes, tuple[int, ...]] | None = None  # (bytes, write ends) with --html
    delivered: Delivered | None = None
    """The case's cuts and how many the client read apart (None: nothing was cut)."""
    attempts: int = 1
    flooded: bool = False
    final_bytes: bytes | None = None
    """The last bytes the client was sent (re-chunked streams), for the diagnosis."""
    mcp_calls: tuple[McpCall, ...] | None = None
    """MCP: the tool calls the case's server answered (None: not an MCP case)."""
    not_applicable: str | None = None
    """A shape case left out: what the client's request did not ask for (``n > 1``)."""
    forced: str | None = None
    """A shape case served with ``--all-shapes`` although the request did not ask for
    what it needs: that (``n > 1``)."""
    timing: Timing | None = None
    """A ``stalls`` case: when the fault began and when the client ended."""
    resume: ResumeSeen | None = None
    """A ``resume`` case: every request the case's mock saw."""

    @property
    def passed(self) -> bool:
        """Not failed: it passed, it is information only, or it did not apply to the
        client's request."""
        return self.outcome in ("pass", "info", NOT_APPLICABLE)

    @property
    def applicability(self) -> str | None:
        """``not applicable: the request did not ask for n > 1``, ``forced: ...``, or None."""
        if self.not_applicable is not None:
            return f"not applicable: the request did not ask for {self.not_applicable}"
        if self.forced is not None:
            return f"forced: the request did not ask for {self.forced}"
        return None

    def stderr_tail(self, lines: int = _STDERR_TAIL_LINES) -> str:
        return "\n".join(self.stderr.rstrip().splitlines()[-lines:])


@dataclass(slots=True)
class RunResult:
    """The results in plan order, and the cases not run because the baseline failed."""

    results: list[CaseResult]
    not_run: int = 0


def client_env(
    url: str, fixture: Fixture, case_name: str, *, resume: bool = False
) -> dict[str, str]:
    """The variables CMD gets (on top of the caller's environment), dummy keys included;
    an MCP client also the tool to call and its arguments; a ``resume`` case
    ``SSE_PROXY_RESUME=1`` (and a Responses body asking for background mode, a Gemini
    client the Interactions endpoint, with the resume URL's template in
    ``SSE_PROXY_RESUME_URL``)."""
    body = request_body(fixture, resume=resume)
    env = {
        "SSE_PROXY_URL": url,
        "OPENAI_BASE_URL": f"{url}/v1",
        "ANTHROPIC_BASE_URL": url,
        "GOOGLE_GEMINI_BASE_URL": url,
        "SSE_PROXY_DIALECT": fixture.dialect,
        "SSE_PROXY_STREAM_URL": url + stream_path(fixture, resume=resume),
        "SSE_PROXY_STREAM_BODY": json.dumps(body, ensure_ascii=False),
        "SSE_PROXY_CASE": case_name,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    if fixture.tools:
        env["SSE_PROXY_TOOLS"] = "1"  # print the text, then a tool_call line per call
    if resume:
        env["SSE_PROXY_RESUME"] = "1"
        env["SSE_PROXY_RESUME_URL"] = resume_url(url, fixture.dialect)
    if DIALECTS[fixture.dialect].rpc:
        env.update(MCP_ENV)
    for key, value in DUMMY_KEYS.items():
        env[key] = os.environ.get(key, value)
    return env


def _missed(got: Delivered) -> bool:
    """Some cuts were measured not to reach the client apart (paced ones are unknown)."""
    return got.read_apart is not None and got.read_apart < got.cuts


def explain_tool_failure(
    diagnosis: Diagnosis, expected: str, output: str, code: int | None, stderr: str
) -> Diagnosis:
    """With the tool-call fixture: a failure about the calls says so (``tool calls (...)``)."""
    from dataclasses import replace

    from sse_proxy.tools.testclient.calls import explain_calls, json_crash

    found = explain_calls(expected, output) if code == 0 else None
    if found is not None:
        kind, why = found
        return replace(diagnosis, family=f"tool calls ({kind})", reason=why)
    if code not in (0, None) and json_crash(stderr):
        return replace(
            diagnosis,
            family="tool calls (arguments parsed per fragment)",
            reason=f"{diagnosis.reason}; the crash is a JSON parser's: tool-call arguments "
            "arrive as fragments of one JSON text per call; join them and parse once the "
            "call is complete",
        )
    return diagnosis


def _parts(strategy: str | None) -> list[str]:
    cuts, rewrites = split_parts(strategy)
    return cuts + rewrites


class _Runner:
    def __init__(
        self, options: HarnessOptions, fixture: Fixture, browser: BrowserRun | None = None
    ) -> None:
        self.options = options
        self.fixture = fixture
        self.sem = asyncio.Semaphore(options.parallel)
        self.browser = browser

    def _stack_args(
        self,
        case: Case,
        lockstep: Lockstep,
        seen: McpSeen | None = None,
        resumed: ResumeLog | None = None,
    ) -> tuple[UpstreamStarter | None, dict[str, object]]:
        """(upstream starter or None for the mock, proxy settings) for ``case``; an MCP
        case's mock is started here, and ``seen`` gets its MCP server."""
        from sse_proxy.tools.replay import start_replay
        from sse_proxy.tools.testclient.faults import start_fault_server

        fixture = self.fixture
        settings: dict[str, object] = {
            "seed": case.seed,
            "chaos_k": self.options.chaos_k,
            "delay_ms": self.options.delay_ms,
            "log_level": "warning",
        }
        if self.browser is not None:  # the front door lets the harness's pages in
            settings["allow_origins"] = (self.browser.origin,)
        if case.group == STALLS:  # the proxy performs the fault on the clean stream
            assert case.fault is not None
            settings.update(proxy_settings(case.fault, self.options.stall_patience))
        elif case.group == RESUME:  # the mock drops and resumes; the proxy joins the resumes
            settings.update(mode="passthrough")
            assert resumed is not None
            return _resume_upstream(case, resumed, seen), settings
        elif case.cut is not None:  # exactly one cut, there: the proxy makes it and waits
            settings.update(mode="chaos", chaos=f"cut:{case.cut}")
        elif case.fault is not None:
            settings.update(mode="passthrough")
        elif case.group == BASELINE:
            settings.update(mode="frames")
        else:
            settings.update(mode="chaos", chaos=case.strategy or "random")
            if is_variant_group(case.group):  # the variants the request did not ask for too
                settings["chaos_force"] = self.options.all_shapes
        if seen is not None:  # MCP: the mock's MCP server answers every case its way
            held = lockstep if case.fault is None else None
            return mcp_upstream(fixture, case, held, seen), settings
        if case.fault is not None and case.group != STALLS:
            stream = fixture.fault(case.fault)
            return (lambda: start_fault_server(stream, fixture.headers)), settings
        if case.cut is not None:
            recording = Recording(
                request={"path": fixture.path},
                response={"status": 200, "headers": fixture.headers},
                reads=((0.0, fixture.short),),
                end="upstream_eof",
            )
            return (lambda: start_replay(recording, timing=False, lockstep=lockstep)), settings
        if fixture.recording is not None:
            rec = fixture.recording
            return (lambda: start_replay(rec, timing=False, lockstep=lockstep)), settings
        return None, settings

    def expected(self, case: Case) -> str:
        if case.cut is not None:
            return self.fixture.short_expected
        if case.fault is not None and case.group not in (STALLS, RESUME):
            return self.fixture.fault(case.fault).text
        return self.fixture.expected

    async def run_case(self, case: Case) -> CaseResult:
        """Run ``case``; again while some of its cuts did not reach the client apart (a
        failure stays a failure, but its counts then vary from run to run)."""
        async with self.sem:
            for attempt in range(1, ATTEMPTS + 1):
                result = await self._attempt(case)
                result.attempts = attempt
                got = result.delivered
                if got is None or not _missed(got):
                    return result
            if result.passed:
                result.outcome = "undelivered"
            return result

    def stack(
        self, case: Case, seen: McpSeen | None = None, resumed: ResumeLog | None = None
    ) -> AbstractAsyncContextManager[Stack]:
        """The upstream and the proxy that serve ``case``, started on entry (``seen``: what
        the MCP server of an MCP fixture's case is asked; ``resumed``: a ``resume`` case's
        mock's requests)."""
        lockstep = Lockstep()
        if seen is None and DIALECTS[self.fixture.dialect].rpc:
            seen = McpSeen()
        if resumed is None and case.group == RESUME:
            resumed = ResumeLog()
        upstream, settings = self._stack_args(case, lockstep, seen, resumed)
        first_text = self.fixture.recording is None and uses_first_text(case.strategy)
        return proxy_stack(
            upstream,
            mock_seed=case.seed,
            first_text=first_text,
            mock_tools=self.fixture.tools,
            lockstep=None if case.fault is not None else lockstep,
            **settings,
        )

    async def _attempt(self, case: Case) -> CaseResult:
        started = time.monotonic()
        watch = CaseWatch()
        seen = McpSeen() if DIALECTS[self.fixture.dialect].rpc else None
        until = None
        patience = self.options.stall_patience
        resumed = ResumeLog() if case.group == RESUME else None
        if case.group == STALLS:  # the client's limit: the fault's start and the patience

            def until() -> float | None:
                began = watch.fault_began()
                return None if began is None else began + patience

        elif resumed is not None:  # the client's limit: its last activity and the patience

            def until() -> float | None:
                assert resumed is not None
                return resumed.deadline(patience)

        async with self.stack(case, seen, resumed) as stack:
            writes = None
            runner = stack._proxy
            if runner is not None:
                runner.app[STREAM_TAPS].append(watch.tap)
                if self.options.html:
                    writes = ClientWrites()  # the re-chunked writes, where the report cuts
                    runner.app[STREAM_TAPS].append(writes.tap)
            out_limit = output_limit(self.expected(case))
            if self.browser is not None:
                page = self.browser.open_case(
                    stack.url, self.fixture, case.name, resume=resumed is not None
                )
                if runner is not None:
                    runner.app[STREAM_TAPS].append(page.reads.tap)
                ran = await self.browser.run_case(
                    page,
                    timeout=self.options.timeout,
                    out_limit=out_limit,
                    credit=watch.held_back,
                    until=until,
                )
            else:
                env = client_env(stack.url, self.fixture, case.name, resume=resumed is not None)
                ran = await run_command(
                    self.options.command,
                    env,
                    timeout=self.options.timeout,
                    out_limit=out_limit,
                    credit=watch.held_back,
                    until=until,
                )
            began = watch.fault_began()
        if resumed is not None:
            seen_by_mock = ResumeSeen(tuple(resumed.requests), ran.started)
            calls = None if seen is None else seen.calls
            duration = round(time.monotonic() - started, 3)
            return self.judge_resume(case, ran, duration, seen_by_mock, calls)
        if case.group == STALLS:
            timing = Timing(  # from the client's start (a browser's: its tab's)
                began=None if began is None else max(began - ran.started, 0.0),
                ended=ran.seconds,
                patience=self.options.stall_patience,
            )
            calls = None if seen is None else seen.calls
            duration = round(time.monotonic() - started, 3)
            return self.judge_stall(case, ran, duration, timing, calls)
        calls = None if seen is None else seen.calls
        result = self.judge_run(case, ran, round(time.monotonic() - started, 3), watch, calls)
        result.sent = None if writes is None else writes.one_stream()
        return result

    def judge_stall(
        self,
        case: Case,
        ran: Ran,
        duration: float,
        timing: Timing,
        mcp_calls: tuple[McpCall, ...] | None = None,
    ) -> CaseResult:
        """The verdict on a ``stalls`` case: what the client did about the fault in time
        (an MCP client's: about its tool call's stream, the one built for its request)."""
        assert case.fault is not None
        fixture = self.fixture
        output = normalize_output(ran.out)
        if fixture.tools:
            from sse_proxy.tools.fixtures.tools import canonical_output

            output = canonical_output(output)
        expected = self.expected(case)
        if ran.flooded:
            outcome: str = "wrong"
            diagnosis: Diagnosis | None = flood_diagnosis(len(output.encode()), len(expected))
        else:
            notes = None
            if mcp_calls is not None:
                notes = notes_before(sent_stream(fixture, mcp_calls), case.fault)
            outcome, diagnosis = diagnose_stall(
                case.fault,
                dialect=fixture.dialect,
                expected=expected,
                before=text_before(fixture.body, fixture.dialect, case.fault),
                output=output,
                exit_code=ran.code,
                hung=ran.hung,
                timing=timing,
                every=keepalive_every(timing.patience),
                strict_drip=self.options.patience is not None,
                notes=notes,
            )
            if diagnosis is not None and mcp_calls is not None:
                stderr = ran.err.decode("utf-8", "replace")
                diagnosis = explain_mcp(diagnosis, expected, output, ran.code, mcp_calls, stderr)
        return CaseResult(
            case=case,
            outcome=outcome,
            exit_code=ran.code,
            output=output,
            stderr=ran.err.decode("utf-8", "replace"),
            duration=duration,
            expected=expected,
            diagnosis=diagnosis,
            flooded=ran.flooded,
            timing=timing,
            mcp_calls=mcp_calls,
        )

    def judge_resume(
        self,
        case: Case,
        ran: Ran,
        duration: float,
        seen: ResumeSeen,
        mcp_calls: tuple[McpCall, ...] | None = None,
    ) -> CaseResult:
        """The verdict on a ``resume`` case: how the client resumed the drops, from what the
        case's mock saw and what the client printed (an MCP client's: in its revision's
        terms, with the tool calls its server answered)."""
        assert case.fault is not None
        output = normalize_output(ran.out)
        if ran.flooded:
            outcome = "wrong"
            expected = self.fixture.expected
            diagnosis: Diagnosis | None = flood_diagnosis(len(output.encode()), len(expected))
        elif mcp_calls is not None:
            expected = self.fixture.expected
            outcome, diagnosis = diagnose_mcp_resume(
                case.fault,
                seen=seen,
                calls=mcp_calls,
                expected=expected,
                output=output,
                exit_code=ran.code,
                hung=ran.hung,
                patience=self.options.stall_patience,
            )
        else:
            outcome, diagnosis, expected = diagnose_resume(
                case.fault,
                dialect=self.fixture.dialect,
                seen=seen,
                output=output,
                exit_code=ran.code,
                hung=ran.hung,
                patience=self.options.stall_patience,
            )
        return CaseResult(
            case=case,
            outcome=outcome,
            exit_code=ran.code,
            output=output,
            stderr=ran.err.decode("utf-8", "replace"),
            duration=duration,
            expected=expected,
            diagnosis=diagnosis,
            flooded=ran.flooded,
            resume=seen,
            mcp_calls=mcp_calls,
        )

    def judge_run(
        self,
        case: Case,
        ran: Ran,
        duration: float,
        watch: CaseWatch,
        mcp_calls: tuple[McpCall, ...] | None = None,
    ) -> CaseResult:
        """The verdict on one run of CMD, with what the proxy (and an MCP server) saw."""
        output = normalize_output(ran.out)
        if self.fixture.tools:
            from sse_proxy.tools.fixtures.tools import canonical_output

            output = canonical_output(output)
        result = self.judge(
            case,
            ran.code,
            output,
            ran.err.decode("utf-8", "replace"),
            ran.hung,
            duration,
            flooded=ran.flooded,
            final_bytes=watch.final_bytes(),
            mcp_calls=mcp_calls,
        )
        result.delivered = watch.delivered()
        if is_variant_group(case.group) and case.strategy is not None:
            missing = watch.not_applicable(case.strategy)
            if missing is not None:  # the stream was the upstream's: nothing to judge
                result.outcome, result.diagnosis = NOT_APPLICABLE, None
                result.not_applicable = missing
            result.forced = watch.forced(case.strategy)
        return result

    def judge(
        self,
        case: Case,
        code: int | None,
        output: str,
        stderr: str,
        hung: bool,
        duration: float,
        parts: Mapping[str, Diagnosis | None] | None = None,
        *,
        flooded: bool = False,
        final_bytes: bytes | None = None,
        mcp_calls: tuple[McpCall, ...] | None = None,
    ) -> CaseResult:
        expected = self.expected(case)
        diagnosis: Diagnosis | None
        wiring = (
            wiring_diagnosis(stderr) if self.browser is not None and code not in (0, None) else None
        )
        if wiring is not None:  # the script was never called as a client
            diagnosis = wiring
        elif flooded:
            diagnosis = flood_diagnosis(len(output.encode("utf-8")), len(expected))
        elif case.fault is not None and case.group != STALLS:
            reissued = judge_reissue(mcp_calls, self.fixture.expected, output, code, hung)
            if reissued is not None:  # MCP: the client called the tool again
                diagnosis = reissued.diagnosis
            else:
                diagnosis = diagnose_fault(
                    case.fault,
                    self.fixture.expected,
                    expected,
                    output,
                    exit_code=code,
                    timed_out=hung,
                    timeout=self.options.timeout,
                )
                if hung and diagnosis is not None and mcp_calls is not None:
                    diagnosis = hang_on_broken_stream(
                        diagnosis, case.fault, mcp_calls, self.options.timeout
                    )
        elif is_variant_group(case.group) and case.strategy is not None:
            diagnosis = diagnose_variant(
                case.strategy,
                expected,
                output,
                exit_code=code,
                timed_out=hung,
                timeout=self.options.timeout,
                site=attribute_crash(stderr) if code not in (0, None) else None,
                stderr=stderr,
                body=self.fixture.body,
                seed=case.seed,
                dialect=self.fixture.dialect,
                command=self.options.subject,
                tools=self.fixture.tools,
            )
        else:
            diagnosis = diagnose(
                expected,
                output,
                exit_code=code,
                timed_out=hung,
                timeout=self.options.timeout,
                strategy=case.strategy,
                parts=parts,
                site=attribute_crash(stderr) if code not in (0, None) else None,
                final_bytes=final_bytes,
            )
            if diagnosis is not None and self.fixture.tools:
                diagnosis = explain_tool_failure(diagnosis, expected, output, code, stderr)
        if diagnosis is not None and mcp_calls is not None and not flooded:
            diagnosis = explain_mcp(diagnosis, expected, output, code, mcp_calls, stderr)
        if diagnosis is None:
            outcome = "pass"
        elif hung:
            outcome = "hang"
        elif flooded or diagnosis.family in WRONG_FAMILIES:
            outcome = "wrong"
        elif case.fault is not None and case.group != STALLS:
            outcome = "silent"
        elif code != 0:
            outcome = "crash"
        else:
            outcome = "wrong"
        short = sent_short(self.fixture, mcp_calls) if case.cut else b""
        if outcome == "pass" and case.cut is not None and case.cut >= len(short):
            outcome = "undelivered"  # an MCP client's request made its stream shorter
        return CaseResult(
            case=case,
            outcome=outcome,
            exit_code=code,
            output=output,
            stderr=stderr,
            duration=duration,
            expected=expected,
            diagnosis=diagnosis,
            cut_context=describe_cut(short, case.cut) if case.cut else None,
            parts=dict(parts or {}),
            flooded=flooded,
            final_bytes=final_bytes,
            mcp_calls=mcp_calls,
        )

    async def run_all(self, cases: Sequence[Case], progress: Progress) -> list[CaseResult]:
        async def one(case: Case) -> CaseResult:
            result = await self.run_case(case)
            if not case.probe:
                progress.finished(case, result.outcome, result.passed)
            return result

        tasks = [asyncio.ensure_future(one(case)) for case in cases]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise

    async def explain_combinations(self, results: list[CaseResult]) -> list[CaseResult]:
        """Re-judge each failed combination with its parts' verdicts run alone."""
        combos = [r for r in results if not r.passed and len(_parts(r.case.strategy)) > 1]
        if not combos:
            return results
        known = {(r.case.strategy, r.case.seed): r for r in results if r.case.strategy}
        probes: dict[tuple[str, int], Case] = {}
        for result in combos:
            for part in _parts(result.case.strategy):
                key = (part, result.case.seed)
                if key not in known:
                    probes[key] = Case(part, part, result.case.seed, probe=True)
        ran = await self.run_all(list(probes.values()), Progress([]))
        known.update({(r.case.strategy or "", r.case.seed): r for r in ran})
        out: list[CaseResult] = []
        for result in results:
            if result not in combos:
                out.append(result)
                continue
            parts = {
                p: known[(p, result.case.seed)].diagnosis for p in _parts(result.case.strategy)
            }
            again = self.judge(
                result.case,
                result.exit_code,
                result.output,
                result.stderr,
                result.outcome == "hang",
                result.duration,
                parts,
                flooded=result.flooded,
                final_bytes=result.final_bytes,
                mcp_calls=result.mcp_calls,
            )
            again.delivered, again.attempts, again.sent = (
                result.delivered,
                result.attempts,
                result.sent,
            )
            out.append(again)
        return out


def resume_url(url: str, dialect: str) -> str:
    """Where a client of ``dialect`` resumes (``{...}``: what it fills in)."""
    if dialect == "responses":
        return f"{url}/v1/responses/{{response_id}}?stream=true&starting_after={{sequence_number}}"
    if DIALECTS[dialect].resumes_by == "event_id":
        return f"{url}{INTERACTIONS_PATH}/{{interaction_id}}?stream=true&last_event_id={{event_id}}"
    return url + DIALECT_PATHS.get(dialect, "")


def _resume_upstream(
    case: Case, resumed: ResumeLog, seen: McpSeen | None = None
) -> UpstreamStarter:
    """The mock that performs ``case``'s drop (placed by its seed) on resumable streams,
    its requests logged into ``resumed`` (an MCP case's: its MCP server added to ``seen``;
    its streams' ``retry`` is the MCP server's own, :data:`RESUME_RETRY` too)."""
    from sse_proxy.rechunk.timefaults import TimeSettings
    from sse_proxy.tools.fixtures.resume import ResumeSettings
    from sse_proxy.tools.mock_resume import SERVED
    from sse_proxy.tools.mock_upstream import MCP_SERVER, start_mock_upstream

    async def start() -> tuple[Stoppable, str]:
        runner, url = await start_mock_upstream(
            seed=case.seed,
            fault=case.fault,
            chunk_delay=RESUME_PACE,
            resume=ResumeSettings(retry=RESUME_RETRY),
            timing=TimeSettings(retry_large=RESUME_LARGE),
        )
        resumed.requests = runner.app[SERVED]
        if seen is not None:
            seen.servers.append(runner.app[MCP_SERVER])
        return runner, url

    return start


def case_stack(
    options: HarnessOptions, fixture: Fixture, case: Case
) -> AbstractAsyncContextManager[Stack]:
    """The upstream and proxy that serve ``case`` to a client, exactly as a run does
    (`test-gateway` puts a gateway between this proxy and its client)."""
    return _Runner(options, fixture).stack(case)


async def run_cases(
    options: HarnessOptions, fixture: Fixture, cases: Sequence[Case], progress: Progress
) -> RunResult:
    """Run ``cases``: the baseline first (stopping there if it fails), then the rest; in
    one browser for the whole run with ``--browser``."""
    if options.browser is None:
        return await _run_cases(_Runner(options, fixture), options, cases, progress)
    from sse_proxy.tools.testclient.browser import BrowserRun

    limit = max(output_limit(fixture.expected), output_limit(fixture.short_expected))
    browser = await BrowserRun.start(options.browser, options.script or "", max_message=4 * limit)
    try:
        return await _run_cases(_Runner(options, fixture, browser), options, cases, progress)
    finally:
        await browser.stop()


async def _run_cases(
    runner: _Runner, options: HarnessOptions, cases: Sequence[Case], progress: Progress
) -> RunResult:
    baseline = [c for c in cases if c.group == BASELINE]
    rest = [c for c in cases if c.group != BASELINE]
    results = await runner.run_all(baseline, progress)
    if rest and any(not r.passed for r in results) and not options.keep_going:
        progress.note(
            f"the baseline failed; stopping before the other {len(rest)} cases "
            "(--keep-going runs them anyway)"
        )
        return RunResult(results, not_run=len(rest))
    results += await runner.run_all(rest, progress)
    results = await runner.explain_combinations(results)
    return RunResult(results)
