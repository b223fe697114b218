"""Hand-run benchmark of sse-proxy against other ways of moving an SSE stream over loopback.

Not a test: run it by hand and read the figures (``bench/proxy_README.md`` says how)::

    .venv/bin/python -m bench.bench_proxy [--quick] [--levels 1,50,500] [--events N]
    .venv/bin/python -m bench.bench_proxy --profile 10     # py-spy of sse-proxy at 50 streams
    .venv/bin/python -m bench.bench_proxy --peers [--quick] [--repeat 3]   # the peers (below)

Contenders, measured side by side in one run against the same upstream:

* ``direct``          the load generator talks to the upstream itself (the baseline);
* ``bare-aiohttp``    a pass-through aiohttp proxy with no parsing at all (defined here): the
                      floor for any proxy written on aiohttp;
* ``nginx``           nginx with ``proxy_buffering off`` (one worker), where installed;
* ``sse-passthrough`` ``sse-proxy serve --mode passthrough`` (full validation);
* ``sse-frames``      ``sse-proxy serve --mode frames``;
* ``sse-baseline``    with ``--baseline-src DIR``: passthrough run from another source tree
                      (e.g. ``git archive main``), so a change's cost is measured side by
                      side in one run; the targets section prints the CPU/event ratio.

``--peers`` runs 50 streams, saturated and paced at 20 ms, through ``bare-asyncio``,
``bare-uvloop``, ``sse-asyncio``, ``sse-uvloop`` (passthrough with ``--loop``, where sse-proxy
has the flag), ``mitmproxy`` (reverse mode, a streaming addon) and ``litellm`` (its proxy, an
openai-compatible model_list entry, offline), the last two from bench/.peers-venv/ (made by
bench/setup_peers.sh), and prints the per-event ratios as PASS/MISSED.

Every piece runs in its own process (:mod:`bench.rig`): the upstream (an aiohttp server
writing OpenAI-style ``chat.completion.chunk`` events with multilingual content, one event
per write), each proxy, and the load generator (N concurrent streams). Proxy CPU (every
thread's runtime) and peak RSS around each measured phase come from :mod:`bench.harness`.
Each event carries the upstream's ``time.time_ns()`` at send time; the load generator
subtracts it from the arrival time.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import re
import shutil
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

from bench import rig
from bench.harness import (
    ROOT,
    Service,
    cpu_model,
    cpu_seconds,
    loadavg,
    machine_busy_seconds,
    own_cpu,
    peak_rss_mib,
    rss_mib,
)
from bench.rig import (
    ALL_CONTENDERS,
    CONTENDERS,
    LENIENT,
    LOOPS,
    PEER_CONTENDERS,
    SETUP_PEERS,
    SLOW_DIVISOR,
    TARGET_BASELINE_RATIO,
    LoadGen,
    contender_unavailable,
    package_in,
    peer_versions,
    pin,
    proxy_source,
    sse_proxy_has_loop_flag,
    start_contender,
    start_upstream,
    versions,
)

TARGET_CPU_RATIO = 1.3  # sse-proxy passthrough CPU/event vs the bare aiohttp proxy, at most
TARGET_ADDED_P50_MS = 0.5  # added p50 latency per event at 50 paced streams, at most
TARGET_LEVEL_LATENCY = 50
PACE_MS = 5.0  # gap between events of one paced stream...
PACED_RATE_CAP = 10_000  # ...widened so all paced streams together send at most this many/s
MEMORY_FLAT_MIB = 4.0  # long stream: RSS may grow this much (or 5 %) and still count as flat

# -- one measurement -------------------------------------------------------------------------


@dataclass
class Row:
    contender: str
    events_per_s: float = float("nan")
    cpu_us_per_event: float = float("nan")
    cpu_pct: float = float("nan")
    paced_cpu_us_per_event: float = float("nan")
    lat_p50_ms: float = float("nan")
    lat_p99_ms: float = float("nan")
    peak_rss_mib: float = float("nan")
    upstream_pct: float = float("nan")
    load_pct: float = float("nan")
    others_pct: float = float("nan")
    paced_others_pct: float = float("nan")
    errors: int = 0
    error_text: list[str] = field(default_factory=list)
    note: str = ""
    info: str = ""  # printed after the row, not a problem


@dataclass(frozen=True)
class Plan:
    levels: tuple[int, ...]
    events: int  # total events per level in the throughput phase
    paced_s: float  # length of each paced stream
    long_events: int
    timeout_s: float
    pace_ms: float = PACE_MS  # gap between events of one paced stream (widened, see paced_ms)


def paced_ms(level: int, base: float = PACE_MS) -> float:
    return max(base, level * 1000 / PACED_RATE_CAP)


def fast_events(name: str, level: int, plan: Plan) -> int:
    """Events per stream in the saturated phase (slow peers get fewer, see SLOW_DIVISOR)."""
    n = max(1, plan.events // level)
    div = SLOW_DIVISOR.get(name, 1)
    return n if div == 1 else min(n, max(100, n // div))


def measure(name: str, level: int, plan: Plan, upstream: Service, workdir: Path) -> Row:
    row = Row(name)
    try:
        svc = start_contender(name, upstream, workdir)
    except (RuntimeError, OSError) as exc:
        row.note = f"did not start: {exc}"
        with contextlib.suppress(OSError):
            lines = (workdir / f"{name}.log").read_text(errors="replace").strip().splitlines()
            if lines:
                row.error_text.append("log tail:\n" + "\n".join(lines[-8:]))
        return row
    url = svc.url if svc is not None else upstream.url
    n_fast = fast_events(name, level, plan)
    if n_fast != max(1, plan.events // level):
        row.info = f"saturated: {n_fast} events/stream"
    lenient = name in LENIENT
    pace = paced_ms(level, plan.pace_ms)
    n_paced = max(10, round(plan.paced_s * 1000 / pace))
    phases = [
        {
            "name": "warmup",
            "streams": min(level, 20),
            "n": 200,
            "timeout_s": 60,
            "lenient": lenient,
        },
        {
            "name": "fast",
            "streams": level,
            "n": n_fast,
            "verify": n_fast <= 300_000,
            "timeout_s": plan.timeout_s,
            "lenient": lenient,
        },
        {
            "name": "paced",
            "streams": level,
            "n": n_paced,
            "pace_ms": pace,
            "latency": True,
            "timeout_s": plan.timeout_s,
            "lenient": lenient,
        },
    ]
    load = LoadGen(url, phases)
    pids = svc.pids if svc is not None else []
    pin(pids, "proxy")
    pin([*upstream.pids, load.proc.pid], "load")
    ours = [*pids, *upstream.pids, load.proc.pid]
    try:
        load.run("warmup", 60)
        results: dict[str, tuple[dict[str, Any], float, float, float]] = {}
        for phase in ("fast", "paced"):
            marks: dict[str, float] = {}

            def before(marks: dict[str, float] = marks) -> None:
                marks["proxy"] = cpu_seconds(pids)
                marks["up"] = cpu_seconds(upstream.pids)
                marks["others"] = machine_busy_seconds() - own_cpu(ours)

            res = load.run(phase, plan.timeout_s, before)
            others = machine_busy_seconds() - own_cpu(ours) - marks["others"]
            results[phase] = (
                res,
                cpu_seconds(pids) - marks["proxy"],
                cpu_seconds(upstream.pids) - marks["up"],
                max(0.0, others),
            )
        fast, fast_cpu, fast_up, fast_others = results["fast"]
        paced, paced_cpu, _, paced_others = results["paced"]
        row.events_per_s = fast["events_per_s"]
        row.upstream_pct = 100 * fast_up / fast["wall_s"]
        row.load_pct = 100 * fast["load_cpu_s"] / fast["wall_s"]
        row.others_pct = 100 * fast_others / fast["wall_s"]
        row.paced_others_pct = 100 * paced_others / paced["wall_s"]
        if svc is not None:
            row.cpu_us_per_event = 1e6 * fast_cpu / max(1, fast["frames"])
            row.cpu_pct = 100 * fast_cpu / fast["wall_s"]
            row.paced_cpu_us_per_event = 1e6 * paced_cpu / max(1, paced["frames"])
            row.peak_rss_mib = peak_rss_mib(pids)
        row.lat_p50_ms = paced["lat_p50_ms"]
        row.lat_p99_ms = paced["lat_p99_ms"]
        for res in (fast, paced):
            row.errors += res["error_count"]
            row.error_text += [f"{res['name']}: {k} (x{v})" for k, v in res["errors"].items()]
            if res["verified"] is False:
                row.note = "WRONG BYTES"
    except (RuntimeError, TimeoutError, AssertionError, KeyError) as exc:
        row.note = f"failed: {exc}"
        row.errors += 1
    finally:
        load.stop()
        if svc is not None:
            if svc.proc.poll() is not None:
                row.note = (row.note + f"; exited with {svc.proc.returncode}").lstrip("; ")
            svc.stop()
            if row.errors or row.note:
                tail = svc.log_tail()
                if tail:
                    row.error_text.append(f"{name} log tail:\n{tail}")
    return row


def median_row(rows: list[Row]) -> Row:
    """Each numeric column's median over repeated rounds of one contender (NaNs left out)."""
    if len(rows) == 1:
        return rows[0]
    out = Row(rows[0].contender)
    for name in (
        "events_per_s",
        "cpu_us_per_event",
        "cpu_pct",
        "paced_cpu_us_per_event",
        "lat_p50_ms",
        "lat_p99_ms",
        "peak_rss_mib",
        "upstream_pct",
        "load_pct",
        "others_pct",
        "paced_others_pct",
    ):
        vals = [v for r in rows if (v := getattr(r, name)) == v]
        if vals:
            setattr(out, name, statistics.median(vals))
    out.errors = sum(r.errors for r in rows)
    out.error_text = [t for r in rows for t in r.error_text]
    out.note = "; ".join(dict.fromkeys(r.note for r in rows if r.note))
    out.info = "; ".join(
        dict.fromkeys([r.info for r in rows if r.info] + [f"median of {len(rows)}"])
    )
    return out


# -- report ----------------------------------------------------------------------------------


def _f(value: float, fmt: str, width: int) -> str:
    return ("-" if value != value else format(value, fmt)).rjust(width)  # NaN -> "-"


HEADER = (
    f"{'contender':<16}{'events/s':>10}{'CPU µs/ev':>11}{'CPU %':>7}{'paced µs/ev':>13}"
    f"{'lat p50':>10}{'lat p99':>10}{'added p50':>11}{'added p99':>11}{'peak RSS':>10}"
    f"{'up %':>6}{'load %':>7}{'other %':>8}{'errors':>7}"
)


def print_table(level: int, plan: Plan, rows: list[Row]) -> None:
    n_fast = max(1, plan.events // level)
    pace = paced_ms(level, plan.pace_ms)
    print(
        f"\n== {level} concurrent stream{'s' if level > 1 else ''}: throughput "
        f"{level} x {n_fast} events; latency {level} paced streams, one event per "
        f"{pace:g} ms, {max(10, round(plan.paced_s * 1000 / pace))} events each =="
    )
    print(HEADER)
    base = next((r for r in rows if r.contender == "direct"), None)
    for r in rows:
        add50 = add99 = float("nan")
        if base is not None and r is not base:
            add50 = r.lat_p50_ms - base.lat_p50_ms
            add99 = r.lat_p99_ms - base.lat_p99_ms
        print(
            f"{r.contender:<16}{_f(r.events_per_s, ',.0f', 10)}"
            f"{_f(r.cpu_us_per_event, '.1f', 11)}{_f(r.cpu_pct, '.0f', 7)}"
            f"{_f(r.paced_cpu_us_per_event, '.1f', 13)}"
            f"{_f(r.lat_p50_ms, '.3f', 10)}{_f(r.lat_p99_ms, '.3f', 10)}"
            f"{_f(add50, '+.3f', 11)}{_f(add99, '+.3f', 11)}"
            f"{_f(r.peak_rss_mib, '.1f', 10)}"
            f"{_f(r.upstream_pct, '.0f', 6)}{_f(r.load_pct, '.0f', 7)}"
            f"{_f(r.others_pct, '.0f', 5)}/{_f(r.paced_others_pct, '.0f', 2)}{r.errors:>7}"
            + (f"  {r.note}" if r.note else "")
            + (f"  ({r.info})" if r.info else "")
        )
    for r in rows:
        for text in r.error_text:
            print(f"   ! {r.contender}: {text}")


def ratio_lines(levels_rows: dict[int, list[Row]]) -> list[tuple[str, bool | None]]:
    out: list[tuple[str, bool | None]] = []
    for level, rows in levels_rows.items():
        by = {r.contender: r for r in rows}
        sse, bare = by.get("sse-passthrough"), by.get("bare-aiohttp")
        if sse is None or bare is None:
            continue
        fast = sse.cpu_us_per_event / bare.cpu_us_per_event
        paced = sse.paced_cpu_us_per_event / bare.paced_cpu_us_per_event
        frames = by.get("sse-frames")
        extra = ""
        if frames is not None:
            extra = f"; frames mode {frames.cpu_us_per_event / bare.cpu_us_per_event:.2f}x"
        measured = fast == fast and paced == paced  # NaN when a contender failed
        ok = max(fast, paced) <= TARGET_CPU_RATIO if measured else None  # both must meet it
        out.append(
            (
                f"{level:>4} streams: sse-proxy passthrough CPU/event = {fast:.2f}x bare aiohttp "
                f"(throughput), {paced:.2f}x (paced){extra}  [target <= {TARGET_CPU_RATIO}x]",
                ok,
            )
        )
        baseline = by.get("sse-baseline")
        if baseline is not None:
            fast_b = sse.cpu_us_per_event / baseline.cpu_us_per_event
            paced_b = sse.paced_cpu_us_per_event / baseline.paced_cpu_us_per_event
            out.append(
                (
                    f"{level:>4} streams: sse-proxy passthrough CPU/event = {fast_b:.3f}x the "
                    f"baseline ({rig.BASELINE_SRC}) (throughput), {paced_b:.3f}x (paced)  "
                    f"[target paced <= {TARGET_BASELINE_RATIO}x]",
                    paced_b <= TARGET_BASELINE_RATIO if paced_b == paced_b else None,
                )
            )
    lat_rows = levels_rows.get(TARGET_LEVEL_LATENCY)
    if lat_rows:
        by = {r.contender: r for r in lat_rows}
        sse, base = by.get("sse-passthrough"), by.get("direct")
        if sse is not None and base is not None:
            added = sse.lat_p50_ms - base.lat_p50_ms
            bare = by.get("bare-aiohttp")
            bare_txt = (
                f"; bare aiohttp adds {bare.lat_p50_ms - base.lat_p50_ms:+.3f} ms"
                if bare is not None
                else ""
            )
            out.append(
                (
                    f"  50 paced streams: sse-proxy passthrough adds {added:+.3f} ms p50 per event "
                    f"over direct (raw send->arrival p50 {sse.lat_p50_ms:.3f} ms){bare_txt}  "
                    f"[target <= {TARGET_ADDED_P50_MS} ms]",
                    added <= TARGET_ADDED_P50_MS if added == added else None,
                )
            )
    return out


# the per-event targets of the --peers run (sse-proxy passthrough vs bare aiohttp, same loop)
TARGET_PACED_CPU = 1.3  # CPU/event, paced, at most
TARGET_SATURATED_CPU = 1.6  # CPU/event, saturated, at most
TARGET_THROUGHPUT = 0.6  # saturated events/s, at least
PEER_PACE_MS = 20.0


def _ok(value: float, good: Callable[[float], bool]) -> bool | None:
    return good(value) if value == value else None  # NaN (a row failed) -> n/a


def _usable(rows: list[Row]) -> dict[str, Row]:
    return {r.contender: r for r in rows if not r.note.startswith(("did not start", "failed"))}


def _paired(rounds: list[list[Row]], value: Callable[[dict[str, Row]], float]) -> list[float]:
    """``value`` computed within each round: two contenders measured minutes apart on a
    shared machine drift apart; two measured back to back mostly drift together."""
    out = []
    for rows in rounds:
        try:
            v = value(_usable(rows))
        except KeyError:
            continue
        if v == v:
            out.append(v)
    return out


def _median_of(vals: list[float]) -> float:
    return statistics.median(vals) if vals else float("nan")


def _rounds_txt(vals: list[float], fmt: str) -> str:
    return "" if len(vals) < 2 else " per round " + ", ".join(format(v, fmt) for v in vals) + ";"


def peer_ratio_lines(
    rows: list[Row], rounds: list[list[Row]] | None = None
) -> list[tuple[str, bool | None]]:
    """The per-event ratios against bare aiohttp, all from this one run (50 streams).

    With several rounds, each ratio (and the added latency) is taken within each round,
    bare and sse-proxy back to back, and the verdict is the median of those.
    """
    rounds = rounds or [rows]
    by = _usable(rows)
    out: list[tuple[str, bool | None]] = []
    direct = by.get("direct")
    for loop in LOOPS:
        sse_name, bare_name = f"sse-{loop}", f"bare-{loop}"
        sse, bare = by.get(sse_name), by.get(bare_name)
        if sse is None or bare is None:
            continue
        who = f"{sse_name} / {bare_name}"

        def ratio(attr: str, s: str = sse_name, b: str = bare_name) -> list[float]:
            return _paired(rounds, lambda r: getattr(r[s], attr) / getattr(r[b], attr))

        paced_r = ratio("paced_cpu_us_per_event")
        sat_r = ratio("cpu_us_per_event")
        thr_r = ratio("events_per_s")
        paced, sat, thr = _median_of(paced_r), _median_of(sat_r), _median_of(thr_r)
        out.append(
            (
                f"{who}: CPU/event paced {paced:.2f}x ({_rounds_txt(paced_r, '.2f')} medians "
                f"{sse.paced_cpu_us_per_event:.1f} vs {bare.paced_cpu_us_per_event:.1f} µs)  "
                f"[target <= {TARGET_PACED_CPU}x]",
                _ok(paced, lambda v: v <= TARGET_PACED_CPU),
            )
        )
        out.append(
            (
                f"{who}: CPU/event saturated {sat:.2f}x ({_rounds_txt(sat_r, '.2f')} medians "
                f"{sse.cpu_us_per_event:.1f} vs {bare.cpu_us_per_event:.1f} µs)  "
                f"[target <= {TARGET_SATURATED_CPU}x]",
                _ok(sat, lambda v: v <= TARGET_SATURATED_CPU),
            )
        )
        out.append(
            (
                f"{who}: saturated throughput {thr:.2f}x ({_rounds_txt(thr_r, '.2f')} medians "
                f"{sse.events_per_s:,.0f} vs {bare.events_per_s:,.0f} events/s)  "
                f"[target >= {TARGET_THROUGHPUT}x]",
                _ok(thr, lambda v: v >= TARGET_THROUGHPUT),
            )
        )
    if direct is not None:
        for loop in LOOPS:
            sse_name, bare_name = f"sse-{loop}", f"bare-{loop}"
            sse = by.get(sse_name)
            if sse is None:
                continue

            def added_in(name: str, attr: str = "lat_p50_ms") -> list[float]:
                return _paired(
                    rounds, lambda r: getattr(r[name], attr) - getattr(r["direct"], attr)
                )

            added_r = added_in(sse_name)
            added = _median_of(added_r)
            p99 = _median_of(added_in(sse_name, "lat_p99_ms"))
            bare_txt = (
                f"; {bare_name} adds {_median_of(added_in(bare_name)):+.3f} ms"
                if bare_name in by
                else ""
            )
            out.append(
                (
                    f"{sse_name}: added latency p50 {added:+.3f} ms at 50 paced streams "
                    f"({_rounds_txt(added_r, '+.3f')} p99 {p99:+.3f} ms){bare_txt}  "
                    f"[target <= {TARGET_ADDED_P50_MS} ms]",
                    _ok(added, lambda v: v <= TARGET_ADDED_P50_MS),
                )
            )
    for peer in ("mitmproxy", "litellm"):
        other = by.get(peer)
        if other is None:
            continue
        for loop in LOOPS:
            sse = by.get(f"sse-{loop}")
            if sse is None:
                continue
            sat = sse.cpu_us_per_event / other.cpu_us_per_event
            paced = sse.paced_cpu_us_per_event / other.paced_cpu_us_per_event
            parts = [
                f"CPU/event saturated {sat:.3g}x (1/{1 / sat:.3g})",
                f"paced {paced:.3g}x (1/{1 / paced:.3g})",
                f"throughput {sse.events_per_s / other.events_per_s:.3g}x",
            ]
            if direct is not None:
                parts.append(
                    f"added p50 {sse.lat_p50_ms - direct.lat_p50_ms:+.3f} vs "
                    f"{other.lat_p50_ms - direct.lat_p50_ms:+.3f} ms"
                )
            out.append((f"sse-{loop} / {peer}: " + ", ".join(parts) + "  [comparison]", None))
    return out


# -- the long stream -------------------------------------------------------------------------


def long_stream(name: str, plan: Plan, upstream: Service, workdir: Path) -> tuple[str, bool | None]:
    print(
        f"\n== memory over one long stream: {plan.long_events:,} events through "
        f"{name}, RSS sampled every second =="
    )
    try:
        svc = start_contender(name, upstream, workdir)
    except (RuntimeError, OSError) as exc:
        print(f"   {name} did not start: {exc}")
        return f"long stream, {name}: not run", None
    assert svc is not None
    phases = [
        {"name": "warmup", "streams": 1, "n": 1000, "timeout_s": 60},
        {"name": "long", "streams": 1, "n": plan.long_events, "timeout_s": plan.timeout_s},
    ]
    load = LoadGen(svc.url, phases)
    samples: list[float] = []
    idle = float("nan")
    try:
        load.run("warmup", 60)

        def before() -> None:
            nonlocal idle
            idle = rss_mib(svc.pids)

        res = load.run(
            "long", plan.timeout_s, before, tick=lambda: samples.append(rss_mib(svc.pids))
        )
        samples.append(rss_mib(svc.pids))  # at the end of the stream
    except (RuntimeError, TimeoutError, AssertionError) as exc:
        print(f"   failed: {exc}")
        res = None
    finally:
        load.stop()
        peak = peak_rss_mib(svc.pids)
        svc.stop()
    if res is None or len(samples) < 2:
        return f"long stream, {name}: too short to sample (raise --long-events)", None
    print(
        f"   {res['frames']:,} events in {res['wall_s']:.1f} s ({res['events_per_s']:,.0f}/s), "
        f"errors: {res['error_count']}"
    )
    print(
        f"   RSS MiB before the stream: {idle:.1f}; samples: "
        + " ".join(f"{s:.1f}" for s in samples)
    )
    first, last, top = samples[0], samples[-1], max(samples)
    growth = top - first
    flat = growth <= max(MEMORY_FLAT_MIB, 0.05 * first) and res["error_count"] == 0
    for k, v in res["errors"].items():
        print(f"   ! {k} (x{v})")
    if peak > top + 1:
        print(f"   note: VmHWM {peak:.1f} MiB > the sampled max: a peak fell between samples")
    print(
        f"   first {first:.1f}  last {last:.1f}  max {top:.1f}  (max - first {growth:+.1f} MiB; "
        f"VmHWM {peak:.1f})"
    )
    return (
        f"long stream, {name}: RSS first {first:.1f} / last {last:.1f} / max {top:.1f} MiB over "
        f"{res['wall_s']:.0f} s  [target: flat, max - first <= {MEMORY_FLAT_MIB:g} MiB or 5 %]",
        flat,
    )


# -- profile ---------------------------------------------------------------------------------


_LAYERS = (
    ("sse_proxy/core/", "sse-proxy core: framing, UTF-8, dialect JSON (incl. orjson)"),
    ("sse_proxy/rechunk/", "sse-proxy rechunk planner"),
    ("sse_proxy/", "sse-proxy server, logging, metrics"),
    ("aiohttp/", "aiohttp (HTTP parsing, streams, writer)"),
    ("asyncio/", "asyncio event loop + socket syscalls"),
    ("selectors", "asyncio event loop + socket syscalls"),
)


def _layer(where: str) -> str:
    for prefix, label in _LAYERS:
        if where.startswith(prefix) or f"/{prefix}" in where:
            return label
    return f"other ({where.rsplit('/', 1)[-1] or '?'})"


def _summarize_raw(path: Path, top: int = 25) -> None:
    """Own and inclusive time per function from py-spy's raw (collapsed) output.

    Without --native, time in C code (orjson, socket send/recv) is charged to the Python
    function that called it.
    """
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    layers: Counter[str] = Counter()
    total = 0
    roots = [str(r) + "/" for r in (rig.PROXY_SRC, ROOT) if r is not None]
    frame_re = re.compile(r"^(.*) \((.*?)(?::\d+)?\)$")
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_txt = line.rpartition(" ")
        if not stack or not count_txt.isdigit():
            continue
        count = int(count_txt)
        total += count
        names = []
        for frame in stack.split(";"):
            m = frame_re.match(frame)
            fn, where = (m.group(1), m.group(2)) if m else (frame, "")
            where = where.split("site-packages/")[-1]
            for root in roots:
                where = where.replace(root, "")
            names.append(f"{fn} ({where})")
        own[names[-1]] += count
        layers[_layer(names[-1].rpartition(" (")[2].removesuffix(")"))] += count
        for name in set(names):
            incl[name] += count
    if not total:
        print("   py-spy recorded no samples")
        return
    print(f"\n   {total} samples (busy only). Own time by layer:")
    for name, c in layers.most_common():
        print(f"   {100 * c / total:5.1f}%  {name}")
    print("\n   Top functions by own time:")
    for name, c in own.most_common(top):
        print(f"   {100 * c / total:5.1f}%  {name}")
    print("\n   Top functions by inclusive time:")
    for name, c in incl.most_common(top):
        print(f"   {100 * c / total:5.1f}%  {name}")


def profile(seconds: float, mode: str, workdir: Path, keep: Path | None, paced: bool) -> int:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        print("py-spy is not installed: .venv/bin/pip install py-spy")
        return 2
    upstream = start_upstream(workdir)
    svc = None
    load = None
    try:
        svc = start_contender(
            "bare-aiohttp" if mode == "bare" else f"sse-{mode}", upstream, workdir
        )
        assert svc is not None
        phases = [
            {"name": "warmup", "streams": 20, "n": 200, "timeout_s": 60},
            {"name": "load", "streams": 50, "n": 2000, "until_s": seconds + 4, "timeout_s": 300}
            if not paced
            else {
                "name": "load",
                "streams": 50,
                "n": round((seconds + 4) * 1000 / PACE_MS),
                "pace_ms": PACE_MS,
                "latency": True,
                "timeout_s": 300,
            },
        ]
        load = LoadGen(svc.url, phases)
        load.run("warmup", 60)
        out = keep or workdir / "py-spy.txt"
        spy_proc: list[subprocess.Popen[bytes]] = []

        def start_spy() -> None:
            argv = [spy, "record", "-o", str(out), "--format", "raw", "-d", str(int(seconds))]
            spy_proc.append(
                subprocess.Popen(
                    [*argv, "-p", str(svc.proc.pid)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )

        res = load.run("load", 300, start_spy)
        spy_proc[0].wait(timeout=seconds + 30)
        print(
            f"{svc.name} under 50 {'paced ' if paced else ''}streams: "
            f"{res['events_per_s']:,.0f} events/s, "
            + (f"lat p50 {res['lat_p50_ms']:.3f} ms, " if paced else "")
            + f"errors {res['error_count']}"
            + (f"; py-spy raw output: {out}" if keep else "")
        )
        _summarize_raw(out)
    finally:
        if load is not None:
            load.stop()
        if svc is not None:
            svc.stop()
        upstream.stop()
    return 0


# -- main ------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)

    ap = argparse.ArgumentParser(
        prog="python -m bench.bench_proxy",
        description="sse-proxy vs direct, a bare aiohttp proxy and nginx, over loopback.",
    )
    ap.add_argument(
        "--quick", action="store_true", help="fewer events: under a minute (--peers: ~2 min)"
    )
    ap.add_argument(
        "--peers",
        action="store_true",
        help="the peers run: 50 streams, saturated and paced (20 ms), bare aiohttp and sse-proxy "
        "passthrough on asyncio and on uvloop, mitmproxy and LiteLLM where installed, and the "
        "per-event ratios (--quick: ~2 min)",
    )
    ap.add_argument(
        "--setup-peers",
        action="store_true",
        help="install mitmproxy and LiteLLM into bench/.peers-venv/ (bench/setup_peers.sh), exit",
    )
    ap.add_argument(
        "--pace-ms", type=float, default=None, help="gap between paced events, ms (default 5)"
    )
    ap.add_argument("--levels", default=None, help="concurrent streams, comma-separated")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="measure every contender this many times, round-robin, and print each column's "
        "median (on a shared machine, 3 steadies the ratios)",
    )
    ap.add_argument("--events", type=int, default=None, help="events per level (throughput)")
    ap.add_argument("--paced-s", type=float, default=None, help="length of each paced stream, s")
    ap.add_argument(
        "--long-events", type=int, default=None, help="events in the long stream (0: skip it)"
    )
    ap.add_argument(
        "--contenders",
        default=None,
        help=f"which to run, of: {', '.join(ALL_CONTENDERS)} (default: the first five, and "
        "sse-baseline with --baseline-src; --peers: " + ", ".join(PEER_CONTENDERS) + ")",
    )
    ap.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        help="also run passthrough from this source tree (e.g. `git archive main`) and print "
        "the CPU/event ratio against it",
    )
    ap.add_argument(
        "--profile",
        type=float,
        metavar="SECONDS",
        default=None,
        help="instead: py-spy record one sse-proxy under 50 streams and print top functions",
    )
    ap.add_argument(
        "--profile-mode", default="passthrough", choices=("passthrough", "frames", "bare")
    )
    ap.add_argument(
        "--pin",
        action="store_true",
        help="the proxy under test on the last CPU, the upstream and the load generator on "
        "the others (sched_setaffinity), so the added latency is the proxy's own; needs 2+ CPUs",
    )
    ap.add_argument(
        "--nice",
        type=int,
        default=None,
        help="run the bench and everything it starts at this nice value (negative needs root): "
        "on a shared machine, -5 keeps others' jobs from skewing the figures",
    )
    ap.add_argument(
        "--profile-paced", action="store_true", help="profile under 50 paced streams instead"
    )
    ap.add_argument("--profile-out", type=Path, default=None, help="keep py-spy's raw output")
    ap.add_argument(
        "--proxy-src",
        type=Path,
        default=None,
        help="run sse-proxy from this source tree (e.g. a `git archive` snapshot)",
    )
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat: at least 1")
    if args.setup_peers:
        return subprocess.run(["bash", str(SETUP_PEERS)], check=False).returncode
    if args.pin:
        if len(os.sched_getaffinity(0)) < 2:
            ap.error("--pin: needs at least 2 CPUs")
        rig.PIN = True
    if args.nice is not None:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, args.nice)  # inherited by every child
        except OSError as exc:
            ap.error(f"--nice {args.nice}: {exc.strerror}")
    if args.baseline_src is not None:
        rig.BASELINE_SRC = args.baseline_src.resolve()
        if package_in(rig.BASELINE_SRC) is None:
            ap.error(f"--baseline-src: no sse_proxy/ (or proxy/) package under {rig.BASELINE_SRC}")
    if args.contenders is None and not args.peers:
        args.contenders = ",".join(
            c for c in CONTENDERS if c != "sse-baseline" or rig.BASELINE_SRC is not None
        )
    if args.proxy_src is not None:
        rig.PROXY_SRC = args.proxy_src.resolve()
        if package_in(rig.PROXY_SRC) is None:
            ap.error(f"--proxy-src: no sse_proxy/ (or proxy/) package under {rig.PROXY_SRC}")

    with tempfile.TemporaryDirectory(prefix="bench-proxy-") as tmp:
        workdir = Path(tmp)
        if args.profile is not None:
            return profile(
                args.profile, args.profile_mode, workdir, args.profile_out, args.profile_paced
            )
        try:
            levels = tuple(
                int(x) for x in (args.levels or ("50" if args.peers else "1,50,500")).split(",")
            )
        except ValueError:
            ap.error(f"--levels: comma-separated integers, not {args.levels!r}")
        if args.peers:
            long_default = 0
            paced_default = 2.0 if args.quick else 6.0
        else:
            long_default = 300_000 if args.quick else 2_000_000
            paced_default = 0.8 if args.quick else 3.0
        plan = Plan(
            levels=levels,
            events=args.events if args.events else (50_000 if args.quick else 300_000),
            paced_s=args.paced_s or paced_default,
            long_events=args.long_events if args.long_events is not None else long_default,
            timeout_s=120.0,
            pace_ms=args.pace_ms or (PEER_PACE_MS if args.peers else PACE_MS),
        )
        default = PEER_CONTENDERS if args.peers else CONTENDERS
        names = [c for c in (args.contenders or ",".join(default)).split(",") if c]
        unknown = set(names) - set(ALL_CONTENDERS)
        if unknown:
            ap.error(f"unknown contenders: {', '.join(sorted(unknown))}")
        skipped = {n: note for n in names if (note := contender_unavailable(n))}
        names = [n for n in names if n not in skipped]
        print(f"bench_proxy: {os.cpu_count()} CPUs ({cpu_model()}); {versions()}")
        print(f"sse-proxy under test: {proxy_source()}")
        nice = os.getpriority(os.PRIO_PROCESS, 0)
        print(f"load average at start: {loadavg()}; bench processes at nice {nice}")
        print(
            "columns: events/s = throughput through the contender (upstream writes as fast as "
            "it can, one event per write); CPU µs/ev and CPU % = the proxy process's "
            "utime+stime during that phase; paced µs/ev = the same with the paced upstream; "
            "lat p50/p99 = send->arrival ms per event with the paced upstream; added = minus "
            "direct's; peak RSS = VmHWM MiB; up % / load % = upstream and load generator CPU "
            "during the throughput phase (near 100 = that process was the bottleneck); "
            "other % = CPU used by everything else on the machine during the throughput/paced "
            "phases (should be ~0; if not, the run shared the CPUs)"
        )
        for n, note in skipped.items():
            print(f"{n} skipped: {note}")
        if (
            not args.peers
            and {"bare-aiohttp", "sse-passthrough"} <= set(names)
            and sse_proxy_has_loop_flag()
        ):
            print(
                "note: bare-aiohttp runs on asyncio, sse-passthrough on sse-proxy's default loop "
                "(--loop auto: uvloop where installed); --peers compares them loop by loop"
            )
        if args.peers:
            print(peer_versions(names))
        started = time.monotonic()
        upstream = start_upstream(workdir)
        verdicts: list[tuple[str, bool | None]] = []
        try:
            all_rows: dict[int, list[Row]] = {}
            all_rounds: dict[int, list[list[Row]]] = {}
            for level in levels:
                rounds: list[list[Row]] = []
                for i in range(args.repeat):  # round-robin, so slow drifts in load hit all
                    if args.repeat > 1:
                        print(f"   (level {level}: round {i + 1} of {args.repeat})", flush=True)
                    rounds.append([measure(name, level, plan, upstream, workdir) for name in names])
                rows = [median_row(list(same)) for same in zip(*rounds, strict=True)]
                all_rows[level] = rows
                all_rounds[level] = rounds
                print_table(level, plan, rows)
                sys.stdout.flush()
            verdicts += ratio_lines(all_rows)
            if args.peers:
                for level, rows in all_rows.items():
                    verdicts += peer_ratio_lines(rows, all_rounds[level])
            if "sse-passthrough" in names and plan.long_events > 0:
                if "bare-aiohttp" in names:  # the reference: what aiohttp itself holds
                    text, _ = long_stream("bare-aiohttp", plan, upstream, workdir)
                    verdicts.append((text.replace("  [target", "  [reference; target"), None))
                verdicts.append(long_stream("sse-passthrough", plan, upstream, workdir))
        finally:
            upstream.stop()
        print("\n== targets ==")
        for text, ok in verdicts:
            mark = "n/a" if ok is None else ("PASS" if ok else "MISSED")
            print(f"[{mark:<6}] {text}")
        print(f"\n(total {time.monotonic() - started:.0f} s; load average at end: {loadavg()})")
        errors = any(r.errors for rows in all_rows.values() for r in rows)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
