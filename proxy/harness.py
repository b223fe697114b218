"""`sse-proxy test-client -- CMD`: break a client on purpose, say which boundary it gets wrong.

CMD is any program, in any language, that streams one answer from the URL it is given and
prints the text. The harness runs it once per case, each case behind its own in-process
proxy, and compares what it printed with the text it must print:

* every re-chunking strategy, every spec-equivalent rewrite on its own and a few
  combinations, each with several seeds, against the built-in mock upstream (or a
  recording, ``--fixture``), the proxy in chaos mode;
* a ``frames`` baseline (whole frames, one write each: the friendliest stream there is),
  so a client that never works at all is told so instead of being "diagnosed";
* for a short fixture, every two-way cut: the stream is served in exactly two writes, split
  at byte ``c``, for every ``c`` in ``1..n-1``. A chaos strategy cannot promise one exact
  cut, so each such case gets a tiny replay upstream that writes ``data[:c]``, pauses, then
  writes ``data[c:]``, and the proxy in passthrough mode in front of it.

The client's kernel may still merge reads that the proxy wrote separately (loopback is
fast, and a slow client reads several writes at once); the pause of the cut cases and
repeated seeds make a boundary bug show anyway, and a failure is always reproducible from
the command printed with it.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import json
import os
import re
import shlex
import shutil
import signal
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import IO, Any, Final

from proxy import fixtures
from proxy.errors import ChaosSpecError, UsageError
from proxy.rechunk.spec import REWRITES, STRATEGIES, ChaosSpec
from proxy.recording import Recording, load_recording

__all__ = [
    "DEFAULT_COMBOS",
    "DIALECT_BODIES",
    "DIALECT_PATHS",
    "Case",
    "CaseResult",
    "Diagnosis",
    "HarnessOptions",
    "describe_cut",
    "diagnose",
    "first_difference",
    "normalize_output",
    "plan_cases",
    "run_test_client",
    "short_diff",
]

DIALECT_PATHS: Final[dict[str, str]] = {
    "openai": "/v1/chat/completions",
    "responses": "/v1/responses",
    "anthropic": "/v1/messages",
    "text": "/v1/text",
}
"""The mock upstream endpoint each ``--dialect`` streams from."""

DIALECT_BODIES: Final[dict[str, dict[str, Any]]] = {
    "openai": {
        "model": "gpt-4o-mini",
        "stream": True,
        "messages": [{"role": "user", "content": "Say hello"}],
    },
    "responses": {"model": "gpt-4o-mini", "stream": True, "input": "Say hello"},
    "anthropic": {
        "model": "claude-3-5-sonnet-20241022",
        "max_tokens": 1024,
        "stream": True,
        "messages": [{"role": "user", "content": "Say hello"}],
    },
    "text": {"stream": True},
}
"""A request body that makes each endpoint stream (``SSE_PROXY_STREAM_BODY``)."""

DEFAULT_COMBOS: Final[tuple[str, ...]] = (
    "utf8+crlf",
    "boundaries+cr",
    "random+mixed_newlines+keepalive",
    "coalesce+bom+nospace",
)
"""Combinations run by default: re-chunking and rewrites at once."""

BASELINE: Final = "baseline"
CUT: Final = "cut"
CUT_BUDGET: Final = 600
"""The every-cut pass runs by default only up to this many cut points (one run each)."""
CUT_GAP: Final = 0.015
"""Seconds between the two writes of a cut case, so the client reads them apart."""
_SSE_HEADERS: Final = {
    "Content-Type": "text/event-stream; charset=utf-8",
    "Cache-Control": "no-cache",
}
_MAX_CAPTURE = 8 << 20
_STDERR_TAIL_LINES = 12
_DIFF_LINES = 24

OUTCOMES: Final[tuple[str, ...]] = ("pass", "wrong", "crash", "hang")

_REWRITE_RULES: Final[dict[str, str]] = {
    "crlf": "lines end in CRLF here; the spec allows CRLF, LF and bare CR line endings",
    "cr": "lines end in a bare CR here; a parser that only splits on LF never sees a line end",
    "mixed_newlines": "LF, CRLF and bare CR endings are mixed here; all three end a line",
    "bom": "the stream starts with a UTF-8 BOM (EF BB BF), which must be skipped once; "
    "otherwise the first field name reads as '\\ufeffdata' and the first event is lost",
    "keepalive": "comment lines (': keep-alive') between frames must be ignored",
    "dataless": "blocks with only retry:, event:, id: or a comment carry no data and "
    "dispatch no event; a client must not JSON-parse them",
    "blank_lines": "extra blank lines between frames dispatch nothing",
    "nospace": "'data:x' (no space after the colon) is valid; strip one space only when present",
}


# --------------------------------------------------------------------------- planning


@dataclass(frozen=True, slots=True)
class Case:
    """One run of CMD: a chaos ``strategy`` with ``seed``, the baseline, or a two-way ``cut``."""

    group: str
    strategy: str | None = None
    seed: int = 1
    cut: int | None = None

    @property
    def name(self) -> str:
        if self.cut is not None:
            return f"cut={self.cut}"
        if self.group == BASELINE:
            return f"baseline (frames mode) seed={self.seed}"
        return f"{self.strategy} seed={self.seed}"


@dataclass(frozen=True, slots=True)
class HarnessOptions:
    """Everything `sse-proxy test-client` was asked to do."""

    command: tuple[str, ...]
    dialect: str = "openai"
    fixture: str | None = None
    only: tuple[str, ...] | None = None
    seeds: int = 3
    seed: int | None = None
    exhaustive: bool | None = None
    timeout: float = 20.0
    jobs: int = 2
    report: str | None = None
    junit: str | None = None
    chaos_k: int = 3
    delay_ms: float = 0.0
    proxy_log: str | None = None
    html: str | None = None


def _check_strategy(name: str) -> str:
    try:
        return ChaosSpec.from_options(name, 0).strategy
    except ChaosSpecError as exc:
        raise UsageError(f"--only: {exc}") from None


def _parse_cut_range(item: str, n_cuts: int) -> range:
    """``cut`` (all), ``cut:N`` or ``cut:A-B`` (inclusive) as cut offsets."""
    if item == CUT:
        return range(1, n_cuts + 1)
    spec = item[len(CUT) + 1 :]
    lo_text, sep, hi_text = spec.partition("-")
    try:
        lo = int(lo_text)
        hi = int(hi_text) if sep else lo
    except ValueError:
        raise UsageError(f"--only: bad cut {item!r}; use cut, cut:N or cut:A-B") from None
    if not 1 <= lo <= hi <= n_cuts:
        raise UsageError(f"--only: {item!r} is out of range; this fixture has cuts 1..{n_cuts}")
    return range(lo, hi + 1)


def plan_cases(
    *,
    only: Sequence[str] | None,
    seeds: Sequence[int],
    cut_points: int,
    exhaustive: bool | None,
) -> list[Case]:
    """The cases to run, in report order. ``cut_points`` is ``len(short fixture) - 1``.

    Without ``only``: the baseline, every strategy, every rewrite, the default combinations,
    and the every-cut pass when ``exhaustive`` (``None``: when there are at most
    :data:`CUT_BUDGET` cut points). ``only`` picks groups: strategy names or combinations,
    ``baseline``, ``cut``, ``cut:N``, ``cut:A-B``.
    """
    groups: list[str] = []
    cuts: list[int] = []
    if only is None:
        groups = [BASELINE, *STRATEGIES, *REWRITES, *DEFAULT_COMBOS]
        run_cuts = exhaustive if exhaustive is not None else cut_points <= CUT_BUDGET
        if run_cuts:
            cuts = list(range(1, cut_points + 1))
    else:
        for raw in only:
            item = raw.strip().lower()
            if not item:
                continue
            if item == BASELINE:
                groups.append(BASELINE)
            elif item == CUT or item.startswith(CUT + ":"):
                cuts.extend(c for c in _parse_cut_range(item, cut_points) if c not in cuts)
            else:
                groups.append(_check_strategy(item))
        if not groups and not cuts:
            raise UsageError("--only: nothing selected")
    cases: list[Case] = []
    seen: set[str] = set()
    for group in groups:
        if group in seen:
            continue
        seen.add(group)
        strategy = None if group == BASELINE else group
        cases.extend(Case(group, strategy, seed) for seed in seeds)
    cases.extend(Case(CUT, None, 0, c) for c in sorted(cuts))
    return cases


# -------------------------------------------------------------------------- verdicts


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """The bug family a failure points to, and why the harness thinks so."""

    family: str
    reason: str
    rule: str | None = None


def normalize_output(stdout: bytes) -> str:
    """CMD's stdout as UTF-8 (invalid bytes become U+FFFD), minus one trailing newline.

    Exactly one ``\\n`` (or ``\\r\\n``) is removed, so ``print(text)`` and
    ``sys.stdout.write(text)`` both pass; a second one is a real difference.
    """
    text = stdout.decode("utf-8", "replace")
    if text.endswith("\r\n"):
        return text[:-2]
    if text.endswith("\n"):
        return text[:-1]
    return text


def _no_space(text: str) -> str:
    return re.sub(r"\s+", "", text)


def _rules(strategy: str | None) -> str | None:
    if not strategy:
        return None
    names = [n for n in strategy.split("+") if n in _REWRITE_RULES]
    if not names:
        return None
    return "; ".join(f"{n}: {_REWRITE_RULES[n]}" for n in names)


def _pure_rewrite(strategy: str | None) -> str | None:
    """The rewrite names when ``strategy`` only rewrites (writes stay whole frames)."""
    if not strategy:
        return None
    names = strategy.split("+")
    return strategy if all(n in REWRITES for n in names) else None


def diagnose(
    expected: str,
    actual: str,
    *,
    exit_code: int | None,
    timed_out: bool,
    timeout: float = 0.0,
    strategy: str | None = None,
) -> Diagnosis | None:
    """None when CMD passed; otherwise the family of its bug, from the symptom.

    U+FFFD in the output: character boundary. Same text once whitespace is ignored: spaces
    were trimmed. Text missing: frame boundary. A crash or a hang: the client's parser.
    A rewrite alone never cuts inside a frame, so a wrong text there is a spec
    conformance bug (the rewritten syntax), not a read-boundary one.
    """
    rule = _rules(strategy)
    if timed_out:
        return Diagnosis(
            "parser (hang)",
            f"no exit within {timeout:g} s: the parser waits for a line or frame end it "
            "does not recognise, or never sees the end of the stream",
            rule,
        )
    if exit_code != 0:
        return Diagnosis(
            "parser (crash)",
            f"exited with status {exit_code}: the client's parser failed on this stream",
            rule,
        )
    if actual == expected:
        return None
    rewrite = _pure_rewrite(strategy)
    if "\ufffd" in actual and "\ufffd" not in expected:
        lost = actual.count("\ufffd")
        return Diagnosis(
            "character boundary",
            f"{lost} U+FFFD in the output: a read ended inside a multi-byte UTF-8 character "
            "and was decoded on its own; decode with a stateful decoder, or decode whole lines",
            rule,
        )
    if _no_space(actual) == _no_space(expected):
        lost = len(expected) - len(actual)
        symptom = f"the words are right but {lost} whitespace characters are lost"
        if rewrite:
            return Diagnosis(f"spec conformance ({rewrite})", f"{symptom}; {_REWRITE_ONLY}", rule)
        return Diagnosis(
            "whitespace trimming",
            f"{symptom}: data values were trimmed; strip exactly one space after 'data:' "
            "and never trim a delta",
            rule,
        )
    if len(actual) < len(expected):
        missing = len(expected) - len(actual)
        symptom = f"{missing} of {len(expected)} characters are missing"
        if rewrite:
            return Diagnosis(f"spec conformance ({rewrite})", f"{symptom}; {_REWRITE_ONLY}", rule)
        return Diagnosis(
            "frame boundary",
            f"{symptom}: frames were lost, e.g. a read that ended inside a frame was parsed "
            "alone and its rest dropped; buffer across reads and dispatch only at a blank line",
            rule,
        )
    symptom = (
        f"the output differs from the expected text ({len(actual)} vs {len(expected)} "
        "characters): text was duplicated, reordered or garbled"
    )
    if rewrite:
        return Diagnosis(f"spec conformance ({rewrite})", f"{symptom}; {_REWRITE_ONLY}", rule)
    return Diagnosis("wrong output", symptom, rule)


_REWRITE_ONLY = (
    "this case only rewrote the syntax (writes were whole frames), so the parser "
    "mishandles valid SSE, see the spec rule"
)


def first_difference(expected: str, actual: str, context: int = 12) -> str:
    """Where the texts first differ, with a little context on each side, quoted."""
    at = next(
        (i for i, (a, b) in enumerate(zip(expected, actual, strict=False)) if a != b),
        min(len(expected), len(actual)),
    )
    lo = max(0, at - context)

    def show(text: str) -> str:
        piece = json.dumps(text[lo : at + context], ensure_ascii=False)
        return ("..." if lo else "") + piece + ("..." if at + context < len(text) else "")

    return f"at character {at}: expected {show(expected)}, got {show(actual)}"


def _segments(text: str) -> list[str]:
    """Words with their leading whitespace, one per diff line, quoted so spaces show."""
    parts = re.findall(r"\s*\S+|\s+", text)
    return [json.dumps(p, ensure_ascii=False) + "\n" for p in parts]


def short_diff(expected: str, actual: str, limit: int = _DIFF_LINES) -> str:
    """A unified diff of expected vs actual, word by word, cut to ``limit`` lines."""
    lines = list(
        difflib.unified_diff(
            _segments(expected), _segments(actual), "expected", "got", n=1, lineterm="\n"
        )
    )
    if len(lines) > limit:
        lines = [*lines[:limit], f"... ({len(lines) - limit} more diff lines)\n"]
    return "".join(lines)


def describe_cut(data: bytes, cut: int) -> str:
    """Where cut ``cut`` of ``data`` falls, in the terms of the three boundaries."""
    if not 0 < cut < len(data):
        return "outside the stream"
    start = cut
    while start > 0 and data[start] & 0xC0 == 0x80:
        start -= 1
    if start < cut:
        end = start + 1
        while end < len(data) and data[end] & 0xC0 == 0x80:
            end += 1
        char = data[start:end].decode("utf-8", "replace")
        return f"inside the {end - start}-byte character {char!r} (byte {cut - start} of it)"
    before, after = data[:cut], data[cut:]
    if before.endswith((b"\n\n", b"\r\n\r\n", b"\r\r")):
        return "exactly between two frames"
    if before.endswith(b"\r") and after.startswith(b"\n"):
        return "between CR and LF"
    if before.endswith((b"\n", b"\r")) and after.startswith((b"\n", b"\r")):
        return "inside the blank line that ends a frame"
    if after.startswith((b"\n", b"\r")):
        return "at the end of a line, just before its line ending"
    line_start = max(before.rfind(b"\n"), before.rfind(b"\r")) + 1
    line = data[line_start : line_start + 8]
    if line.startswith((b"data", b"event", b"id", b"retry")) and b":" in data[line_start:cut]:
        return f"inside a {data[line_start:].split(b':', 1)[0].decode()}: line value"
    if line.startswith((b"data", b"event", b"id", b"retry")):
        return "inside a field name, before its colon"
    return "inside a frame"


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
    sent: tuple[bytes, tuple[int, ...]] | None = None  # (bytes, write ends) with --html

    @property
    def passed(self) -> bool:
        return self.outcome == "pass"

    def stderr_tail(self, lines: int = _STDERR_TAIL_LINES) -> str:
        return "\n".join(self.stderr.rstrip().splitlines()[-lines:])


# --------------------------------------------------------------------------- running


@dataclass
class _Fixture:
    """The upstream the cases stream from: the mock, or a recording."""

    dialect: str
    path: str
    expected: str
    short: bytes
    short_expected: str
    recording: Recording | None = None
    note: str | None = None
    headers: dict[str, str] = field(default_factory=lambda: dict(_SSE_HEADERS))


def _load_fixture(options: HarnessOptions) -> _Fixture:
    dialect = options.dialect
    if options.fixture is None:
        return _Fixture(
            dialect=dialect,
            path=DIALECT_PATHS[dialect],
            expected=fixtures.expected_text(dialect),
            short=fixtures.clean_stream(dialect, fixtures.SHORT_TOKENS),
            short_expected=fixtures.SHORT_MESSAGE,
        )
    from proxy.core import StreamReassembler, dialect_for_path
    from proxy.core.alerts import Level

    recording = load_recording(options.fixture)
    path = str(recording.request.get("path") or DIALECT_PATHS[dialect])
    query = str(recording.request.get("query") or "")
    reassembler = StreamReassembler(None, hint=dialect_for_path(path), emit_events=False)
    alerts = list(reassembler.feed(recording.body).alerts)
    alerts += reassembler.close().alerts
    warned = sorted({a.name for a in alerts if a.level is Level.WARNING})
    note = None
    if warned:
        note = (
            f"the recording itself is not clean ({', '.join(warned)}): the expected text is "
            "what a correct client makes of it"
        )
    headers = {
        str(k): str(v)
        for k, v in (recording.response.get("headers") or {}).items()
        if str(k).lower() in ("content-type", "cache-control")
    } or dict(_SSE_HEADERS)
    return _Fixture(
        dialect=reassembler.dialect if reassembler.dialect != "none" else dialect,
        path=path + (f"?{query}" if query else ""),
        expected=reassembler.text,
        short=recording.body,
        short_expected=reassembler.text,
        recording=recording,
        note=note,
        headers=headers,
    )


def _client_env(url: str, fixture: _Fixture, case: Case) -> dict[str, str]:
    env = dict(os.environ)
    env.update(
        {
            "SSE_PROXY_URL": url,
            "OPENAI_BASE_URL": f"{url}/v1",
            "ANTHROPIC_BASE_URL": url,
            "SSE_PROXY_DIALECT": fixture.dialect,
            "SSE_PROXY_STREAM_URL": url + fixture.path,
            "SSE_PROXY_STREAM_BODY": json.dumps(DIALECT_BODIES.get(fixture.dialect, {})),
            "SSE_PROXY_CASE": case.name,
            "NO_PROXY": "127.0.0.1,localhost",
            "no_proxy": "127.0.0.1,localhost",
        }
    )
    env.setdefault("OPENAI_API_KEY", "sk-sse-proxy-test-not-a-real-key")
    env.setdefault("ANTHROPIC_API_KEY", "sk-ant-sse-proxy-test-not-a-real-key")
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
            env=env,
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


class _Runner:
    """Runs the cases: per case an upstream and a proxy in this loop, CMD as a process."""

    def __init__(self, options: HarnessOptions, fixture: _Fixture, total: int) -> None:
        self.options = options
        self.fixture = fixture
        self.total = total
        self.done = 0
        self.failed = 0
        self.tty = sys.stderr.isatty()
        self.group_left: dict[str, int] = {}
        self.group_failed: dict[str, int] = {}

    async def _upstream(self, case: Case, stack: contextlib.AsyncExitStack) -> str:
        from proxy.replay import start_replay

        if case.cut is not None:
            data = self.fixture.short
            recording = Recording(
                request={"path": self.fixture.path},
                response={"status": 200, "headers": self.fixture.headers},
                reads=((0.0, data[: case.cut]), (CUT_GAP, data[case.cut :])),
                end="upstream_eof",
            )
            runner, url = await start_replay(recording, timing=True)
        elif self.fixture.recording is not None:
            runner, url = await start_replay(self.fixture.recording, timing=False)
        else:
            from proxy.mock_upstream import start_mock_upstream

            runner, url = await start_mock_upstream(seed=case.seed)
        stack.push_async_callback(runner.cleanup)
        return url

    async def run_case(self, case: Case) -> CaseResult:
        from proxy.config import Config
        from proxy.inspect.web import client_writes
        from proxy.server.run import start_proxy, stop_proxy

        expected = self.fixture.short_expected if case.cut is not None else self.fixture.expected
        started = time.monotonic()
        async with contextlib.AsyncExitStack() as stack:
            upstream = await self._upstream(case, stack)
            if case.cut is not None:
                mode, chaos = "passthrough", "random"
            elif case.group == BASELINE:
                mode, chaos = "frames", "random"
            else:
                mode, chaos = "chaos", case.strategy or "random"
            cfg = Config(
                upstream=upstream,
                port=0,
                mode=mode,
                chaos=chaos,
                seed=case.seed,
                chaos_k=self.options.chaos_k,
                delay_ms=self.options.delay_ms,
                shutdown_grace=1.0,
                log_level="warning",
                ui=bool(self.options.html) and case.cut is None,  # keeps the client's bytes
            )
            runner, url = await start_proxy(cfg)
            stack.push_async_callback(stop_proxy, runner)
            env = _client_env(url, self.fixture, case)
            code, out, err, hung = await _run_command(
                self.options.command, env, self.options.timeout
            )
            sent = client_writes(runner.app)
        output = normalize_output(out)
        diagnosis = diagnose(
            expected,
            output,
            exit_code=code,
            timed_out=hung,
            timeout=self.options.timeout,
            strategy=case.strategy,
        )
        if diagnosis is None:
            outcome = "pass"
        elif hung:
            outcome = "hang"
        elif code != 0:
            outcome = "crash"
        else:
            outcome = "wrong"
        return CaseResult(
            case=case,
            outcome=outcome,
            exit_code=code,
            output=output,
            stderr=err.decode("utf-8", "replace"),
            duration=round(time.monotonic() - started, 3),
            expected=expected,
            diagnosis=diagnosis,
            cut_context=describe_cut(self.fixture.short, case.cut)
            if case.cut is not None
            else None,
            sent=sent,
        )

    def _progress(self, result: CaseResult) -> None:
        self.done += 1
        if not result.passed:
            self.failed += 1
        group = result.case.group
        self.group_left[group] -= 1
        if not result.passed:
            self.group_failed[group] = self.group_failed.get(group, 0) + 1
        if self.tty:
            line = (
                f"\r\x1b[K[{self.done:>{len(str(self.total))}}/{self.total}] "
                f"{result.case.name}: {result.outcome}"
                f"{f'  ({self.failed} failed so far)' if self.failed else ''}"
            )
            sys.stderr.write(line)
            if self.done == self.total:
                sys.stderr.write("\r\x1b[K")
            sys.stderr.flush()
            return
        if self.group_left[group] == 0:
            failed = self.group_failed.get(group, 0)
            sys.stderr.write(
                f"test-client: {group}: {'all passed' if not failed else f'{failed} failed'}"
                f" ({self.done}/{self.total} cases done)\n"
            )
            sys.stderr.flush()
        elif group == CUT and self.done % 50 == 0:
            sys.stderr.write(f"test-client: cut: {self.done}/{self.total} cases done\n")
            sys.stderr.flush()

    async def run(self, cases: Sequence[Case]) -> list[CaseResult]:
        for case in cases:
            self.group_left[case.group] = self.group_left.get(case.group, 0) + 1
        sem = asyncio.Semaphore(self.options.jobs)

        async def one(case: Case) -> CaseResult:
            async with sem:
                result = await self.run_case(case)
            self._progress(result)
            return result

        tasks = [asyncio.ensure_future(one(case)) for case in cases]
        try:
            return list(await asyncio.gather(*tasks))
        except BaseException:
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise


# ---------------------------------------------------------------------------- report


def _cmd_text(command: Sequence[str]) -> str:
    return shlex.join(command)


def _rerun_line(options: HarnessOptions, case: Case) -> str:
    parts = ["sse-proxy", "test-client", "--dialect", options.dialect]
    if options.fixture:
        parts += ["--fixture", options.fixture]
    if case.cut is not None:
        parts += ["--only", f"cut:{case.cut}"]
    else:
        parts += ["--only", case.group, "--seed", str(case.seed)]
    return f"{_cmd_text(parts)} -- {_cmd_text(options.command)}"


def _by_hand(options: HarnessOptions, fixture: _Fixture, case: Case) -> list[str]:
    """The same case with the real commands, for a debugger or a packet capture."""
    if case.cut is not None:
        return []
    if fixture.recording is not None and options.fixture:
        up = f"sse-proxy replay {shlex.quote(options.fixture)} --no-timing --port 8788 &"
    else:
        up = f"sse-proxy mock-upstream --port 8788 --seed {case.seed} &"
    mode = (
        "--mode frames"
        if case.group == BASELINE
        else f"--mode chaos --chaos {case.strategy} --seed {case.seed}"
    )
    extra = ""
    if options.chaos_k != 3:
        extra += f" --chaos-k {options.chaos_k}"
    if options.delay_ms:
        extra += f" --delay-ms {options.delay_ms:g}"
    env = (
        "SSE_PROXY_URL=http://127.0.0.1:8787 OPENAI_BASE_URL=http://127.0.0.1:8787/v1 "
        "ANTHROPIC_BASE_URL=http://127.0.0.1:8787"
    )
    return [
        up,
        f"sse-proxy serve --upstream http://127.0.0.1:8788 --port 8787 {mode}{extra} &",
        f"{env} {_cmd_text(options.command)}",
    ]


def _groups(results: Sequence[CaseResult]) -> dict[str, list[CaseResult]]:
    groups: dict[str, list[CaseResult]] = {}
    for result in results:
        groups.setdefault(result.case.group, []).append(result)
    return groups


def _group_label(group: str) -> str:
    if group == BASELINE:
        return "baseline (frames)"
    if group == CUT:
        return "cut (every offset)"
    return group


def render_report(options: HarnessOptions, fixture: _Fixture, results: Sequence[CaseResult]) -> str:
    """The human report: the strategy x outcome table, then each failing group's first case."""
    source = f"recording {options.fixture}" if options.fixture else "built-in mock upstream"
    out = [
        f"sse-proxy test-client: {_cmd_text(options.command)}",
        f"dialect {fixture.dialect}, {source}, endpoint {fixture.path}",
    ]
    if fixture.note:
        out.append(f"note: {fixture.note}")
    out.append("")
    groups = _groups(results)
    width = max([len(_group_label(g)) for g in groups] + [8])
    header = f"{'strategy':<{width}}  {'cases':>5}  " + "  ".join(f"{o:>5}" for o in OUTCOMES)
    out += [header + "  verdict", "-" * (len(header) + 30)]
    for group, items in groups.items():
        counts = {o: sum(1 for r in items if r.outcome == o) for o in OUTCOMES}
        failed = [r for r in items if not r.passed]
        verdict = "ok" if not failed else f"FAIL: {_families(failed)}"
        row = f"{_group_label(group):<{width}}  {len(items):>5}  " + "  ".join(
            f"{counts[o]:>5}" for o in OUTCOMES
        )
        out.append(f"{row}  {verdict}")
    total_failed = sum(1 for r in results if not r.passed)
    out.append("-" * (len(header) + 30))
    out.append(f"{len(results)} cases, {len(results) - total_failed} passed, {total_failed} failed")
    failing = {g: [r for r in items if not r.passed] for g, items in groups.items()}
    failing = {g: items for g, items in failing.items() if items}
    if BASELINE in failing:
        out += [
            "",
            "The baseline failed: even whole frames, one per write, do not give the expected "
            "text. Check that CMD reads its URL from OPENAI_BASE_URL / ANTHROPIC_BASE_URL / "
            "SSE_PROXY_URL and prints only the streamed text; the failures below may share "
            "this cause.",
        ]
    for group, items in failing.items():
        first = items[0]
        assert first.diagnosis is not None
        out += ["", f"== {_group_label(group)}: {len(items)} of {len(groups[group])} failed"]
        out.append(f"first failing case: {first.case.name}")
        if first.cut_context:
            out.append(f"  the cut falls {first.cut_context}")
        out.append(f"  diagnosis: {first.diagnosis.family}: {first.diagnosis.reason}")
        if first.diagnosis.rule:
            out.append(f"  spec rule: {first.diagnosis.rule}")
        out.append(f"  reproduce: {_rerun_line(options, first.case)}")
        by_hand = _by_hand(options, fixture, first.case)
        if by_hand:
            out.append("  by hand:   " + "\n             ".join(by_hand))
        if first.outcome == "wrong":
            out.append(f"  first difference {first_difference(first.expected, first.output)}")
            out.append("  diff (expected -> got, one word per line):")
            out += ["    " + line for line in short_diff(first.expected, first.output).splitlines()]
        tail = first.stderr_tail()
        if first.outcome in ("crash", "hang") or (tail and first.outcome != "pass"):
            if tail:
                out.append("  stderr tail:")
                out += ["    " + line for line in tail.splitlines()]
            elif first.outcome in ("crash", "hang"):
                out.append("  stderr: (empty)")
        if group == CUT and len(items) > 1:
            shown = ", ".join(str(r.case.cut) for r in items[:20])
            more = f" and {len(items) - 20} more" if len(items) > 20 else ""
            out.append(f"  failing cuts: {shown}{more}")
    return "\n".join(out) + "\n"


def _families(failed: Sequence[CaseResult]) -> str:
    seen: list[str] = []
    for result in failed:
        if result.diagnosis is not None and result.diagnosis.family not in seen:
            seen.append(result.diagnosis.family)
    return ", ".join(seen)


def _result_json(options: HarnessOptions, result: CaseResult) -> dict[str, Any]:
    case = result.case
    item: dict[str, Any] = {
        "name": case.name,
        "group": case.group,
        "strategy": case.strategy,
        "seed": None if case.cut is not None else case.seed,
        "cut": case.cut,
        "outcome": result.outcome,
        "exit_code": result.exit_code,
        "duration_s": result.duration,
    }
    if result.diagnosis is not None:
        item["diagnosis"] = {
            "family": result.diagnosis.family,
            "reason": result.diagnosis.reason,
            "rule": result.diagnosis.rule,
        }
        item["output"] = result.output[:4000]
        item["diff"] = short_diff(result.expected, result.output)
        item["first_difference"] = first_difference(result.expected, result.output)
        item["stderr_tail"] = result.stderr_tail()
        item["reproduce"] = _rerun_line(options, case)
        if result.cut_context:
            item["cut_context"] = result.cut_context
    return item


def report_json(
    options: HarnessOptions, fixture: _Fixture, results: Sequence[CaseResult]
) -> dict[str, Any]:
    """The machine-readable report (``--report FILE``)."""
    summary: dict[str, dict[str, int]] = {}
    for group, items in _groups(results).items():
        summary[group] = {o: sum(1 for r in items if r.outcome == o) for o in OUTCOMES}
        summary[group]["cases"] = len(items)
    return {
        "tool": "sse-proxy test-client",
        "command": list(options.command),
        "dialect": fixture.dialect,
        "fixture": options.fixture,
        "endpoint": fixture.path,
        "expected_text": fixture.expected,
        "passed": all(r.passed for r in results),
        "cases_total": len(results),
        "cases_failed": sum(1 for r in results if not r.passed),
        "summary": summary,
        "cases": [_result_json(options, r) for r in results],
    }


def report_junit(options: HarnessOptions, results: Sequence[CaseResult]) -> ET.ElementTree:
    """JUnit XML (``--junit FILE``): one testcase per case, grouped by strategy."""
    failures = sum(1 for r in results if r.outcome in ("wrong", "crash", "hang"))
    suites = ET.Element("testsuites")
    suite = ET.SubElement(
        suites,
        "testsuite",
        name="sse-proxy test-client",
        tests=str(len(results)),
        failures=str(failures),
        errors="0",
        skipped="0",
        time=f"{sum(r.duration for r in results):.3f}",
    )
    props = ET.SubElement(suite, "properties")
    ET.SubElement(props, "property", name="command", value=_cmd_text(options.command))
    ET.SubElement(props, "property", name="dialect", value=options.dialect)
    for result in results:
        tc = ET.SubElement(
            suite,
            "testcase",
            classname=f"sse-proxy.{result.case.group}",
            name=result.case.name,
            time=f"{result.duration:.3f}",
        )
        if result.diagnosis is None:
            continue
        failure = ET.SubElement(
            tc,
            "failure",
            type=result.diagnosis.family,
            message=f"{result.diagnosis.family}: {result.diagnosis.reason}",
        )
        body = [f"reproduce: {_rerun_line(options, result.case)}"]
        if result.diagnosis.rule:
            body.append(f"spec rule: {result.diagnosis.rule}")
        if result.cut_context:
            body.append(f"the cut falls {result.cut_context}")
        if result.outcome == "wrong":
            body.append(short_diff(result.expected, result.output))
        failure.text = "\n".join(body)
        if result.stderr:
            ET.SubElement(tc, "system-err").text = result.stderr_tail(40)
    ET.indent(suites)
    return ET.ElementTree(suites)


def _write_file(path: str, write: Any) -> None:
    try:
        write(path)
    except OSError as exc:
        raise UsageError(f"cannot write {path!r}: {exc.strerror or exc}") from None


# ----------------------------------------------------------------------------- entry


def _validate(options: HarnessOptions) -> None:
    command = options.command
    if not command:
        raise UsageError("test-client needs a command to test: sse-proxy test-client -- CMD ...")
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
    if options.jobs < 1:
        raise UsageError("--jobs must be at least 1")
    if not options.timeout > 0:
        raise UsageError("--timeout must be a positive number of seconds")
    if options.seed is not None and options.seed < 0:
        raise UsageError("--seed must be a non-negative integer")
    if options.chaos_k < 0 or options.delay_ms < 0:
        raise UsageError("--chaos-k and --delay-ms must not be negative")
    for flag, path in (
        ("--report", options.report),
        ("--junit", options.junit),
        ("--html", options.html),
    ):
        if path is not None and not Path(path).resolve().parent.is_dir():
            raise UsageError(f"{flag}: no such directory for {path!r}")


async def _run_all(
    options: HarnessOptions, fixture: _Fixture, cases: Sequence[Case]
) -> list[CaseResult]:
    runner = _Runner(options, fixture, len(cases))
    return await runner.run(cases)


def _configure_proxy_log(path: str | None) -> IO[str]:
    from proxy.logsink import configure_logging

    try:
        stream = open(path, "a", encoding="utf-8") if path else open(os.devnull, "w")  # noqa: SIM115
    except OSError as exc:
        raise UsageError(f"cannot write {path!r}: {exc.strerror or exc}") from None
    configure_logging(fmt="json", stream=stream, level="info" if path else "error")
    return stream


def run_test_client(options: HarnessOptions, out: IO[str] | None = None) -> int:
    """Run every case; print the report. 0: all passed, 1: any failed (usage errors raise)."""
    _validate(options)
    fixture = _load_fixture(options)
    seeds = [options.seed] if options.seed is not None else list(range(1, options.seeds + 1))
    cases = plan_cases(
        only=options.only,
        seeds=seeds,
        cut_points=max(len(fixture.short) - 1, 0),
        exhaustive=options.exhaustive,
    )
    if not cases:
        raise UsageError("nothing to run")
    log_stream = _configure_proxy_log(options.proxy_log)
    try:
        results = asyncio.run(_run_all(options, fixture, cases))
    finally:
        log_stream.close()
    text = render_report(options, fixture, results)
    skipped_cuts = options.only is None and options.exhaustive is None
    if skipped_cuts and not any(r.case.cut is not None for r in results):
        text += (
            f"\n(every-cut pass skipped: {len(fixture.short) - 1} cut points in the short "
            f"{fixture.dialect} fixture, over the default budget of {CUT_BUDGET}; "
            "run it with --exhaustive)\n"
        )
    stream = out if out is not None else sys.stdout
    stream.write(text)
    stream.flush()
    if options.report:
        data = report_json(options, fixture, results)
        _write_file(
            options.report,
            lambda p: Path(p).write_text(
                json.dumps(data, ensure_ascii=False, indent=2) + "\n", encoding="utf-8"
            ),
        )
    if options.junit:
        tree = report_junit(options, results)
        _write_file(options.junit, lambda p: tree.write(p, encoding="utf-8", xml_declaration=True))
    if options.html:
        _write_html(options, fixture, results)
    return 0 if all(r.passed for r in results) else 1


def _write_html(options: HarnessOptions, fixture: _Fixture, results: Sequence[CaseResult]) -> None:
    """``--html FILE``: the cases as plain values for :mod:`proxy.inspect.report`."""
    from proxy.inspect.report import ReportCase, write_report

    cases = []
    for r in results:
        cut = r.case.cut
        d = r.diagnosis
        cases.append(
            ReportCase(
                name=r.case.name,
                verdict=r.outcome,
                received=r.output,
                expected=r.expected,
                diagnosis=None
                if d is None
                else f"{d.family}: {d.reason}" + (f" (spec: {d.rule})" if d.rule else ""),
                note=(f"cut {r.cut_context}; " if r.cut_context else "")
                + f"rerun: {_rerun_line(options, r.case)}",
                stream=fixture.short if cut is not None else (r.sent[0] if r.sent else None),
                cuts=(cut,) if cut is not None else (r.sent[1] if r.sent else ()),
                strip_if_passed=False,
                passed=r.passed,
                dialect=fixture.dialect,
            )
        )
    failed = sum(not r.passed for r in results)
    write_report(
        options.html or "",
        f"sse-proxy test-client: {_cmd_text(options.command)}",
        sorted(cases, key=lambda c: c.passed),
        intro=f"{len(results)} cases, {failed} failed; {fixture.dialect} fixture.",
    )
