"""Fuzz the sans-IO core for minutes: no exception, no cut dependence, no hidden U+FFFD.

Run by hand (never by pytest)::

    python -m fuzz.fuzz_core --minutes 5                 # atheris if installed, else random
    python -m fuzz.fuzz_core --engine random --seed 7    # the dependency-free mutation loop
    python -m fuzz.fuzz_core --replay fuzz/crashes/*.bin # re-check saved inputs
    python -m fuzz.fuzz_core --differential --minutes 5  # the core against tests/oracle.py

Every input is checked the same way by both engines (:func:`check_input`): its first four
bytes seed the choice of limits and read cuts, the rest is the upstream stream. For every
dialect (and auto-detection with a path hint) the stream is fed whole, at random cuts, byte
by byte when short, and on the passthrough hot path (no events); every run must not raise,
must agree with the whole run on events, alerts, text and dialect, must report every U+FFFD
in its text and its events as ``sse.replacement_char``, and keep every offset inside the
stream. A failing input is saved to ``fuzz/crashes/`` (with a ``.txt`` saying why) and the
fuzzing goes on; ``--replay`` re-checks saved files.

``--differential`` checks each input against the test suite's reference parser instead
(:func:`check_differential`): for every dialect the oracle knows, the core fed whole, at
random cuts and byte by byte must give the oracle's events, text, alerts and frame ends.

With atheris, ``sse_proxy.core`` is instrumented for coverage and libFuzzer drives the
mutations; without it, a mutation loop over SSE-shaped building blocks and the canonical
fixture streams keeps an input when it shows a new behaviour signature (alert kinds,
dialect, line endings, event-count bucket), a cheap stand-in for coverage feedback.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib
import itertools
import os
import random
import re
import sys
import tempfile
import time
import traceback
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from sse_proxy.core import Alert, Limits, SSEEvent

__all__ = ["Stats", "check_differential", "check_input", "main", "seed_corpus"]

CRASH_DIR = Path(__file__).resolve().parent / "crashes"
DIALECTS: tuple[str | None, ...] = (
    None,
    "openai",
    "responses",
    "anthropic",
    "gemini",
    "text",
    "none",
)
HINTS = ("openai", "responses", "anthropic", "text")
HEADER = 4  # bytes of each input that seed its limits and cuts
MAX_LEN = 1 << 13  # long lines matter relative to the small limits drawn, not in bytes
REPORT_EVERY = 10.0  # seconds between progress lines
SAVE_PER_SIGNATURE = 3
FFFD = "\ufffd"

ATOMS: tuple[bytes, ...] = (
    b"data: ",
    b"data:",
    b"data",
    b"event: ",
    b"event:",
    b"id: ",
    b"id:",
    b"retry: ",
    b"retry: 1000",
    b": comment",
    b":",
    b"\n",
    b"\r",
    b"\r\n",
    b"\n\n",
    b"\r\n\r\n",
    b"\r\r",
    b"\x00",
    b"\xc0\xaf",
    b"\xe0\x80\xaf",
    b"\xf0\x80\x80\xaf",
    b"\xed\xa0\x80",
    b"\xed\xbf\xbf",
    b"\xe6\x97",
    b"\xf0\x9f\x99",
    b"\xf4\x90\x80\x80",
    b"\xff",
    b"\x80",
    b"\xef\xbb\xbf",
    b"\xef\xbf\xbd",
    b"\\ufffd",
    b"\\ud800",
    b"\\udc00",
    b"\\ud83d\\ude42",
    "日本語 🙂 café".encode(),
    b"[DONE]",
    b'{"choices":[{"index":0,"delta":{"content":"',
    b'{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"c","function":{"arguments":"',
    b'{"error":{"message":"',
    b'{"type":"response.output_text.delta","delta":"',
    b'{"type":"response.function_call_arguments.delta","item_id":"x","delta":"',
    b'{"type":"response.completed"}',
    b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"',
    b'{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","name":"f"}}',
    b'{"type":"content_block_delta","index":1,"delta":{"type":"input_json_delta","partial_json":"',
    b'{"type":"message_stop"}',
    b'{"type":"error","error":{"type":"overloaded_error","message":"busy"}}',
    b'"}}]}',
    b'"}}',
    b'"}',
    b"[" * 40,
    b"]" * 40,
    b"{",
    b"}",
    b'"',
    b"null",
    b"1e999",
    b"99999999999999999999999",
    b"event: error\n",
    b"event: message_stop\n",
    b"event: response.completed\n",
)


# -- the oracle -----------------------------------------------------------------------------


def _core() -> Any:
    """``sse_proxy.core``, imported on first use: atheris must instrument it before that."""
    return importlib.import_module("sse_proxy.core")


@dataclass(frozen=True, slots=True)
class Run:
    events: tuple[SSEEvent, ...]
    alerts: tuple[Alert, ...]
    text: str
    dialect: str
    frame_ends: tuple[int, ...]
    text_length: int

    def key(self) -> tuple[object, ...]:
        # frame_ends may depend on the cut: a CR that ends a read dispatches at once
        return (self.events, self.alerts, self.text, self.dialect)


class Failure(Exception):
    """One broken property; ``signature`` groups repeats of the same bug."""

    def __init__(self, kind: str, detail: str, signature: str) -> None:
        super().__init__(signature)
        self.kind = kind
        self.detail = detail
        self.signature = signature


@dataclass(slots=True)
class Outcome:
    runs: int = 0
    bytes_fed: int = 0
    signature: tuple[object, ...] = ()


def _feed(
    pieces: Iterable[bytes], dialect: str | None, hint: str | None, **kw: Any
) -> tuple[Run, int]:
    r = _core().StreamReassembler(dialect, hint=hint, **kw)
    events: list[SSEEvent] = []
    alerts: list[Alert] = []
    ends: list[int] = []
    fed = 0
    for piece in pieces:
        fed += len(piece)
        out = r.feed(piece)
        events += out.events
        alerts += out.alerts
        ends += out.frame_ends
    out = r.close()
    events += out.events
    alerts += out.alerts
    ends += out.frame_ends
    run = Run(
        tuple(events), tuple(alerts), r.text, r.dialect, tuple(ends), r.summary()["text_length"]
    )
    return run, fed


def _cuts(rng: random.Random, data: bytes, k: int) -> list[bytes]:
    if len(data) < 2:
        return [data]
    cuts = sorted(rng.sample(range(1, len(data)), min(k, len(data) - 1)))
    return [data[a:b] for a, b in itertools.pairwise([0, *cuts, len(data)])]


def _limits(rng: random.Random) -> Limits | None:
    limits: type[Limits] = _core().Limits
    roll = rng.random()
    if roll < 0.5:
        return None
    if roll < 0.9:
        return limits(max_line=rng.randint(1, 96), max_frame=rng.randint(1, 256))
    return limits(max_line=rng.randint(64, 4096), max_frame=rng.randint(64, 8192))


def _invariants(stream: bytes, run: Run, label: str) -> None:
    total = len(stream)
    # one alert may stand for several U+FFFD (its ``count``)
    reported = sum(getattr(a, "count", 1) for a in run.alerts if a.name == "sse.replacement_char")
    in_text = run.text.count(FFFD)
    in_events = sum(e.data.count(FFFD) for e in run.events)
    if in_text > reported or in_events > reported:
        raise Failure(
            "fffd",
            f"{label}: {in_text} U+FFFD in text, {in_events} in events, {reported} reported",
            f"fffd:{label.split(maxsplit=1)[0]}",
        )
    for alert in run.alerts:
        offset = getattr(alert, "byte_offset", 0)
        if not 0 <= offset <= total:
            raise Failure(
                "offset", f"{label}: {alert!r} outside [0, {total}]", f"offset:{alert.name}"
            )
    for event in run.events:
        if not 0 <= event.start < total:
            raise Failure("offset", f"{label}: {event!r} starts outside the stream", "offset:event")


def _diff(whole: Run, other: Run) -> str:
    for name, a, b in (
        ("dialect", whole.dialect, other.dialect),
        ("text", whole.text, other.text),
        ("alerts", whole.alerts, other.alerts),
        ("events", whole.events, other.events),
    ):
        if a != b:
            return f"{name} differ:\n  whole: {a!r:.2000}\n  split: {b!r:.2000}"
    return "no difference?"


def check_input(raw: bytes) -> Outcome:
    """Check one fuzz input (4 seed bytes + the stream); raise :class:`Failure` if broken."""
    seed = int.from_bytes(raw[:HEADER].ljust(HEADER, b"\0"), "little")
    stream = raw[HEADER:]
    rng = random.Random(seed)
    limits = _limits(rng)
    kw: dict[str, Any] = {} if limits is None else {"limits": limits}
    configs: list[tuple[str | None, str | None]] = [(d, None) for d in DIALECTS]
    configs.append((None, rng.choice(HINTS)))
    outcome = Outcome()
    features: list[object] = [limits is None]
    for dialect, hint in configs:
        label = f"dialect={dialect} hint={hint} limits={limits}"
        plans: list[tuple[str, list[bytes], dict[str, Any]]] = [
            ("cuts", _cuts(rng, stream, rng.randint(1, 12)), {}),
            ("cuts", _cuts(rng, stream, rng.randint(12, 64)), {}),
            (
                "quiet",
                _cuts(rng, stream, rng.randint(1, 12)),
                {"emit_events": False, "frame_ends": False, "keep_text": False},
            ),
        ]
        if len(stream) <= 256:
            plans.append(("bytewise", [stream[i : i + 1] for i in range(len(stream))], {}))
        try:
            whole, fed = _feed([stream], dialect, hint, **kw)
        except Exception as exc:  # noqa: BLE001 - every exception is a finding
            raise _crash(exc, f"{label} whole") from None
        outcome.runs += 1
        outcome.bytes_fed += fed
        _invariants(stream, whole, label)
        for name, pieces, extra in plans:
            try:
                run, fed = _feed(pieces, dialect, hint, **kw, **extra)
            except Exception as exc:  # noqa: BLE001 - every exception is a finding
                raise _crash(exc, f"{label} {name} {[len(p) for p in pieces]}") from None
            outcome.runs += 1
            outcome.bytes_fed += fed
            _invariants(stream, run, f"{label} {name}")
            if name == "quiet":
                # the proxy's passthrough path: no events, only the text's length kept
                same = (run.alerts, run.text_length, run.dialect) == (
                    whole.alerts,
                    len(whole.text),
                    whole.dialect,
                )
                if not same or run.events:
                    lengths = f"text_length {run.text_length}, whole text {len(whole.text)}"
                    raise Failure(
                        "cut",
                        f"{label} quiet: {lengths}; {_diff(whole, run)}",
                        f"cut:quiet:{dialect}",
                    )
            elif run.key() != whole.key():
                sizes = [len(p) for p in pieces]
                raise Failure(
                    "cut",
                    f"{label} {name} {sizes[:40]}: {_diff(whole, run)}",
                    f"cut:{_first_difference(whole, run)}",
                )
        features.append((dialect, whole.dialect, frozenset(a.name for a in whole.alerts)))
        features.append(min(len(whole.events), 8))
    outcome.signature = tuple(features)
    return outcome


def _first_difference(whole: Run, other: Run) -> str:
    if whole.alerts != other.alerts:
        names = sorted({a.name for a in whole.alerts} ^ {a.name for a in other.alerts})
        return "alerts:" + (",".join(names) or "fields")
    if whole.events != other.events:
        return "events"
    return "text" if whole.text != other.text else "dialect"


def _crash(exc: Exception, label: str) -> Failure:
    frames = traceback.extract_tb(exc.__traceback__)
    where = f"{Path(frames[-1].filename).name}:{frames[-1].lineno}" if frames else "?"
    detail = f"{label}\n" + "".join(traceback.format_exception(exc))
    return Failure("exception", detail, f"exception:{type(exc).__name__}@{where}")


# -- the differential: the core against tests/oracle.py ----------------------------------------


def check_differential(raw: bytes) -> Outcome:
    """Check one input against the oracle; raise :class:`Failure` on any difference.

    The header seeds the limits and the cuts as in :func:`check_input`. The oracle lives
    in the test suite (``tests/oracle.py``), so this needs the repository checkout.
    """
    from tests.support.differential import compare
    from tests.support.oracle import DEFAULT_LIMIT, reference
    from tests.support.oracle import DIALECTS as ORACLE_DIALECTS

    seed = int.from_bytes(raw[:HEADER].ljust(HEADER, b"\0"), "little")
    stream = raw[HEADER:]
    rng = random.Random(seed)
    limits = _limits(rng)
    max_line = DEFAULT_LIMIT if limits is None else limits.max_line
    max_frame = DEFAULT_LIMIT if limits is None else limits.max_frame
    outcome = Outcome()
    features: list[object] = [limits is None]
    for dialect in ORACLE_DIALECTS:
        ref = reference(stream, dialect, max_line=max_line, max_frame=max_frame)
        few = _cuts(rng, stream, rng.randint(1, 12))
        plans = [([stream], False), (few, False), (few, True)]  # True: passthrough path
        plans.append((_cuts(rng, stream, rng.randint(12, 64)), False))
        if len(stream) <= 256:
            plans.append(([stream[i : i + 1] for i in range(len(stream))], False))
        for pieces, quiet in plans:
            diff = compare(
                stream,
                pieces,
                dialect,
                max_line=max_line,
                max_frame=max_frame,
                ref=ref,
                quiet=quiet,
            )
            outcome.runs += 1
            outcome.bytes_fed += len(stream)
            if diff is not None:
                kind = _diff_kind(diff)
                raise Failure(
                    "diff",
                    f"input seed {seed} (header {raw[:HEADER].hex()})\n{diff}",
                    f"diff:{dialect}:{kind}",
                )
        features.append((dialect, frozenset(a[0] for a in ref.alerts)))
        features.append(min(len(ref.events), 8))
    outcome.signature = tuple(features)
    return outcome


def _diff_kind(diff: str) -> str:
    """What differs first (events, text, alerts and which kinds, frame ends, a crash)."""
    for raw_line in diff.splitlines()[3:]:  # after the dialect, stream and cuts lines
        line = raw_line.strip()
        if line.startswith("core raised"):
            return "crash:" + line.split()[2].rstrip(":")
        if line.startswith("alerts:"):
            kinds = sorted(set(re.findall(r"\('([a-z_]+)'", line)))
            return "alerts:" + ",".join(kinds)
        return line.split(":", 1)[0].split()[0]
    return "?"


CHECK = check_input  # the property set in use; --differential swaps in check_differential


# -- bookkeeping ----------------------------------------------------------------------------


@dataclass(slots=True)
class Stats:
    engine: str
    started: float = field(default_factory=time.monotonic)
    iterations: int = 0
    runs: int = 0
    bytes_fed: int = 0
    failures: int = 0
    saved: int = 0
    corpus: int = 0
    signatures: Counter[str] = field(default_factory=Counter)
    _last_report: float = field(default_factory=time.monotonic)
    _last_iterations: int = 0

    def line(self, final: bool = False) -> str:
        now = time.monotonic()
        elapsed = now - self.started
        window = max(now - self._last_report, 1e-9)
        rate = (self.iterations - self._last_iterations) / window
        self._last_report, self._last_iterations = now, self.iterations
        avg = self.iterations / max(elapsed, 1e-9)
        head = "TOTAL" if final else "stats"
        return (
            f"[{head}] engine={self.engine} elapsed={elapsed:.0f}s "
            f"iterations={self.iterations} it/s={avg if final else rate:.0f} "
            f"reassembler_runs={self.runs} bytes_fed={self.bytes_fed / 1e6:.1f}MB "
            f"corpus={self.corpus} failures={self.failures} "
            f"unique_failures={len(self.signatures)} saved={self.saved}"
        )

    def due(self) -> bool:
        return time.monotonic() - self._last_report >= REPORT_EVERY


def say(text: str) -> None:
    sys.stdout.write(text + "\n")
    sys.stdout.flush()


def record(stats: Stats, raw: bytes, failure: Failure, crash_dir: Path) -> None:
    stats.failures += 1
    stats.signatures[failure.signature] += 1
    if stats.signatures[failure.signature] > SAVE_PER_SIGNATURE:
        return
    crash_dir.mkdir(parents=True, exist_ok=True)
    digest = hashlib.sha1(raw, usedforsecurity=False).hexdigest()[:16]
    path = crash_dir / f"{failure.kind}-{digest}.bin"
    path.write_bytes(raw)
    path.with_suffix(".txt").write_text(
        f"{failure.signature}\n{failure.detail}\n\n"
        f"replay: python -m fuzz.fuzz_core --replay {path}\n",
        encoding="utf-8",
        errors="backslashreplace",
    )
    stats.saved += 1
    say(f"FAILURE {failure.signature}: saved {path}")
    if failure.kind == "diff":
        say("  " + failure.detail.replace("\n", "\n  ")[:1500])


def one(stats: Stats, raw: bytes, crash_dir: Path) -> Outcome | None:
    stats.iterations += 1
    try:
        outcome = CHECK(raw)
    except Failure as failure:
        record(stats, raw, failure, crash_dir)
        return None
    stats.runs += outcome.runs
    stats.bytes_fed += outcome.bytes_fed
    if stats.due():
        say(stats.line())
    return outcome


# -- seeds and mutations ----------------------------------------------------------------------


def seed_corpus() -> list[bytes]:
    """Canonical streams of every dialect, newline and fault, plus SSE-shaped snippets."""
    from sse_proxy.tools import fixtures

    streams: list[bytes] = []
    for dialect in fixtures.DIALECTS:
        for newline in fixtures.NEWLINES:
            streams.append(fixtures.clean_stream(dialect, newline=newline))
        for fault in fixtures.FAULTS:
            if fault != "oversized":  # megabytes: the mutations make long lines themselves
                streams.append(fixtures.faulty_stream(fault, dialect))
    streams += [
        b"retry: " + b"9" * 5000 + b"\ndata: x\n\n",
        b"\xef\xbb\xbfdata: bom\r\n\r\n",
        b"data: " + b"\xff" * 300 + b"\n\n",
        b'event: error\ndata: {"error":{"message":' + b"[" * 1000 + b"]" * 1000 + b"}}\n\n",
        b"id: 1\nid: \x00\ndata: a\r\rdata: b\n\r\n",
        *(a + b"\n\n" for a in ATOMS),
    ]
    # Known defects (issue 8), with a header that keeps the default limits: a character
    # split across raw-text events, JSON "\\ufffd" escapes beside raw U+FFFD and on a
    # second data line.
    no_limits = (1).to_bytes(HEADER, "little")  # random.Random(1).random() < 0.5
    known = [
        b"data: \xe2\x82\n\ndata: \xac\n\ndata: \xf0\x9f\n\ndata: \x99\x82\n\n",
        b'data: {"id":"\xff","choices":[{"delta":{"content":"\xc3\\\\ufffd\\ufffd"}}]}\n\n',
        b'data: {"choices":[{"delta":\ndata: {"content":"\\ufffd"}}]}\n\n',
    ]
    return [bytes(4) + s[:MAX_LEN] for s in streams] + [no_limits + s for s in known]


def _span(rng: random.Random, n: int) -> tuple[int, int]:
    a = rng.randint(0, n)
    return a, min(n, a + rng.choice((1, 2, 4, 16, 64, 256)))


def mutate(rng: random.Random, base: bytes, corpus: Sequence[bytes]) -> bytes:
    header, data = base[:HEADER], bytearray(base[HEADER:])
    for _ in range(rng.choice((1, 1, 2, 3, 4, 8))):
        op = rng.randrange(12)
        n = len(data)
        if op == 0:
            at = rng.randint(0, n)
            data[at:at] = rng.choice(ATOMS)
        elif op == 1 and n:
            a, b = _span(rng, n)
            data[a:b] = rng.choice(ATOMS)
        elif op == 2 and n:
            a, b = _span(rng, n)
            del data[a:b]
        elif op == 3 and n:
            a, b = _span(rng, n)
            at = rng.randint(0, len(data))
            data[at:at] = data[a:b] * rng.choice((1, 2, 8))
        elif op == 4 and n:
            at = rng.randrange(n)
            data[at] ^= 1 << rng.randrange(8)
        elif op == 5:
            at = rng.randint(0, n)
            data[at:at] = rng.randbytes(rng.randint(1, 8))
        elif op == 6:
            other = rng.choice(corpus)[HEADER:]
            a, b = _span(rng, len(other))
            at = rng.randint(0, n)
            data[at:at] = other[a:b]
        elif op == 7:
            at = rng.randint(0, n)
            unit = rng.choice((b"x", b"\xff", b"\x00", b"9", "日".encode(), b"\xef\xbf\xbd"))
            data[at:at] = unit * rng.choice((50, 300, 1500, 5000))
        elif op == 8:
            old, new = rng.sample([b"\n", b"\r\n", b"\r"], 2)
            data = bytearray(bytes(data).replace(old, new))
        elif op == 9 and n:
            del data[rng.randint(0, n) :]
        elif op == 10:
            header = rng.randbytes(HEADER)
        elif op == 11 and n:
            at = rng.randrange(n)
            data[at:at] = rng.choice((b"\r", b"\n", b"\r\n", b"\n\n"))
    return header + bytes(data[:MAX_LEN])


# -- engines ----------------------------------------------------------------------------------


def run_random(seconds: float, seed: int, crash_dir: Path) -> Stats:
    rng = random.Random(seed)
    stats = Stats(engine=f"random(seed={seed})")
    corpus = seed_corpus()
    seen: set[tuple[object, ...]] = set()
    for raw in corpus:
        outcome = one(stats, raw, crash_dir)
        if outcome is not None:
            seen.add(outcome.signature)
    deadline = stats.started + seconds
    while time.monotonic() < deadline:
        raw = mutate(rng, rng.choice(corpus), corpus)
        outcome = one(stats, raw, crash_dir)
        if outcome is not None and outcome.signature not in seen:
            seen.add(outcome.signature)
            if len(corpus) < 20000:
                corpus.append(raw)
        stats.corpus = len(corpus)
    return stats


def run_atheris(seconds: float, seed: int, crash_dir: Path, corpus_dir: Path | None) -> None:
    """libFuzzer over an instrumented ``sse_proxy.core``; exits the process when time is up."""
    atheris: Any = importlib.import_module("atheris")
    with atheris.instrument_imports(include=["sse_proxy.core"]):
        importlib.import_module("sse_proxy.core")
    stats = Stats(engine="atheris")
    deadline = stats.started + seconds
    work = corpus_dir or Path(tempfile.mkdtemp(prefix="sse-proxy-fuzz-corpus-"))
    work.mkdir(parents=True, exist_ok=True)
    for i, raw in enumerate(seed_corpus()):
        (work / f"seed-{i:04d}").write_bytes(raw)

    def test_one_input(raw: bytes) -> None:
        if stats.iterations % 256 == 0:  # libFuzzer adds what it finds to ``work``
            stats.corpus = sum(1 for _ in work.iterdir())
        one(stats, raw, crash_dir)
        if time.monotonic() >= deadline:
            say(stats.line(final=True))
            for signature, count in stats.signatures.most_common():
                say(f"  {count:6d}  {signature}")
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(1 if stats.failures else 0)

    crash_dir.mkdir(parents=True, exist_ok=True)
    argv = [
        sys.argv[0],
        str(work),
        f"-seed={seed}",
        f"-max_len={MAX_LEN}",
        "-timeout=30",
        "-rss_limit_mb=4096",
        f"-artifact_prefix={crash_dir}{os.sep}",
        "-print_final_stats=1",
    ]
    say(f"atheris: corpus {work}, crashes {crash_dir}")
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()


def replay(paths: Sequence[str]) -> int:
    bad = 0
    for name in paths:
        raw = Path(name).read_bytes()
        try:
            outcome = CHECK(raw)
        except Failure as failure:
            bad += 1
            say(f"FAIL {name}: {failure.signature}\n{failure.detail}")
        else:
            say(f"ok   {name}: {outcome.runs} runs")
    return 1 if bad else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m fuzz.fuzz_core", description=__doc__.split("\n")[0]
    )
    parser.add_argument("--minutes", type=float, default=5.0, help="how long to fuzz")
    parser.add_argument("--engine", choices=("auto", "atheris", "random"), default="auto")
    parser.add_argument("--seed", type=int, default=None, help="RNG seed (default: random)")
    parser.add_argument("--crash-dir", type=Path, default=CRASH_DIR)
    parser.add_argument("--corpus", type=Path, default=None, help="atheris corpus directory")
    parser.add_argument("--replay", nargs="+", metavar="FILE", help="re-check saved inputs")
    parser.add_argument(
        "--differential",
        action="store_true",
        help="compare the core with the reference parser in tests/oracle.py",
    )
    args = parser.parse_args(argv)
    global CHECK  # noqa: PLW0603 - one process runs one mode, chosen here once
    CHECK = check_differential if args.differential else check_input
    if args.replay:
        return replay(args.replay)
    seed = args.seed if args.seed is not None else random.SystemRandom().randrange(2**31)
    seconds = args.minutes * 60
    engine = args.engine
    if engine == "auto":
        try:
            importlib.import_module("atheris")
        except ImportError:
            engine = "random"
            say("atheris is not installed: using the random-mutation engine")
        else:
            engine = "atheris"
    mode = "differential" if args.differential else "properties"
    say(f"fuzzing sse_proxy.core for {args.minutes:g} min, engine={engine}, seed={seed}, {mode}")
    if engine == "atheris":
        run_atheris(seconds, seed, args.crash_dir, args.corpus)
        return 0  # not reached: libFuzzer exits the process
    stats = run_random(seconds, seed, args.crash_dir)
    say(stats.line(final=True))
    for signature, count in stats.signatures.most_common():
        say(f"  {count:6d}  {signature}")
    return 1 if stats.failures else 0


if __name__ == "__main__":
    sys.exit(main())
