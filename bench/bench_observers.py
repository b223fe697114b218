"""Hand-run: what the observers cost, beside the bare aiohttp proxy on the same loop.

Not a test. One run, the figures of ``bench_proxy --peers``: 50 streams of the rig's
300-byte OpenAI events, saturated (the upstream as fast as it can write) and paced (one
event per 20 ms). Each configuration runs at the same moment as a bare aiohttp proxy of
its own, each with its own load generator, phase by phase: whatever the shared machine's
load does during a phase, it does to both, and the ratio of the two is taken there (run
in turns, seconds apart, one round's ratio moved by a tenth or more). After each phase
the bench waits until both are idle before reading their CPU (a configuration exporting
spans, the SDK's 5 s span cadence first): the recordings its writer thread makes once the
streams end, and the phase's spans posted, are counted in::

    .venv/bin/python -m bench.bench_observers                 # ~8 min: 3 rounds
    .venv/bin/python -m bench.bench_observers --quick --repeat 1
    .venv/bin/python -m bench.bench_observers --proxy-src ../before --configs default,obs
    .venv/bin/python -m bench.bench_observers --beside default   # the observers' own price

The configurations (rows), all sse-proxy at its defaults plus:

* ``default``  nothing;
* ``obs``      ``--ui --metrics-models M1,M2 --otlp-endpoint URL`` (the inspector, per-model
               metrics, OTLP spans and the GenAI streaming metrics), the endpoint a local
               OTLP/HTTP receiver started by the bench (:func:`bench.rig.start_otlp_sink`);
* ``broken``   that and the flight recorder keeping broken streams (``--record DIR
               --record-on broken``; the rig's streams are clean: nothing is written);
* ``all``      that and recording every stream (``--record DIR``).

Each row prints its paced and saturated CPU per event as ratios to its bare proxy, the
latency it adds at p50 (paced) over its bare proxy, and its paced ratio over the
default's (the observers' own price); each is taken within a round and the median of the
rounds is printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from bench import rig
from bench.bench_proxy import PEER_PACE_MS, Plan, Row, _median_of, median_row
from bench.harness import Service, cpu_model, cpu_seconds, loadavg, peak_rss_mib
from bench.rig import LoadGen

CONFIGS: dict[str, tuple[str, str]] = {
    "default": ("", "default"),
    "obs": ("+obs", "--ui --metrics-models ... --otlp-endpoint URL"),
    "broken": ("+obs+broken", "that and --record DIR --record-on broken"),
    "all": ("+obs+all", "that and --record DIR (every stream)"),
}
TARGET_PACED: dict[str, float] = {"default": 1.3, "obs": 1.15, "broken": 1.2, "all": 1.5}
"""Paced CPU per event, at most, as a ratio to the bare proxy (the default's: bench_proxy's)."""
# default and obs: p50 latency added beyond what the bare proxy adds in the same run, at most
# (the target is a ratio to bare aiohttp, like the CPU's; over the rig alone the bare proxy
# itself adds about a millisecond here)
TARGET_ADDED_P50_MS = 0.5


SPAN_DELAY_S = 5.25
"""The OTel SDK's span export cadence (OTEL_BSP_SCHEDULE_DELAY, 5 s) and a margin: a
contender exporting spans is read only after its phase's spans have been posted (its idle
seconds counted in too)."""


def _settle(pids: list[int], timeout: float = 15.0, at_least: float = 0.0) -> None:
    """Wait until ``pids`` use no CPU to speak of (a recording being written, a batch of
    spans exported), and ``at_least`` seconds: what a phase caused is in its figure, and
    not in the next one's."""
    if at_least:
        time.sleep(at_least)
    deadline = time.monotonic() + timeout
    last = cpu_seconds(pids)
    while time.monotonic() < deadline:
        time.sleep(0.25)
        now = cpu_seconds(pids)
        if now - last < 0.003:
            return
        last = now


def _phases(plan: Plan) -> list[dict[str, object]]:
    paced_n = max(10, round(plan.paced_s * 1000 / plan.pace_ms))
    return [
        {"name": "warmup", "streams": 20, "n": 200, "timeout_s": 60},
        {
            "name": "fast",
            "streams": 50,
            "n": plan.events // 50,
            "verify": True,
            "timeout_s": plan.timeout_s,
        },
        {
            "name": "paced",
            "streams": 50,
            "n": paced_n,
            "pace_ms": plan.pace_ms,
            "latency": True,
            "timeout_s": plan.timeout_s,
        },
    ]


def _together(
    loads: dict[str, LoadGen], phase: str, timeout_s: float
) -> tuple[dict[str, dict[str, Any]], dict[str, BaseException]]:
    """``phase`` run by every load generator at once; each one's result, or its failure."""
    results: dict[str, dict[str, Any]] = {}
    failed: dict[str, BaseException] = {}

    def run(name: str) -> None:
        try:
            results[name] = loads[name].run(phase, timeout_s)
        except (RuntimeError, TimeoutError, AssertionError, KeyError) as exc:
            failed[name] = exc

    threads = [threading.Thread(target=run, args=(name,)) for name in loads]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return results, failed


def _pair(name: str, bare: str, plan: Plan, upstream: Service, workdir: Path) -> list[Row]:
    """``name`` and a bare aiohttp proxy of its own (or ``bare``, another reference),
    each with its own load generator,
    through every phase at the same moment: whatever the machine's load does, it does to
    both (taking turns, a configuration and the bare proxy ran seconds apart, and one
    round's ratio moved by a tenth or more)."""
    pair = [bare, name]
    rows = {n: Row(n) for n in pair}
    services: dict[str, Service | None] = {}
    loads: dict[str, LoadGen] = {}
    settle_s = SPAN_DELAY_S if "obs" in name else 0.0
    try:
        for n in pair:
            services[n] = svc = rig.start_contender(n, upstream, workdir)
            assert svc is not None
            loads[n] = LoadGen(svc.url, _phases(plan))
            rig.pin(svc.pids, "proxy")
            rig.pin([*upstream.pids, loads[n].proc.pid], "load")
        for phase in ("warmup", "fast", "paced"):
            pids = {n: s.pids for n, s in services.items() if s is not None}
            cpu0 = {n: cpu_seconds(pids[n]) for n in pair}
            results, failed = _together(loads, phase, plan.timeout_s)
            # both read once idle (the observers' spans of the phase posted first)
            _settle([*pids[bare], *pids[name]], at_least=settle_s)
            for n in pair:
                row = rows[n]
                if n in failed:
                    row.note = f"failed: {failed[n]}"
                    row.errors += 1
                    continue
                res = results[n]
                cpu = cpu_seconds(pids[n]) - cpu0[n]
                row.errors += res["error_count"]
                row.error_text += [f"{phase}: {k} (x{v})" for k, v in res["errors"].items()]
                if res["verified"] is False:
                    row.note = "WRONG BYTES"
                if phase == "fast":
                    row.events_per_s = res["events_per_s"]
                    row.cpu_us_per_event = 1e6 * cpu / max(1, res["frames"])
                elif phase == "paced":
                    row.lat_p50_ms = res["lat_p50_ms"]
                    row.lat_p99_ms = res["lat_p99_ms"]
                    row.paced_cpu_us_per_event = 1e6 * cpu / max(1, res["frames"])
                    row.peak_rss_mib = peak_rss_mib(pids[n])
    finally:
        for load in loads.values():
            load.stop()
        for svc in services.values():
            if svc is not None:
                svc.stop()
    return [rows[bare], rows[name]]


def _recorded(workdir: Path, extra: str) -> str:
    """What the recording contenders left on disk: files and MB, over every round."""
    files = [f for d in workdir.glob(f"record-{extra}-*") for f in d.glob("*.ssrec")]
    size = sum(f.stat().st_size for f in files)
    return f"{len(files)} files, {size / 1e6:.1f} MB"


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.bench_observers", description=__doc__)
    ap.add_argument("--quick", action="store_true", help="fewer events (~1.5 min a round)")
    ap.add_argument("--repeat", type=int, default=3, help="rounds (default 3)")
    ap.add_argument("--loop", choices=rig.LOOPS, default="uvloop")
    ap.add_argument(
        "--configs",
        default=",".join(CONFIGS),
        help=f"rows, of {', '.join(CONFIGS)} (default all)",
    )
    ap.add_argument("--proxy-src", type=Path, help="run sse-proxy from this source tree")
    ap.add_argument("--pin", action="store_true", help="the proxy on a CPU of its own")
    ap.add_argument(
        "--beside",
        choices=("bare", "default"),
        default="bare",
        help="what each configuration runs beside: bare aiohttp (the targets' reference), "
        "or sse-proxy's default (the observers' own price)",
    )
    args = ap.parse_args(argv)
    configs = [c for c in args.configs.split(",") if c]
    unknown = set(configs) - set(CONFIGS)
    if unknown or args.repeat < 1:
        ap.error(f"unknown configurations: {', '.join(sorted(unknown))}" if unknown else "--repeat")
    if args.proxy_src is not None:
        rig.PROXY_SRC = args.proxy_src.resolve()
    rig.PIN = args.pin
    note = rig.contender_unavailable(f"sse-{args.loop}")
    if note:
        print(f"cannot run: {note}", file=sys.stderr)
        return 2
    bare, sse = f"bare-{args.loop}", f"sse-{args.loop}"
    if args.beside == "default":  # each configuration beside sse-proxy's default
        bare = sse
        configs = [c for c in configs if c != "default"]
        if not configs:
            ap.error("--beside default needs a configuration other than the default")
    ref_label = "bare aiohttp (" + args.loop + ")" if args.beside == "bare" else "the default"
    plan = Plan(
        levels=(50,),
        events=50_000 if args.quick else 300_000,
        paced_s=2.0 if args.quick else 6.0,
        long_events=0,
        timeout_s=120.0,
        pace_ms=PEER_PACE_MS,
    )
    print(f"bench_observers: {os.cpu_count()} CPUs ({cpu_model()}); {rig.versions()}")
    print(f"sse-proxy under test: {rig.proxy_source()}; loop {args.loop}")
    print(f"load average at start: {loadavg()}")
    started = time.monotonic()
    # each round: configuration -> (its bare proxy's row, its row), measured together
    rounds: list[dict[str, tuple[Row, Row]]] = []
    with tempfile.TemporaryDirectory(prefix="bench-observers-") as tmp:
        workdir = Path(tmp)
        upstream = rig.start_upstream(workdir, args.loop)
        sink = rig.start_otlp_sink(workdir)
        rig.OTLP_URL = sink.url
        try:
            for i in range(args.repeat):
                print(f"   (round {i + 1} of {args.repeat}; load {loadavg()})", flush=True)
                order = configs if i % 2 == 0 else configs[::-1]
                pairs: dict[str, tuple[Row, Row]] = {}
                for config in order:
                    bare_row, row = _pair(sse + CONFIGS[config][0], bare, plan, upstream, workdir)
                    pairs[config] = (bare_row, row)
                rounds.append(pairs)
        finally:
            sink.stop()
            upstream.stop()
        recorded = {extra: _recorded(workdir, extra) for extra in ("broken", "all")}
    print(
        f"\n== 50 streams of 300-byte OpenAI events, saturated ({plan.events // 50:,} events "
        f"each) and paced (one per {plan.pace_ms:g} ms, {round(plan.paced_s * 1000 / plan.pace_ms)}"
        f" each), {args.loop}; each configuration run at the same moment as "
        f"{'a bare aiohttp proxy' if args.beside == 'bare' else 'a default sse-proxy'} of its "
        f"own; medians of {args.repeat} round(s), ratios taken within each =="
    )
    bares = [pair[0] for r in rounds for pair in r.values()]
    b = median_row(bares)
    print(
        f"{'configuration':<50}{'paced CPU/event':>17}{'saturated':>11}{'added p50':>11}"
        f"{'vs default' if args.beside == 'bare' else '':>12}{'errors':>8}"
    )
    print(
        f"{ref_label:<50}{b.paced_cpu_us_per_event:>11.1f} µs   "
        f"{b.cpu_us_per_event:>6.1f} µs{'':>11}{'':>12}{sum(r.errors for r in bares):>8}"
    )

    def each(config: str, value: Callable[[Row, Row], float]) -> list[float]:
        return [v for r in rounds if config in r for v in [value(*r[config])] if v == v]

    def paced_ratio(bare_row: Row, row: Row) -> float:
        return row.paced_cpu_us_per_event / bare_row.paced_cpu_us_per_event

    verdicts: list[tuple[str, bool | None]] = []
    per_round: dict[str, tuple[list[float], list[float]]] = {}
    failed = False
    ok: Callable[[float, float], bool | None] = lambda v, t: None if v != v else v <= t  # noqa: E731
    for config in configs:
        rows = [r[config][1] for r in rounds]
        row = median_row(rows)
        errors = sum(r.errors for r in rows)
        failed = failed or bool(errors)
        paced_r = each(config, paced_ratio)
        sat_r = each(config, lambda b_, r_: r_.cpu_us_per_event / b_.cpu_us_per_event)
        per_round[config] = (paced_r, sat_r)
        paced, sat = _median_of(paced_r), _median_of(sat_r)
        add_bare = _median_of(each(config, lambda b_, r_: r_.lat_p50_ms - b_.lat_p50_ms))
        # over the default: the two ratios to bare of the same round
        over = _median_of(
            [paced_ratio(*r[config]) / paced_ratio(*r["default"]) for r in rounds]
            if "default" in configs and config != "default"
            else []
        )
        over_txt = f"{over:>11.2f}x" if over == over else f"{'':>12}"
        print(
            f"{CONFIGS[config][1]:<50}{paced:>16.2f}x{sat:>10.2f}x{add_bare * 1000:>+8.0f} µs"
            f"{over_txt}{errors:>8}" + (f"  {row.note}" if row.note else "")
        )
        for r in rows:
            for text in r.error_text:
                print(f"   ! {text}")
        verdicts.append(
            (
                f"{config}: paced CPU/event {paced:.2f}x bare (medians "
                f"{row.paced_cpu_us_per_event:.1f} vs {b.paced_cpu_us_per_event:.1f} µs)  "
                f"[target <= {TARGET_PACED[config]}x]",
                ok(paced, TARGET_PACED[config]),
            )
        )
        if config in ("default", "obs"):
            verdicts.append(
                (
                    f"{config}: added p50 {add_bare * 1000:+.0f} µs over bare aiohttp  "
                    f"[target <= {TARGET_ADDED_P50_MS * 1000:.0f} µs]",
                    ok(add_bare, TARGET_ADDED_P50_MS),
                )
            )
    if args.repeat > 1:
        print("   each round, paced / saturated:")
        for config, (paced_r, sat_r) in per_round.items():
            pairs_txt = ", ".join(f"{p:.2f}/{s:.2f}" for p, s in zip(paced_r, sat_r, strict=False))
            print(f"   {config:<8} {pairs_txt}")
    for extra in ("broken", "all"):
        if extra in configs:
            print(f"   recordings left by '{extra}': {recorded[extra]}")
    if args.beside != "bare":
        verdicts = [("the targets are ratios to bare aiohttp: run without --beside", None)]
    print("\n== targets ==")
    for text, good in verdicts:
        print(f"[{'n/a' if good is None else 'PASS' if good else 'MISSED':<6}] {text}")
    print(f"\n(total {time.monotonic() - started:.0f} s; load average at end: {loadavg()})")
    return 1 if failed or any(r.errors for r in bares) else 0


if __name__ == "__main__":
    raise SystemExit(main())
