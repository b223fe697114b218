"""Hand-run worst-case benchmark of the sans-IO core: hostile inputs next to a typical stream.

Not a test: run it by hand and read the figures (``bench/README.md``, "Worst case")::

    .venv/bin/python -m bench.worst_case --quick        # ~0.2 MB inputs, 10 s cap per case
    .venv/bin/python -m bench.worst_case                # ~1 MB inputs, 30 s cap per case
    .venv/bin/python -m bench.worst_case --case invalid-ff --case typical --cap 120

Every input goes through the full path of ``sse_proxy.core.StreamReassembler`` (auto-detected
dialect with the ``openai`` hint, as the proxy derives it from ``/v1/chat/completions``;
events and frame offsets on) once as one large read and once in 64 KiB reads (what aiohttp's
``iter_any`` hands the proxy). Each (input, reads) pair runs in its own forked child, so a
case that would take minutes on a quadratic core is killed at ``--cap`` seconds and reported
as ``FAIL (timeout)`` with the bounds it reached, instead of hanging the run. Times are CPU
time of the child (``time.process_time``), best of ``--repeats`` passes for fast cases, with
the garbage collector off (``--gc`` leaves it on), as in ``bench/bench_core.py``.

Targets: every input within 5x of the typical stream's MB/s (same read pattern),
and no single ``feed()`` over 50 ms of CPU. The output of each case is also checked (events
dispatched, and the message text where it is known): a fast but wrong core is a FAIL too.

Exit status: 1 if the core crashed or produced a wrong result on any input, else 0 (missed
speed targets are printed, not an error: same convention as ``bench_core``).
"""

from __future__ import annotations

import argparse
import gc
import json
import multiprocessing as mp
import os
import platform
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Connection

from bench.bench_core import core_revision
from bench.corpus import lf_corpus
from bench.harness import process_cpu
from sse_proxy.core import StreamReassembler

__all__ = ["CASES", "Built", "Case", "build_case", "openai_chunk"]

READ_64K = 64 * 1024
TARGET_SLOWDOWN = 5.0  # a worst case may be at most this many times slower than typical
TARGET_FEED_MS = 50.0  # no single feed() may take longer than this (CPU ms)
_BUILD_TIMEOUT = 120.0  # seconds a child may take to build its input before timing starts


# -- the inputs ------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Built:
    """One input and what a correct core must make of it (``None``: not checked)."""

    data: bytes
    events: int | None
    text: str | None


@dataclass(frozen=True, slots=True)
class Case:
    """A named input family; ``build(size)`` makes an input of about ``size`` bytes."""

    name: str
    what: str
    build: Callable[[int], Built]


def openai_chunk(content_json: bytes) -> bytes:
    """One OpenAI chat.completion.chunk frame whose ``content`` is the JSON string given
    (quotes included), written as the API writes it (compact, one ``data:`` line)."""
    head = (
        b'data: {"id":"chatcmpl-worstcase000000000000000001","object":"chat.completion.chunk",'
        b'"created":1718000000,"model":"gpt-4o-mini-2024-07-18","system_fingerprint":'
        b'"fp_0000000000","choices":[{"index":0,"delta":{"content":'
    )
    return head + content_json + b'},"logprobs":null,"finish_reason":null}]}\n\n'


def _typical(size: int) -> Built:
    c = lf_corpus(size / 1e6, seed=1)
    return Built(c.data, c.events, c.text)


def _invalid_ff(size: int) -> Built:
    # One complete data line of 0xFF, under the default 1 MiB line limit.
    return Built(b"data: " + b"\xff" * (size - 8) + b"\n\n", 1, None)


def _escapes(escape: bytes, char: str) -> Callable[[int], Built]:
    def build(size: int) -> Built:
        n = size * 9 // 10 // len(escape)  # 1,000,000 -> 150,000 escapes
        return Built(openai_chunk(b'"' + escape * n + b'"'), 1, char * n)

    return build


def _comments(size: int) -> Built:
    return Built(b":\n" * (size // 2), 0, "")


def _blank_lines(size: int) -> Built:
    return Built(b"\n" * size, 0, "")


def _tiny_data_lines(size: int) -> Built:
    # One frame of many one-byte data lines: the frame must stay under the 1 MiB limit.
    return Built(b"data:x\n" * (size // 7 - 1) + b"\n", 1, None)


def _lone_cr(size: int) -> Built:
    return Built(b"\r" * size, 0, "")


def _cr_frames(size: int) -> Built:
    n = size // 10
    return Built(b"data: x\r\r" * n, n, None)


_MULTIBYTE = "éЖ€あ中😀𝔸ß한🚀"  # 2-, 3- and 4-byte characters


def _multibyte_line(size: int) -> Built:
    unit = _MULTIBYTE.encode()
    n = size // len(unit)
    content = _MULTIBYTE * n
    return Built(openai_chunk(b'"' + content.encode() + b'"'), 1, content)


CASES: tuple[Case, ...] = (
    Case("typical", "OpenAI chat stream (bench/corpus.py lf, multilingual tokens)", _typical),
    Case("invalid-ff", "one complete data: line of 0xFF bytes", _invalid_ff),
    Case(
        "escape-fffd",
        "one OpenAI chunk, content = \\ufffd JSON escapes",
        _escapes(b"\\ufffd", "\ufffd"),
    ),
    Case(
        "escape-e9", "one OpenAI chunk, content = \\u00e9 JSON escapes", _escapes(b"\\u00e9", "é")
    ),
    Case("comments", "':\\n' comment lines", _comments),
    Case("blank-lines", "'\\n' blank lines", _blank_lines),
    Case("tiny-data-lines", "'data:x\\n' * N then '\\n': one frame", _tiny_data_lines),
    Case("lone-cr", "'\\r' * N", _lone_cr),
    Case("cr-frames", "'data: x\\r\\r' frames (CR line endings)", _cr_frames),
    Case("multibyte-line", "one OpenAI chunk, ~size of 2/3/4-byte characters", _multibyte_line),
)
_BY_NAME = {c.name: c for c in CASES}


def build_case(name: str, size: int) -> Built:
    """The input named ``name`` at about ``size`` bytes (the probe reuses these)."""
    return _BY_NAME[name].build(size)


# -- running one case in a child -------------------------------------------------------------


def _reads(data: bytes, read_size: int) -> list[bytes]:
    if read_size <= 0:
        return [data]
    return [data[i : i + read_size] for i in range(0, len(data), read_size)]


def _one_pass(
    chunks: list[bytes], progress: Callable[[int, float], None] | None
) -> tuple[float, float, StreamReassembler]:
    """Feed every read and close; (total CPU s, max single feed CPU s, the reassembler)."""
    clock = time.process_time
    r = StreamReassembler(None, hint="openai", emit_events=True)
    feed = r.feed
    worst = 0.0
    done = 0
    t_start = clock()
    for chunk in chunks:
        t0 = clock()
        feed(chunk)
        dt = clock() - t0
        worst = max(worst, dt)
        done += len(chunk)
        if progress is not None:
            progress(done, worst)
    t0 = clock()
    r.close()
    dt = clock() - t0
    worst = max(worst, dt)
    return clock() - t_start, worst, r


def _child(
    name: str,
    size: int,
    read_size: int,
    repeats: int,
    budget: float,
    keep_gc: bool,
    conn: Connection,
) -> None:
    """Build the input, time it, send the figures back (protocol: see :func:`_run_case`)."""
    try:
        built = build_case(name, size)
        chunks = _reads(built.data, read_size)
        gc.collect()
        if not keep_gc:
            gc.disable()
        conn.send(("start", time.process_time(), len(built.data), len(chunks)))

        def progress(done: int, worst: float) -> None:
            conn.send(("progress", done, worst, time.process_time()))

        total, worst, r = _one_pass(chunks, progress if len(chunks) > 1 else None)
        problems: list[str] = []
        if built.events is not None and r.events_dispatched != built.events:
            problems.append(f"events {r.events_dispatched:,} != {built.events:,}")
        if built.text is not None and r.text != built.text:
            problems.append(f"text differs ({len(r.text):,} chars vs {len(built.text):,})")
        alerts = dict(r.alert_counts)
        dialect = r.dialect
        del r
        # Fast cases: best of at least ``repeats`` passes and ~``budget`` s of CPU (a 3 ms
        # pass alone is timer noise); slow ones: the first pass is the figure.
        passes, spent = 1, total
        while total < budget / 2 and passes < 200 and (passes < repeats or spent < budget):
            t, w, r = _one_pass(chunks, None)
            del r
            passes += 1
            spent += t
            total, worst = min(total, t), min(worst, w)
        conn.send(
            (
                "done",
                {
                    "bytes": len(built.data),
                    "reads": len(chunks),
                    "total": total,
                    "worst": worst,
                    "passes": passes,
                    "problems": problems,
                    "alerts": alerts,
                    "dialect": dialect,
                },
            )
        )
    except BaseException as exc:  # a crash of the core is a finding, not a bench error
        conn.send(("error", f"{type(exc).__name__}: {exc}"[:300]))
    finally:
        conn.close()


@dataclass
class Result:
    """One (input, reads) measurement; ``timeout``/``error`` say how it did not finish."""

    case: str
    reads_label: str
    size: int
    bytes: int = 0
    reads: int = 0
    total: float = 0.0  # CPU s of the best pass (a lower bound when timed out)
    worst: float = 0.0  # CPU s of the slowest single feed (a lower bound when timed out)
    done: int = 0  # bytes fed before the timeout
    passes: int = 0
    timeout: bool = False
    error: str | None = None
    problems: list[str] = field(default_factory=list)
    alerts: dict[str, int] = field(default_factory=dict)
    dialect: str = ""

    @property
    def finished(self) -> bool:
        return not self.timeout and self.error is None

    @property
    def mbps(self) -> float:
        """MB/s (1 MB = 10**6 B); for a timeout an upper bound: it had not finished."""
        if self.total <= 0:
            return float("inf")
        return self.bytes / 1e6 / self.total


def _run_case(name: str, size: int, read_size: int, args: argparse.Namespace) -> Result:
    """Run one case in a forked child under the wall-clock cap ``args.cap``.

    The child sends ``("start", cpu, bytes, reads)`` when timing begins, ``("progress",
    bytes, worst, cpu)`` after each read of the first pass (when there is more than one), then
    ``("done", figures)`` or ``("error", message)``. Past the cap the child is killed; its
    CPU time (psutil) bounds the figures it did not reach.
    """
    label = "one read" if read_size <= 0 else f"{read_size // 1024} KiB"
    res = Result(name, label, size)
    ctx = mp.get_context("fork")
    parent, child_end = ctx.Pipe(duplex=False)
    proc = ctx.Process(
        target=_child,
        args=(name, size, read_size, args.repeats, min(0.5, args.cap / 4), args.gc, child_end),
        daemon=True,
    )
    proc.start()
    child_end.close()
    start_cpu: float | None = None
    last_cpu = 0.0
    deadline = time.monotonic() + _BUILD_TIMEOUT
    try:
        while True:
            left = deadline - time.monotonic()
            if not parent.poll(max(left, 0.0)):
                if start_cpu is None:
                    res.error = f"building the input took over {_BUILD_TIMEOUT:g} s"
                    break
                res.timeout = True
                cpu = process_cpu(proc.pid or 0)
                if cpu is None:  # (gone): the wall-clock cap bounds it instead
                    cpu = start_cpu + args.cap
                res.total = max(cpu - start_cpu, 0.0)
                res.worst = max(res.worst, cpu - last_cpu)  # the feed under way at the cap
                break
            try:
                msg = parent.recv()
            except EOFError:
                res.error = f"child died (exit code {proc.exitcode})"
                break
            kind = msg[0]
            if kind == "start":
                _k, start_cpu, res.bytes, res.reads = msg
                last_cpu = start_cpu
                deadline = time.monotonic() + args.cap
            elif kind == "progress":
                _k, res.done, res.worst, last_cpu = msg
            elif kind == "done":
                for k, v in msg[1].items():
                    setattr(res, k, v)
                break
            else:
                res.error = msg[1]
                break
    finally:
        if proc.is_alive():
            proc.kill()
        proc.join()
        parent.close()
    return res


# -- the table --------------------------------------------------------------------------------


def _verdicts(res: Result, typical: Result | None) -> tuple[str, str, str]:
    """(slowdown vs typical, speed verdict, feed verdict)."""
    if res.error is not None:
        return "--", "FAIL", "FAIL"
    slow = "--"
    speed = "--"
    if typical is not None and typical.finished:
        ratio = typical.mbps / res.mbps if res.mbps > 0 else float("inf")
        if res.timeout:
            slow = f">{ratio:.0f}x" if ratio >= 10 else f">{ratio:.1f}x"
            speed = "FAIL"
        else:
            slow = f"{ratio:.2f}x"
            speed = "PASS" if ratio <= TARGET_SLOWDOWN else "FAIL"
    feed_ok = res.worst * 1e3 <= TARGET_FEED_MS and not res.timeout
    if res.problems:
        speed = "FAIL"
    return slow, speed, "PASS" if feed_ok else "FAIL"


def _fmt_ms(res: Result) -> str:
    ms = res.worst * 1e3
    return (">" if res.timeout else "") + (f"{ms:,.0f}" if ms >= 100 else f"{ms:.1f}")


def _fmt_mbps(res: Result) -> str:
    if res.error is not None:
        return "--"
    v = res.mbps
    return ("<" if res.timeout else "") + (f"{v:.2f}" if v < 10 else f"{v:.1f}")


def print_table(results: list[Result], cap: float) -> list[str]:
    """Print the side-by-side table; return the failed rows' names."""
    typical = {r.reads_label: r for r in results if r.case == "typical"}
    head = (
        f"{'input':<16} {'reads':<9} {'MB':>6} {'MB/s':>9} {'x typical':>10} "
        f"{'max feed ms':>12} {'<=5x':>5} {'<=50ms':>7}  note"
    )
    print(head)
    print("-" * len(head))
    failed: list[str] = []
    for res in results:
        slow, speed, feed = _verdicts(res, typical.get(res.reads_label))
        note = ""
        if res.error is not None:
            note = f"CRASH: {res.error}"
        elif res.timeout:
            note = f"FAIL (timeout at {cap:g} s)"
            if res.reads > 1 or res.reads_label != "one read":
                note += f": {res.done / 1e6:.2f} of {res.bytes / 1e6:.2f} MB fed"
        elif res.problems:
            note = "WRONG: " + "; ".join(res.problems)
        print(
            f"{res.case:<16} {res.reads_label:<9} {res.bytes / 1e6:6.2f} {_fmt_mbps(res):>9} "
            f"{slow:>10} {_fmt_ms(res):>12} {speed:>5} {feed:>7}  {note}".rstrip()
        )
        if "FAIL" in (speed, feed):
            failed.append(f"{res.case} ({res.reads_label})")
    return failed


def header(args: argparse.Namespace) -> str:
    return (
        f"sse-proxy worst-case benchmark: Python {platform.python_version()} "
        f"({platform.python_implementation()}), {platform.machine()}, {os.cpu_count()} CPUs "
        f"(load average {os.getloadavg()[0]:.1f} at the start)\n"
        f"sse-proxy at {core_revision()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n"
        f"StreamReassembler(None, hint='openai', emit_events=True): full path, events, dialect\n"
        f"input size ~{args.size / 1e6:g} MB, cap {args.cap:g} s (wall) per case; fast cases: "
        f"best of >= {args.repeats} passes and ~{min(0.5, args.cap / 4):g} s of CPU\n"
        f"gc {'on' if args.gc else 'off'}, CPU time of the child; MB = 10**6 B; a timed-out "
        "row shows bounds (<, >) from the CPU time it had used\n"
        "typical: run first and again last, the faster run counts\n"
        f"'x typical' = typical MB/s / this MB/s, same reads (target <= {TARGET_SLOWDOWN:g}x); "
        f"'max feed ms' = slowest single feed() or close() (target <= {TARGET_FEED_MS:g} ms)\n"
    )


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        prog="python -m bench.worst_case", description=(__doc__ or "").split("\n")[0]
    )
    ap.add_argument("--quick", action="store_true", help="~0.2 MB inputs, 10 s cap per case")
    ap.add_argument("--size", type=int, help="bytes per input (default 1,000,000; quick 200,000)")
    ap.add_argument(
        "--cap", type=float, help="seconds per case before it is cut off (30; quick 10)"
    )
    ap.add_argument(
        "--repeats", type=int, default=3, help="least timed passes of a fast case; best counts"
    )
    ap.add_argument(
        "--case",
        action="append",
        choices=[c.name for c in CASES],
        help="input to run (repeatable; default all; typical always runs)",
    )
    ap.add_argument(
        "--reads",
        choices=("both", "one", "64k"),
        default="both",
        help="one large read, 64 KiB reads, or both (default)",
    )
    ap.add_argument("--gc", action="store_true", help="leave the garbage collector on")
    ap.add_argument("--json", metavar="FILE", help="also write the figures as JSON to FILE")
    args = ap.parse_args(argv)
    if args.size is None:
        args.size = 200_000 if args.quick else 1_000_000
    if args.cap is None:
        args.cap = 10.0 if args.quick else 30.0
    if args.size < 100 or args.size > 1_040_000:
        ap.error("--size must be 100..1,040,000 bytes (inputs must stay under the 1 MiB limit)")
    if args.cap <= 0:
        ap.error("--cap must be > 0")
    if args.repeats < 1:
        ap.error("--repeats must be >= 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    names = ["typical", *(n for n in (args.case or [c.name for c in CASES]) if n != "typical")]
    read_sizes = {"both": (0, READ_64K), "one": (0,), "64k": (READ_64K,)}[args.reads]
    print(header(args))
    for name in names:
        print(f"  {name:<16} {_BY_NAME[name].what}")
    print(flush=True)
    t_start = time.monotonic()
    results: list[Result] = []
    # The typical stream runs first and again last; the faster of the two is the reference
    # (load on a shared machine drifts during a run; the faster figure is the stricter one).
    rounds = [*names, "typical"]
    for i, name in enumerate(rounds):
        for rs in read_sizes:
            res = _run_case(name, args.size, rs, args)
            if i == len(rounds) - 1:  # the typical stream again: keep the faster run
                k = next(
                    j
                    for j, r in enumerate(results)
                    if r.case == "typical" and r.reads_label == res.reads_label
                )
                if not results[k].finished or (res.finished and res.total < results[k].total):
                    results[k] = res
            else:
                results.append(res)
            state = "timeout" if res.timeout else ("error" if res.error else "ok")
            print(
                f"  ran {name:<16} {res.reads_label:<9} {state:<7} "
                f"{res.total:7.2f} s CPU, max feed {res.worst * 1e3:9.1f} ms",
                file=sys.stderr,
                flush=True,
            )
    print()
    failed = print_table(results, args.cap)
    print()
    print("alerts and dialect per input (one read):")
    for res in results:
        if res.reads_label == "one read" and res.finished:
            alerts = ", ".join(f"{k}={v:,}" for k, v in sorted(res.alerts.items())) or "none"
            print(f"  {res.case:<16} dialect={res.dialect:<9} alerts: {alerts}")
    print()
    print(
        f"targets: {len(results) - len(failed)} of {len(results)} rows PASS"
        + (f"; FAIL: {', '.join(failed)}" if failed else "")
    )
    print(f"(total wall time {time.monotonic() - t_start:.0f} s)")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump(
                {"args": vars(args), "results": [vars(r) for r in results]},
                f,
                indent=1,
                default=str,
            )
    broken = [r for r in results if r.error is not None or r.problems]
    return 1 if broken else 0


if __name__ == "__main__":
    sys.exit(main())
