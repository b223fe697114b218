"""Scale and first-byte latency, side by side with the proxies a user would pick instead.

Hand-run (not a test). ``bench/proxy_README.md`` ("Scale and first byte") says
what every figure means and why the pinned and unpinned figures differ::

    .venv/bin/python -m bench.bench_scale                  # both modes, every contender (~13 min)
    .venv/bin/python -m bench.bench_scale --quick          # shorter ladder, fewer streams
    .venv/bin/python -m bench.bench_scale --modes unpinned \
        --contenders direct,bare-uvloop,sse-uvloop     # one mode, three rows

The stream shape is On the Bench's (GetBusbar/benchmarking): a role chunk, 64 content
deltas 20 ms apart, a finish chunk and ``[DONE]``, from the upstream of ``bench_proxy.py``
(its events, its timestamps). For each contender, started fresh in each mode:

* **added TTFT** at one stream: time from the request to the first content frame, minus
  direct's (median over ``--ttft-streams`` streams one after another); **added
  inter-frame p50/p99**: the percentiles of the gaps between content frames as they
  arrive, minus direct's;
* **TTFB p50, 50 streams starting together**: first body byte, each stream from its own
  request (connections warm: a burst before fills both pools), the starts spread over
  20 ms and each stream of the shape below, as an outside harness measures it;
  the median over ``BURSTS`` bursts a quarter of a second apart. Beside it, for
  reference, the same with 50 starts at once and two deltas a stream (``TTFB@once``): the
  harder burst, where every start queues behind all the others;
* **500 paced streams** (25,000 events/s offered): delivered events/s (frames over the
  phase's wall time) and the send->arrival latency p99 of every event;
* **peak RSS** after that phase (VmHWM), and per stream over the idle process;
* **saturated CPU per event**, 50 streams, the upstream writing as fast as it can, and the
  proxy's read and write syscalls per event (psutil's I/O counters): how many events a read
  carried, which is what makes pinned and unpinned disagree;
* **streams sustained**: the ladder ``--ladder`` (up to 2,000) of concurrent streams of the
  shape; a level is sustained when every frame of every stream arrives with the exact
  content, no stream waits more than 10x the pacing (200 ms) between two frames, and under
  0.1 % of streams fail. The ladder stops at the first level that is not; ``direct``'s own
  ceiling is the rig's (the load generator is one Python process), and a contender that
  reaches it is marked ``rig-bound``.

Every stream of every contender is checked: byte for byte against what the upstream sent
(timestamps masked) for the proxies that forward bytes, and the content text exactly for
LiteLLM (which rebuilds each chunk). ``--modes`` runs ``unpinned`` (everything shares both
CPUs, as a user's machine does) and ``pinned`` (the proxy alone on the last CPU, upstream
and load generator on the rest: ``bench_proxy --pin``).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import re
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench import harness, rig

SHAPE_EVENTS = 64  # content deltas per stream
SHAPE_PACE_MS = 20.0
STALL_X = 10  # a stream waiting more than this many pacing intervals has stalled
MAX_ERROR_RATE = 0.001
LADDER = (1, 64, 256, 512, 1024, 2000)
QUICK_LADDER = (1, 64, 256, 512)
PACED_STREAMS = 500
BURST_STREAMS = 50
BURST_SPREAD_MS = 20.0  # "50 streams starting within 20 ms"
BURSTS = 5
SATURATED_STREAMS = 50
CONTENDERS = (
    "direct",
    "bare-asyncio",
    "bare-uvloop",
    "sse-asyncio",
    "sse-uvloop",
    "nginx",
    "mitmproxy",
    "litellm",
)
REFERENCE = "bare-uvloop"
SSE = "sse-uvloop"
# the scale and first-byte targets, against bare aiohttp on uvloop in the same run and mode
TARGET_TTFB_ADDED_MS = 1.0
TARGET_DELIVERED = 0.95
TARGET_P99 = 1.5
TARGET_CPU = 1.3
TARGET_RSS_KIB_PER_STREAM = 100
TURN_BURSTS = 12  # bursts of 50 per proxy in one round's turns
TURN_PACED = 5  # 500-paced phases per proxy in one round's turns

_CONTENT = re.compile(rb'"content":"[^"]')
_TS_IN_TEXT = re.compile(rf"~T\d{{{rig.TS_DIGITS}}}")


def expected_shape(n: int) -> bytes:
    zero = 10 ** (rig.TS_DIGITS - 1)
    return rig.TS_RE.sub(rig.TS_ZERO, rig.role_event(zero) + rig.expected_stream(n))


# -- role: load generator --------------------------------------------------------------------


@dataclass
class _Acc:
    streams: int = 0
    ok: int = 0
    frames: int = 0
    content_frames: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    ttfb: list[int] = field(default_factory=list)
    ttft: list[int] = field(default_factory=list)
    gaps: list[int] = field(default_factory=list)
    lats: list[int] = field(default_factory=list)
    max_gap: int = 0


def _text_of(body: bytes) -> str:
    """The content text of a (possibly rebuilt) OpenAI stream, send stamps removed."""
    out = []
    for frame in body.split(b"\n\n"):
        for line in frame.split(b"\n"):
            if line.startswith(b"data:") and line[5:].strip() != b"[DONE]":
                with contextlib.suppress(ValueError, KeyError, IndexError, TypeError):
                    delta = json.loads(line[5:])["choices"][0]["delta"]
                    out.append(delta.get("content") or "")
    return _TS_IN_TEXT.sub("", "".join(out))


async def _stream(
    session: Any, url: str, spec: dict[str, Any], delay: float, acc: _Acc, expected: bytes
) -> None:
    import aiohttp

    n, pace = int(spec["n"]), float(spec.get("pace_ms", 0))
    lenient = bool(spec.get("lenient"))
    if delay:
        await asyncio.sleep(delay)
    params = {"n": str(n), "pace_ms": f"{pace:g}", "role": "1"}
    body = rig.REQUEST_BODY
    if lenient:
        user = f"bench:n={n}:pace_ms={pace:g}:tsc=1:role=1"
        body = json.dumps({**json.loads(rig.REQUEST_BODY), "user": user}).encode()
    timed = bool(spec.get("timed", True))
    chunks: list[bytes] = []
    frames = content = 0
    first_content = last_frame = 0
    buf = b""
    acc.streams += 1
    t0 = time.perf_counter_ns()
    try:
        async with session.post(url, params=params, data=body, headers=rig.REQUEST_HEADERS) as r:
            if r.status != 200:
                acc.errors[f"HTTP {r.status}: {(await r.read())[:100]!r}"] += 1
                return
            first = True
            async for chunk in r.content.iter_any():
                now = time.perf_counter_ns()
                wall = time.time_ns()
                chunks.append(chunk)
                if first:
                    acc.ttfb.append(now - t0)
                    first = False
                if not timed:
                    continue
                buf += chunk
                if b"\n\n" not in buf:
                    continue
                parts = buf.split(b"\n\n")
                buf = parts.pop()
                for part in parts:
                    frames += 1
                    if last_frame:
                        acc.max_gap = max(acc.max_gap, now - last_frame)
                    last_frame = now
                    if _CONTENT.search(part) is None:
                        continue
                    if content:
                        acc.gaps.append(now - first_content)
                    else:
                        acc.ttft.append(now - t0)
                    first_content = now
                    content += 1
                    i = part.find(b'"t":')
                    if i >= 0 and not lenient:
                        acc.lats.append(wall - int(part[i + 4 : i + 4 + rig.TS_DIGITS]))
                    elif (i := part.find(rig.TS_MARK)) >= 0:
                        acc.lats.append(wall - int(part[i + 2 : i + 2 + rig.TS_DIGITS]))
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        acc.errors[f"{type(exc).__name__}: {str(exc)[:100]}"] += 1
        return
    got = b"".join(chunks)
    acc.frames += frames if timed else got.count(b"\n\n")
    acc.content_frames += content
    if lenient:
        if _text_of(got) != "".join(rig.TOKENS[i % len(rig.TOKENS)] for i in range(n)):
            acc.errors["content text differs from what the upstream sent"] += 1
            return
    elif rig.TS_RE.sub(rig.TS_ZERO, got) != expected:
        acc.errors[f"stream bytes differ from what the upstream sent ({len(got)} bytes)"] += 1
        return
    acc.ok += 1


async def _phase(session: Any, url: str, spec: dict[str, Any]) -> dict[str, Any]:
    acc = _Acc()
    streams, n = int(spec["streams"]), int(spec["n"])
    expected = expected_shape(n)
    spread = float(spec.get("spread_ms", 0)) / 1000
    sequential = bool(spec.get("sequential"))
    t0 = time.perf_counter()
    timed_out = False
    try:
        async with asyncio.timeout(float(spec.get("timeout_s", 120))):
            if sequential:
                for _ in range(streams):
                    await _stream(session, url, spec, 0.0, acc, expected)
            else:
                jobs = [
                    _stream(session, url, spec, i * spread / streams, acc, expected)
                    for i in range(streams)
                ]
                await asyncio.gather(*jobs)
    except TimeoutError:
        timed_out = True
        acc.errors["phase timed out"] += streams - acc.ok - sum(acc.errors.values())
    wall = time.perf_counter() - t0
    return {
        "name": spec["name"],
        "streams": streams,
        "ok": acc.ok,
        "frames": acc.frames,
        "content_frames": acc.content_frames,
        "wall_s": wall,
        "events_per_s": acc.content_frames / wall if wall > 0 else 0.0,
        "ttfb_p50_ms": harness.pct_ms(acc.ttfb, 50),
        "ttfb_max_ms": harness.pct_ms(acc.ttfb, 100),
        "ttft_p50_ms": harness.pct_ms(acc.ttft, 50),
        "gap_p50_ms": harness.pct_ms(acc.gaps, 50),
        "gap_p99_ms": harness.pct_ms(acc.gaps, 99),
        "lat_p50_ms": harness.pct_ms(acc.lats, 50),
        "lat_p99_ms": harness.pct_ms(acc.lats, 99),
        "max_gap_ms": acc.max_gap / 1e6,
        "errors": dict(acc.errors.most_common(4)),
        "error_count": sum(acc.errors.values()),
        "timed_out": timed_out,
    }


async def _load_main(url: str, phases: list[dict[str, Any]]) -> None:
    import aiohttp

    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=60),
    ) as session:
        for spec in phases:
            print(json.dumps({"ready": spec["name"]}), flush=True)
            go = await loop.run_in_executor(None, sys.stdin.readline)
            if go.strip() != "go":
                return
            print(json.dumps({"result": await _phase(session, url, spec)}), flush=True)


def _role_load(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="bench_scale _load")
    ap.add_argument("--url", required=True)
    ap.add_argument("--plan", required=True)
    ap.add_argument("--loop", default="uvloop", choices=rig.LOOPS)
    args = ap.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 65536 if hard == resource.RLIM_INFINITY else hard
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    loop = args.loop if rig.uvloop_note() is None else "asyncio"
    rig.run_on(loop, _load_main(args.url, json.loads(args.plan)))
    return 0


class ScaleLoad(rig.LoadGen):
    """The load generator process of this bench (its own phases, on uvloop)."""

    def __init__(self, url: str, phases: list[dict[str, Any]]) -> None:
        argv = [sys.executable, "-m", "bench.bench_scale", "_load", "--url", url + rig.API_PATH]
        self.proc = subprocess.Popen(
            [*argv, "--plan", json.dumps(phases)],
            cwd=harness.ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=harness.die_with_parent,  # noqa: PLW1509 - one prctl call, no locks
        )
        import queue
        import threading

        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()


# -- the orchestrator ------------------------------------------------------------------------


_io = harness.io_calls


@dataclass
class Result:
    contender: str
    mode: str
    note: str = ""
    errors: list[str] = field(default_factory=list)
    error_count: int = 0
    ttft_ms: float = float("nan")
    gap_p50_ms: float = float("nan")
    gap_p99_ms: float = float("nan")
    ttfb50_ms: float = float("nan")
    ttfb50_once_ms: float = float("nan")
    paced_eps: float = float("nan")
    paced_p99_ms: float = float("nan")
    paced_max_gap_ms: float = float("nan")
    idle_rss_mib: float = float("nan")
    peak_rss_mib: float = float("nan")
    sat_eps: float = float("nan")
    sat_cpu_us: float = float("nan")
    sat_cpu_pct: float = float("nan")
    reads_per_ev: float = float("nan")
    writes_per_ev: float = float("nan")
    sustained: int = 0
    sustained_eps: float = float("nan")
    ladder: list[str] = field(default_factory=list)
    others_pct: float = float("nan")


def _sustained(res: dict[str, Any]) -> str | None:
    """Why a ladder level is not sustained (None: it is)."""
    streams = res["streams"]
    if res["error_count"] > MAX_ERROR_RATE * streams:
        first, count = next(iter(res["errors"].items()))
        return f"{res['error_count']} of {streams} streams failed ({first} x{count})"
    if res["content_frames"] != streams * SHAPE_EVENTS:
        return f"{res['content_frames']} of {streams * SHAPE_EVENTS} content frames"
    if res["max_gap_ms"] > STALL_X * SHAPE_PACE_MS:
        return f"a stream waited {res['max_gap_ms']:.0f} ms between frames"
    return None


def run_contender(
    name: str, mode: str, args: argparse.Namespace, upstream: harness.Service, workdir: Path
) -> Result:
    out = Result(name, mode)
    rig.PIN = mode == "pinned"
    lenient = name in rig.LENIENT
    slow = name in ("litellm", "mitmproxy")
    try:
        svc = rig.start_contender(name, upstream, workdir)
    except (RuntimeError, OSError) as exc:
        out.note = f"did not start: {exc}"
        return out
    url = svc.url if svc is not None else upstream.url
    pids = svc.pids if svc is not None else []
    shape = {"n": SHAPE_EVENTS, "pace_ms": SHAPE_PACE_MS, "lenient": lenient}
    sat_n = max(100, args.saturated_events // SATURATED_STREAMS // (20 if slow else 1))
    paced_streams = min(PACED_STREAMS, 100) if name == "litellm" else PACED_STREAMS
    ladder = [lv for lv in args.ladder if lv > 1]
    phases: list[dict[str, Any]] = [
        {"name": "warm", "streams": BURST_STREAMS, "n": 2, "timeout_s": 120, "lenient": lenient},
        {"name": "ttft", "streams": args.ttft_streams, "sequential": True, **shape},
        *({"name": f"burst{i}", "streams": BURST_STREAMS, "spread_ms": BURST_SPREAD_MS,
           **shape} for i in range(BURSTS)),
        *({"name": f"once{i}", "streams": BURST_STREAMS, "n": 2, "lenient": lenient}
          for i in range(BURSTS)),
        {"name": "paced", "streams": paced_streams, "spread_ms": SHAPE_PACE_MS, **shape},
        {"name": "saturated", "streams": SATURATED_STREAMS, "n": sat_n, "timed": False,
         "lenient": lenient, "timeout_s": 180},
    ]  # fmt: skip
    phases += [{"name": f"ladder{lv}", "streams": lv, **shape, "timeout_s": 60} for lv in ladder]
    load = ScaleLoad(url, phases)
    rig.pin(pids, "proxy")
    rig.pin([*upstream.pids, load.proc.pid], "load")
    ours = [*pids, *upstream.pids, load.proc.pid]
    busy0 = harness.machine_busy_seconds() - harness.own_cpu(ours)
    t_start = time.monotonic()

    def check(res: dict[str, Any]) -> None:
        out.error_count += res["error_count"]
        out.errors += [f"{res['name']}: {k} (x{v})" for k, v in res["errors"].items()]

    try:
        check(load.run("warm", 120))
        out.idle_rss_mib = harness.rss_mib(pids)
        res = load.run("ttft", 120)
        check(res)
        out.ttft_ms, out.gap_p50_ms, out.gap_p99_ms = (
            res["ttft_p50_ms"],
            res["gap_p50_ms"],
            res["gap_p99_ms"],
        )
        for kind in ("burst", "once"):
            bursts = []
            for i in range(BURSTS):
                res = load.run(f"{kind}{i}", 60)
                check(res)
                bursts.append(res["ttfb_p50_ms"])
                time.sleep(0.25)  # the burst's bookkeeping done before the next
            if kind == "burst":
                out.ttfb50_ms = statistics.median(bursts)
            else:
                out.ttfb50_once_ms = statistics.median(bursts)
        res = load.run("paced", 120)
        check(res)
        out.paced_eps, out.paced_p99_ms = res["events_per_s"], res["lat_p99_ms"]
        out.paced_max_gap_ms = res["max_gap_ms"]
        out.peak_rss_mib = harness.peak_rss_mib(pids)
        marks: dict[str, Any] = {}

        def before() -> None:
            marks["cpu"] = harness.cpu_seconds(pids)
            marks["io"] = _io(pids)

        res = load.run("saturated", 180, before)
        check(res)
        if pids:
            cpu = harness.cpu_seconds(pids) - marks["cpu"]
            r1, w1 = _io(pids)
            events = max(1, res["frames"])
            out.sat_cpu_us = 1e6 * cpu / events
            out.sat_cpu_pct = 100 * cpu / res["wall_s"]
            out.reads_per_ev = (r1 - marks["io"][0]) / events
            out.writes_per_ev = (w1 - marks["io"][1]) / events
        out.sat_eps = res["frames"] / res["wall_s"]
        out.sustained = 1 if out.error_count == 0 else 0
        for lv in ladder:
            res = load.run(f"ladder{lv}", 60)
            why = _sustained(res)
            ok = f"ok, {res['events_per_s']:,.0f} ev/s, p99 {res['lat_p99_ms']:,.0f} ms"
            out.ladder.append(f"{lv}: " + (why or ok))
            if why is not None:
                break
            out.sustained, out.sustained_eps = lv, res["events_per_s"]
    except (RuntimeError, TimeoutError, AssertionError, KeyError) as exc:
        out.note = f"failed: {exc}"
    finally:
        wall = time.monotonic() - t_start
        others = harness.machine_busy_seconds() - harness.own_cpu(ours) - busy0
        out.others_pct = 100 * max(0, others) / max(wall, 1e-9)
        load.stop()
        if svc is not None:
            svc.stop()
    return out


@dataclass
class Turns:
    """One round's turns: sse-proxy and the bare proxy both up, taking turns phase by phase.

    Each value is one pair of phases run back to back (in the order bare, sse, sse, bare,
    bare...: the second of a pair runs a few percent worse, so each goes second as often).
    Contenders run one after the other are a minute or two apart, and a shared machine's
    load moves a burst's TTFB by several milliseconds in that time (burst_pair's rounds:
    12 to 19 ms for the same tree), many times the 1 ms target; a pair is a second apart."""

    ttfb_added_ms: list[float] = field(default_factory=list)
    delivered: list[float] = field(default_factory=list)
    p99: list[float] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)
    note: str = ""


def take_turns(mode: str, workdir: Path) -> Turns:
    """The drift-sensitive targets' figures (TTFB@50, the 500 paced streams' delivered
    events/s and p99) with :data:`SSE` and :data:`REFERENCE` taking turns (:class:`Turns`);
    every stream checked for exact content as in the contenders' runs."""
    out = Turns()
    rig.PIN = mode == "pinned"
    shape = {"n": SHAPE_EVENTS, "pace_ms": SHAPE_PACE_MS}
    phases: list[dict[str, Any]] = [
        {"name": "warm", "streams": BURST_STREAMS, "n": 2, "timeout_s": 120},
        *({"name": f"burst{i}", "streams": BURST_STREAMS, "spread_ms": BURST_SPREAD_MS, **shape}
          for i in range(TURN_BURSTS)),
        *({"name": f"paced{i}", "streams": PACED_STREAMS, "spread_ms": SHAPE_PACE_MS, **shape}
          for i in range(TURN_PACED)),
    ]  # fmt: skip
    loop = "asyncio" if rig.uvloop_note() else "uvloop"
    upstream = rig.start_upstream(workdir, loop)
    started: list[tuple[harness.Service, ScaleLoad]] = []
    try:
        for name in (REFERENCE, SSE):
            svc = rig.start_contender(name, upstream, workdir)
            assert svc is not None, f"{name} has no process"
            started.append((svc, ScaleLoad(svc.url, phases)))
        for svc, load in started:
            rig.pin(svc.pids, "proxy")
            rig.pin([*upstream.pids, load.proc.pid], "load")

        def run(load: ScaleLoad, phase: str) -> dict[str, Any]:
            res = load.run(phase, 120)
            out.errors += [f"{phase}: {k} (x{v})" for k, v in res["errors"].items()]
            return res

        for _svc, load in started:
            run(load, "warm")
        (_, bare), (_, sse) = started
        for i in range(TURN_BURSTS + TURN_PACED):
            phase = f"burst{i}" if i < TURN_BURSTS else f"paced{i - TURN_BURSTS}"
            got: dict[int, dict[str, Any]] = {}
            for load in (bare, sse) if i % 2 == 0 else (sse, bare):
                time.sleep(0.25)  # the last phase's bookkeeping done, in both
                got[id(load)] = run(load, phase)
            s, b = got[id(sse)], got[id(bare)]
            if i < TURN_BURSTS:
                out.ttfb_added_ms.append(s["ttfb_p50_ms"] - b["ttfb_p50_ms"])
            else:
                out.delivered.append(_ratio(s["events_per_s"], b["events_per_s"]))
                out.p99.append(_ratio(s["lat_p99_ms"], b["lat_p99_ms"]))
    except (RuntimeError, TimeoutError, AssertionError, KeyError, OSError) as exc:
        out.note = f"failed: {exc}"
    finally:
        for svc, load in started:
            load.stop()
            svc.stop()
        upstream.stop()
    return out


def _ratio(a: float, b: float) -> float:
    return a / b if b > 0 else float("nan")


def _f(v: float, fmt: str, width: int) -> str:
    return ("-" if v != v else format(v, fmt)).rjust(width)


def _per(syscalls_per_event: float) -> float:
    """Events per syscall (NaN where none were counted)."""
    if syscalls_per_event != syscalls_per_event or syscalls_per_event <= 0:
        return float("nan")
    return 1 / syscalls_per_event


def print_table(mode: str, rows: list[Result]) -> None:
    direct = next((r for r in rows if r.contender == "direct"), None)
    print(f"\n== {mode} ==")
    print(
        f"{'contender':<14}{'+TTFT ms':>9}{'+gap p50':>9}{'+gap p99':>9}{'TTFB@50':>9}"
        f"{'@once':>7}"
        f"{'500 ev/s':>10}{'500 p99':>9}{'RSS MiB':>8}{'KiB/str':>8}{'sat ev/s':>10}"
        f"{'CPU us/ev':>10}{'CPU %':>6}{'ev/rd':>6}{'ev/wr':>6}{'sustained':>10}{'other%':>7}"
    )
    for r in rows:
        add = (
            (lambda a, b: a - b)
            if direct is not None and r is not direct
            else (lambda a, b: float("nan"))
        )
        d = direct or r
        per_stream = 1024 * (r.peak_rss_mib - r.idle_rss_mib) / PACED_STREAMS
        print(
            f"{r.contender:<14}{_f(add(r.ttft_ms, d.ttft_ms), '+.3f', 9)}"
            f"{_f(add(r.gap_p50_ms, d.gap_p50_ms), '+.3f', 9)}"
            f"{_f(add(r.gap_p99_ms, d.gap_p99_ms), '+.3f', 9)}{_f(r.ttfb50_ms, '.2f', 9)}"
            f"{_f(r.ttfb50_once_ms, '.2f', 7)}"
            f"{_f(r.paced_eps, ',.0f', 10)}{_f(r.paced_p99_ms, '.1f', 9)}"
            f"{_f(r.peak_rss_mib, '.1f', 8)}{_f(per_stream, '.0f', 8)}"
            f"{_f(r.sat_eps, ',.0f', 10)}{_f(r.sat_cpu_us, '.2f', 10)}{_f(r.sat_cpu_pct, '.0f', 6)}"
            f"{_f(_per(r.reads_per_ev), '.0f', 6)}{_f(_per(r.writes_per_ev), '.0f', 6)}"
            f"{r.sustained:>10}{_f(r.others_pct, '.0f', 7)}"
            + (f"  {r.note}" if r.note else "")
            + (f"  [{r.error_count} errors]" if r.error_count else "")
        )
    for r in rows:
        print(f"   ladder {r.contender}: " + "; ".join(r.ladder))
        for e in r.errors[:4]:
            print(f"   ! {r.contender}: {e}")
    if direct is not None:
        bound = [r.contender for r in rows if r is not direct and r.sustained >= direct.sustained]
        if bound:
            print(
                f"   rig-bound: {', '.join(bound)} sustained as many streams as direct "
                f"({direct.sustained}): the ceiling there is the load generator's"
            )


_NUMERIC = (
    "ttft_ms", "gap_p50_ms", "gap_p99_ms", "ttfb50_ms", "ttfb50_once_ms", "paced_eps",
    "paced_p99_ms", "paced_max_gap_ms", "idle_rss_mib", "peak_rss_mib", "sat_eps", "sat_cpu_us",
    "sat_cpu_pct", "reads_per_ev", "writes_per_ev", "sustained_eps", "others_pct",
)  # fmt: skip


def median_result(results: list[Result]) -> Result:
    """Each figure's median over the rounds of one contender (NaNs left out)."""
    if len(results) == 1:
        return results[0]
    out = Result(results[0].contender, results[0].mode)
    for name in _NUMERIC:
        vals = [v for r in results if (v := getattr(r, name)) == v]
        if vals:
            setattr(out, name, statistics.median(vals))
    out.sustained = int(statistics.median(r.sustained for r in results))
    out.error_count = sum(r.error_count for r in results)
    out.errors = [e for r in results for e in r.errors]
    out.note = "; ".join(dict.fromkeys(r.note for r in results if r.note))
    out.ladder = [f"round {i + 1}: " + "; ".join(r.ladder) for i, r in enumerate(results)]
    return out


def _per_round(rounds: list[list[Result]], value: Callable[[Result, Result], float]) -> list[float]:
    """``value(sse, bare)`` in each round where both ran, NaNs left out."""
    vals = []
    for rows in rounds:
        by = {r.contender: r for r in rows}
        if SSE in by and REFERENCE in by:
            v = value(by[SSE], by[REFERENCE])
            if v == v:
                vals.append(v)
    return vals


def target_lines(
    mode: str, rounds: list[list[Result]], turns: Sequence[Turns] = ()
) -> list[tuple[str, bool | None]]:
    """The scale and first-byte targets. TTFB@50 and the 500 paced streams' figures from
    the rounds' :class:`Turns` (each value a pair of phases back to back), with the same
    figures from the contenders' own runs beside them for reference (sse-proxy and the bare
    proxy a minute apart); the rest from those runs, each value taken within a round, the
    verdict on the median of the rounds."""
    out: list[tuple[str, bool | None]] = []

    def verdict(
        label: str, vals: list[float], fmt: str, target: str, good: Callable[[float], bool] | None
    ) -> None:
        vals = [v for v in vals if v == v]
        if not vals:
            out.append((f"{mode}: {label} not measured", None))
            return
        med = statistics.median(vals)
        each = f" (rounds {', '.join(format(v, fmt) for v in vals)})" if len(vals) > 1 else ""
        out.append((f"{mode}: {label} {format(med, fmt)}{each}  [{target}]", good and good(med)))

    def line(
        label: str,
        value: Callable[[Result, Result], float],
        fmt: str,
        target: str,
        good: Callable[[float], bool] | None,
        turned: Callable[[Turns], list[float]] | None = None,
    ) -> None:
        took = [t for t in turns if turned is not None and turned(t)]
        failed = [e for t in turns for e in t.errors] + [t.note for t in turns if t.note]
        if turns and not took and failed:
            out.append((f"{mode}: {label} not measured taking turns: {failed[0]}", False))
        if turned is None or not took:
            verdict(label, _per_round(rounds, value), fmt, target, good)
            return
        pairs = [v for t in took for v in turned(t) if v == v]
        med = statistics.median(pairs) if pairs else float("nan")
        each = ", ".join(format(statistics.median(turned(t)), fmt) for t in took)
        ok = None if good is None else (not failed and med == med and good(med))
        why = f"; {len(failed)} errors, first: {failed[0]}" if failed else ""
        out.append(
            (
                f"{mode}: {label} {format(med, fmt)} taking turns ({len(pairs)} pairs; "
                f"rounds {each}){why}  [{target}]",
                ok,
            )
        )
        verdict(
            "  the same, one after the other:", _per_round(rounds, value), fmt, "reference", None
        )

    line(
        "TTFB p50 of 50 streams starting within 20 ms, sse-proxy minus bare, ms:",
        lambda s, b: s.ttfb50_ms - b.ttfb50_ms,
        "+.2f",
        f"target <= +{TARGET_TTFB_ADDED_MS:g} ms",
        lambda v: v <= TARGET_TTFB_ADDED_MS,
        lambda t: t.ttfb_added_ms,
    )
    verdict(
        "  the same, 50 starts at once (two deltas a stream), one after the other:",
        _per_round(rounds, lambda s, b: s.ttfb50_once_ms - b.ttfb50_once_ms),
        "+.2f",
        "reference",
        None,
    )
    line(
        "500 paced streams, delivered events/s, sse-proxy / bare:",
        lambda s, b: s.paced_eps / b.paced_eps,
        ".2f",
        f"target >= {TARGET_DELIVERED}x",
        lambda v: v >= TARGET_DELIVERED,
        lambda t: t.delivered,
    )
    line(
        "500 paced streams, latency p99, sse-proxy / bare:",
        lambda s, b: s.paced_p99_ms / b.paced_p99_ms,
        ".2f",
        f"target <= {TARGET_P99}x",
        lambda v: v <= TARGET_P99,
        lambda t: t.p99,
    )
    unpinned = mode == "unpinned"
    line(
        "saturated CPU per event, sse-proxy / bare:",
        lambda s, b: s.sat_cpu_us / b.sat_cpu_us,
        ".2f",
        f"target <= {TARGET_CPU}x" if unpinned else "reference: the target is unpinned",
        (lambda v: v <= TARGET_CPU) if unpinned else None,
    )
    line(
        "  events per read in that phase, sse-proxy / bare:",
        lambda s, b: b.reads_per_ev / s.reads_per_ev,
        ".2f",
        "above 1: sse-proxy's reads carried more events, it fell further behind",
        None,
    )
    line(
        "peak RSS at 500 streams, sse-proxy minus bare, KiB per stream:",
        lambda s, b: 1024 * (s.peak_rss_mib - b.peak_rss_mib) / PACED_STREAMS,
        "+.0f",
        f"target <= +{TARGET_RSS_KIB_PER_STREAM} KiB",
        lambda v: v <= TARGET_RSS_KIB_PER_STREAM,
    )
    line(
        "streams sustained, sse-proxy minus bare:",
        lambda s, b: float(s.sustained - b.sustained),
        "+.0f",
        "On the Bench; reference",
        None,
    )
    return out


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_load"]:
        return _role_load(argv[1:])
    ap = argparse.ArgumentParser(prog="python -m bench.bench_scale", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="ladder to 512, fewer TTFT streams")
    ap.add_argument("--modes", default="unpinned,pinned")
    ap.add_argument("--contenders", default=",".join(CONTENDERS))
    ap.add_argument("--ladder", default=None, help="concurrency levels, comma-separated")
    ap.add_argument("--ttft-streams", type=int, default=None)
    ap.add_argument("--saturated-events", type=int, default=200_000)
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="rounds of every contender, round-robin; medians, and each ratio taken within "
        "a round (on a shared machine, 3 steadies them)",
    )
    ap.add_argument("--proxy-src", type=Path, default=None, help="as bench_proxy --proxy-src")
    ap.add_argument(
        "--sse-log-level",
        default="info",
        help="sse-proxy's --log-level (info, its default, logs a summary line per stream)",
    )
    args = ap.parse_args(argv)
    args.ladder = (
        [int(x) for x in args.ladder.split(",")]
        if args.ladder
        else list(QUICK_LADDER if args.quick else LADDER)
    )
    if args.ttft_streams is None:
        args.ttft_streams = 4 if args.quick else 8
    rig.PROXY_SRC = args.proxy_src
    rig.SSE_LOG_LEVEL = args.sse_log_level
    modes = [m for m in args.modes.split(",") if m]
    names = [c for c in args.contenders.split(",") if c]
    print(f"bench_scale: {os.cpu_count()} CPUs ({harness.cpu_model()}); {rig.versions()}")
    print(f"sse-proxy under test: {rig.proxy_source()}, --log-level {rig.SSE_LOG_LEVEL}")
    print(f"load average at start: {harness.loadavg()}")
    print(
        f"shape: a role chunk, {SHAPE_EVENTS} deltas {SHAPE_PACE_MS:g} ms apart, finish, [DONE]; "
        f"ladder {args.ladder}; TTFT over {args.ttft_streams} streams; saturated "
        f"{SATURATED_STREAMS} streams x {args.saturated_events // SATURATED_STREAMS} events"
    )
    skipped: dict[str, str] = {}
    for name in names:
        why = (
            rig.nginx_available()
            if name == "nginx"
            else rig.uvloop_note()
            if name.endswith("uvloop")
            else rig.contender_unavailable(name)
        )
        if why:
            skipped[name] = why
    for name, why in skipped.items():
        print(f"   skipped {name}: {why}")
    names = [n for n in names if n not in skipped]
    t0 = time.monotonic()
    lines: list[tuple[str, bool | None]] = []
    with tempfile.TemporaryDirectory(prefix="bench-scale-") as tmp:
        workdir = Path(tmp)
        for mode in modes:
            rounds: list[list[Result]] = []
            turns: list[Turns] = []
            for rnd in range(args.repeat):
                rows = []
                for name in names:
                    # the rig on uvloop where it can: its CPU is the box's, not the contender's
                    loop = "asyncio" if rig.uvloop_note() else "uvloop"
                    upstream = rig.start_upstream(workdir, loop)
                    try:
                        print(f"   {mode}, round {rnd + 1}: {name} ...", flush=True)
                        rows.append(run_contender(name, mode, args, upstream, workdir))
                    finally:
                        upstream.stop()
                rounds.append(rows)
                if SSE in names and REFERENCE in names:
                    print(f"   {mode}, round {rnd + 1}: {REFERENCE} and {SSE} taking turns ...",
                          flush=True)  # fmt: skip
                    turns.append(take_turns(mode, workdir))
            print_table(mode, [median_result(list(rs)) for rs in zip(*rounds, strict=True)])
            lines += target_lines(mode, rounds, turns)
    print(f"\n== targets ({SSE} vs {REFERENCE}, same run, same mode, same round) ==")
    for text, good in lines:
        tag = {True: "PASS", False: "MISSED", None: "n/a"}[good]
        print(f"[{tag:<6}] {text}")
    print(f"\n(total {time.monotonic() - t0:.0f} s; load average at end: {harness.loadavg()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
