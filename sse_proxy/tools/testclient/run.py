"""Running the cases: per case an upstream and a proxy on this loop, CMD as a process.

The baseline runs first; when it fails the run stops there (unless ``keep_going``): a
client that cannot read the friendliest stream would fail every other case for the same
reason, and a hanging one would cost the timeout in each. Then the other cases run in
parallel. A combination that fails has its parts run alone (``probe`` cases, reusing the
run's own results where they exist) so its diagnosis names the part at fault.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import signal
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Final

from sse_proxy.errors import UsageError
from sse_proxy.names import DIALECT_BODIES
from sse_proxy.recording import Recording
from sse_proxy.server.keys import STREAM_TAPS
from sse_proxy.server.taps import ClientWrites
from sse_proxy.tools.stack import UpstreamStarter, proxy_stack
from sse_proxy.tools.testclient.diagnose import (
    Diagnosis,
    attribute_crash,
    describe_cut,
    diagnose,
    diagnose_fault,
    normalize_output,
    split_parts,
)
from sse_proxy.tools.testclient.fixture import Fixture, uses_first_text
from sse_proxy.tools.testclient.plan import BASELINE, CUT_GAP, Case, HarnessOptions
from sse_proxy.tools.testclient.progress import Progress
from sse_proxy.tools.testclient.shapes import diagnose_variant, is_variant_group

__all__ = ["OUTCOMES", "CaseResult", "RunResult", "client_env", "run_cases"]

OUTCOMES: Final[tuple[str, ...]] = ("pass", "wrong", "crash", "hang", "silent")
"""``silent``: a fault case the client did not report (exit 0 on a broken stream)."""
_MAX_CAPTURE = 8 << 20
_STDERR_TAIL_LINES = 12
DUMMY_KEYS: Final[dict[str, str]] = {
    "OPENAI_API_KEY": "sk-sse-proxy-test-not-a-real-key",
    "ANTHROPIC_API_KEY": "sk-ant-sse-proxy-test-not-a-real-key",
}
"""Set for CMD when not already set: SDKs refuse to start without a key."""


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

    @property
    def passed(self) -> bool:
        return self.outcome == "pass"

    def stderr_tail(self, lines: int = _STDERR_TAIL_LINES) -> str:
        return "\n".join(self.stderr.rstrip().splitlines()[-lines:])


@dataclass(slots=True)
class RunResult:
    """The results in plan order, and the cases not run because the baseline failed."""

    results: list[CaseResult]
    not_run: int = 0


def client_env(url: str, fixture: Fixture, case_name: str) -> dict[str, str]:
    """The variables CMD gets (on top of the caller's environment), dummy keys included."""
    body = DIALECT_BODIES.get(fixture.dialect, {})
    if fixture.tools:
        from sse_proxy.tools.fixtures.tools import tool_request_body

        body = tool_request_body(fixture.dialect)
    env = {
        "SSE_PROXY_URL": url,
        "OPENAI_BASE_URL": f"{url}/v1",
        "ANTHROPIC_BASE_URL": url,
        "GOOGLE_GEMINI_BASE_URL": url,
        "SSE_PROXY_DIALECT": fixture.dialect,
        "SSE_PROXY_STREAM_URL": url + fixture.path,
        "SSE_PROXY_STREAM_BODY": json.dumps(body, ensure_ascii=False),
        "SSE_PROXY_CASE": case_name,
        "NO_PROXY": "127.0.0.1,localhost",
        "no_proxy": "127.0.0.1,localhost",
    }
    if fixture.tools:
        env["SSE_PROXY_TOOLS"] = "1"  # print the text, then a tool_call line per call
    for key, value in DUMMY_KEYS.items():
        env[key] = os.environ.get(key, value)
    return env


async def _read_capped(stream: asyncio.StreamReader | None) -> bytes:
    if stream is None:
        return b""
    buf = bytearray()
    while chunk := await stream.read(65536):
        if len(buf) < _MAX_CAPTURE:
            buf += chunk[: _MAX_CAPTURE - len(buf)]
    return bytes(buf)


async def _run_command(
    command: Sequence[str], env: dict[str, str], seconds: float
) -> tuple[int | None, bytes, bytes, bool]:
    """Run CMD in its own process group; kill the group on timeout. (code, out, err, hung)."""
    try:
        proc = await asyncio.create_subprocess_exec(
            *command,
            env={**os.environ, **env},
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise UsageError(f"command not found: {command[0]!r}") from None
    except PermissionError:
        raise UsageError(f"command not executable: {command[0]!r}") from None
    out_task = asyncio.ensure_future(_read_capped(proc.stdout))
    err_task = asyncio.ensure_future(_read_capped(proc.stderr))
    hung = False
    try:
        await asyncio.wait_for(proc.wait(), seconds)
    except TimeoutError:
        hung = True
    finally:
        if proc.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            await proc.wait()
    try:
        out, err = await asyncio.wait_for(asyncio.gather(out_task, err_task), 5.0)
    except TimeoutError:  # a grandchild outside the group keeps the pipes open
        out_task.cancel()
        err_task.cancel()
        out, err = b"", b""
    return (None if hung else proc.returncode), out, err, hung


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
    def __init__(self, options: HarnessOptions, fixture: Fixture) -> None:
        self.options = options
        self.fixture = fixture
        self.sem = asyncio.Semaphore(options.parallel)

    def _stack_args(self, case: Case) -> tuple[UpstreamStarter | None, dict[str, object]]:
        """(upstream starter or None for the mock, proxy settings) for ``case``."""
        from sse_proxy.tools.replay import start_replay
        from sse_proxy.tools.testclient.faults import start_fault_server

        fixture = self.fixture
        settings: dict[str, object] = {
            "seed": case.seed,
            "chaos_k": self.options.chaos_k,
            "delay_ms": self.options.delay_ms,
            "log_level": "warning",
        }
        if case.cut is not None or case.fault is not None:
            settings.update(mode="passthrough")
        elif case.group == BASELINE:
            settings.update(mode="frames")
        else:
            settings.update(mode="chaos", chaos=case.strategy or "random")
        if case.fault is not None:
            stream = fixture.fault(case.fault)
            return (lambda: start_fault_server(stream, fixture.headers)), settings
        if case.cut is not None:
            data = fixture.short
            recording = Recording(
                request={"path": fixture.path},
                response={"status": 200, "headers": fixture.headers},
                reads=((0.0, data[: case.cut]), (CUT_GAP, data[case.cut :])),
                end="upstream_eof",
            )
            return (lambda: start_replay(recording, timing=True)), settings
        if fixture.recording is not None:
            rec = fixture.recording
            return (lambda: start_replay(rec, timing=False)), settings
        return None, settings

    def expected(self, case: Case) -> str:
        if case.cut is not None:
            return self.fixture.short_expected
        if case.fault is not None:
            return self.fixture.fault(case.fault).text
        return self.fixture.expected

    async def run_case(self, case: Case) -> CaseResult:
        upstream, settings = self._stack_args(case)
        first_text = self.fixture.recording is None and uses_first_text(case.strategy)
        started = time.monotonic()
        async with (
            self.sem,
            proxy_stack(
                upstream,
                mock_seed=case.seed,
                first_text=first_text,
                mock_tools=self.fixture.tools,
                **settings,
            ) as stack,
        ):
            writes = None
            runner = stack._proxy
            if self.options.html and runner is not None:
                writes = ClientWrites()  # the re-chunked writes, where the report cuts the bytes
                runner.app[STREAM_TAPS].append(writes.tap)
            env = client_env(stack.url, self.fixture, case.name)
            code, out, err, hung = await _run_command(
                self.options.command, env, self.options.timeout
            )
        sent = None if writes is None else writes.one_stream()
        output = normalize_output(out)
        if self.fixture.tools:
            from sse_proxy.tools.fixtures.tools import canonical_output

            output = canonical_output(output)
        result = self.judge(
            case,
            code,
            output,
            err.decode("utf-8", "replace"),
            hung,
            round(time.monotonic() - started, 3),
        )
        result.sent = sent
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
    ) -> CaseResult:
        expected = self.expected(case)
        if case.fault is not None:
            diagnosis = diagnose_fault(
                case.fault,
                self.fixture.expected,
                expected,
                output,
                exit_code=code,
                timed_out=hung,
                timeout=self.options.timeout,
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
                command=self.options.command,
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
            )
            if diagnosis is not None and self.fixture.tools:
                diagnosis = explain_tool_failure(diagnosis, expected, output, code, stderr)
        if diagnosis is None:
            outcome = "pass"
        elif hung:
            outcome = "hang"
        elif case.fault is not None:
            outcome = "silent"
        elif code != 0:
            outcome = "crash"
        else:
            outcome = "wrong"
        return CaseResult(
            case=case,
            outcome=outcome,
            exit_code=code,
            output=output,
            stderr=stderr,
            duration=duration,
            expected=expected,
            diagnosis=diagnosis,
            cut_context=describe_cut(self.fixture.short, case.cut) if case.cut else None,
            parts=dict(parts or {}),
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
            out.append(
                self.judge(
                    result.case,
                    result.exit_code,
                    result.output,
                    result.stderr,
                    result.outcome == "hang",
                    result.duration,
                    parts,
                )
            )
        return out


async def run_cases(
    options: HarnessOptions, fixture: Fixture, cases: Sequence[Case], progress: Progress
) -> RunResult:
    """Run ``cases``: the baseline first (stopping there if it fails), then the rest."""
    runner = _Runner(options, fixture)
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
