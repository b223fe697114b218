"""Hand-run: what the observers cost, beside the bare aiohttp proxy on the same loop.

Not a test. One run, the figures of ``bench_proxy --peers``: 50 streams of the rig's
300-byte OpenAI events, saturated (the upstream as fast as it can write) and paced (one
event per 20 ms). Every contender of a round is started first; then each phase runs
through all of them in turn (the order reversed every other round), so that two
contenders' figures are taken seconds apart, not minutes, on a machine whose load drifts.
After each phase the bench waits until the contender is idle before reading its CPU (one
exporting spans, the SDK's 5 s span cadence first): the recordings its writer thread makes
once the streams end, and the phase's spans posted, are counted in::

    .venv/bin/python -m bench.bench_observers                 # ~12 min: 3 rounds
    .venv/bin/python -m bench.bench_observers --quick --repeat 1
    .venv/bin/python -m bench.bench_observers --proxy-src ../before --configs default,obs

The configurations (rows), all sse-proxy at its defaults plus:

* ``default``  nothing;
* ``obs``      ``--ui --metrics-models M1,M2 --otlp-endpoint URL`` (the inspector, per-model
               metrics, OTLP spans and the GenAI streaming metrics), the endpoint a local
               OTLP/HTTP receiver started by the bench (:func:`bench.rig.start_otlp_sink`);
* ``broken``   that and the flight recorder keeping broken streams (``--record DIR
               --record-on broken``; the rig's streams are clean: nothing is written);
* ``all``      that and recording every stream (``--record DIR``).

Each row prints its paced and saturated CPU per event as ratios to the bare proxy, and the
latency it adds at p50 (paced) over the rig alone (``direct``) and over the bare proxy;
each ratio is taken within a round and the median of the rounds is printed.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from bench import rig
from bench.bench_proxy import PEER_PACE_MS, Plan, Row, _median_of, _paired, median_row
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


def _round(
    names: list[str], order: list[str], plan: Plan, upstream: Service, workdir: Path
) -> list[Row]:
    """One round: every contender started, then each phase through all of them in turn."""
    rows = {name: Row(name) for name in names}
    services: dict[str, Service | None] = {}
    loads: dict[str, LoadGen] = {}
    paced_n = max(10, round(plan.paced_s * 1000 / plan.pace_ms))
    phases = [
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
    try:
        for name in names:
            services[name] = svc = rig.start_contender(name, upstream, workdir)
            loads[name] = LoadGen(svc.url if svc is not None else upstream.url, phases)
            rig.pin(svc.pids if svc is not None else [], "proxy")
            rig.pin([*upstream.pids, loads[name].proc.pid], "load")
        for phase in ("warmup", "fast", "paced"):
            for name in order:
                svc = services[name]
                pids = svc.pids if svc is not None else []
                row = rows[name]
                try:
                    cpu0 = cpu_seconds(pids)
                    res = loads[name].run(phase, plan.timeout_s)
                    # the others not: as long a wait made the bare proxy err next phase
                    _settle(pids, at_least=SPAN_DELAY_S if "obs" in name else 0.0)
                    cpu = cpu_seconds(pids) - cpu0
                except (RuntimeError, TimeoutError, AssertionError, KeyError) as exc:
                    row.note = f"failed: {exc}"
                    row.errors += 1
                    continue
                row.errors += res["error_count"]
                row.error_text += [f"{phase}: {k} (x{v})" for k, v in res["errors"].items()]
                if res["verified"] is False:
                    row.note = "WRONG BYTES"
                if phase == "fast":
                    row.events_per_s = res["events_per_s"]
                    if svc is not None:
                        row.cpu_us_per_event = 1e6 * cpu / max(1, res["frames"])
                elif phase == "paced":
                    row.lat_p50_ms = res["lat_p50_ms"]
                    row.lat_p99_ms = res["lat_p99_ms"]
                    if svc is not None:
                        row.paced_cpu_us_per_event = 1e6 * cpu / max(1, res["frames"])
                        row.peak_rss_mib = peak_rss_mib(pids)
    finally:
        for load in loads.values():
            load.stop()
        for svc in services.values():
            if svc is not None:
                svc.stop()
    return [rows[name] for name in names]


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
    names = ["direct", bare, *(sse + CONFIGS[c][0] for c in configs)]
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
    with tempfile.TemporaryDirectory(prefix="bench-observers-") as tmp:
        workdir = Path(tmp)
        upstream = rig.start_upstream(workdir, args.loop)
        sink = rig.start_otlp_sink(workdir)
        rig.OTLP_URL = sink.url
        rounds: list[list[Row]] = []
        try:
            for i in range(args.repeat):
                print(f"   (round {i + 1} of {args.repeat}; load {loadavg()})", flush=True)
                order = names if i % 2 == 0 else names[::-1]  # drifts hit both ends alike
                rounds.append(_round(names, order, plan, upstream, workdir))
        finally:
            sink.stop()
            upstream.stop()
        rows = {r.contender: r for r in (median_row(list(s)) for s in zip(*rounds, strict=True))}
        recorded = {extra: _recorded(workdir, extra) for extra in ("broken", "all")}
    print(
        f"\n== 50 streams of 300-byte OpenAI events, saturated ({plan.events // 50:,} events "
        f"each) and paced (one per {plan.pace_ms:g} ms, {round(plan.paced_s * 1000 / plan.pace_ms)}"
        f" each), {args.loop}; medians of {args.repeat} round(s), ratios taken within each =="
    )
    b = rows[bare]
    print(
        f"{'configuration':<50}{'paced CPU/event':>17}{'saturated':>11}{'added p50':>11}"
        f"{'vs bare':>10}{'errors':>8}"
    )
    d = rows["direct"]
    print(
        f"{'bare aiohttp (' + args.loop + ')':<50}{b.paced_cpu_us_per_event:>11.1f} µs   "
        f"{b.cpu_us_per_event:>6.1f} µs{b.lat_p50_ms - d.lat_p50_ms:>+9.3f} ms{'':>10}"
        f"{b.errors:>8}"
    )
    verdicts: list[tuple[str, bool | None]] = []
    per_round: dict[str, list[list[float]]] = {}
    for config in configs:
        name = sse + CONFIGS[config][0]
        row = rows[name]

        def ratio(attr: str, name: str = name, config: str = config) -> float:
            each = _paired(rounds, lambda r: getattr(r[name], attr) / getattr(r[bare], attr))
            per_round.setdefault(config, []).append(each)
            return _median_of(each)

        def added(over: str, name: str = name) -> float:
            return _median_of(_paired(rounds, lambda r: r[name].lat_p50_ms - r[over].lat_p50_ms))

        paced, sat = ratio("paced_cpu_us_per_event"), ratio("cpu_us_per_event")
        add_direct, add_bare = added("direct"), added(bare)
        print(
            f"{CONFIGS[config][1]:<50}{paced:>16.2f}x{sat:>10.2f}x{add_direct * 1000:>+8.0f} µs"
            f"{add_bare * 1000:>+7.0f} µs{row.errors:>8}" + (f"  {row.note}" if row.note else "")
        )
        for text in row.error_text:
            print(f"   ! {text}")
        ok: Callable[[float, float], bool | None] = lambda v, t: None if v != v else v <= t  # noqa: E731
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
                    f"{config}: added p50 {add_bare * 1000:+.0f} µs over bare aiohttp "
                    f"({add_direct * 1000:+.0f} µs over direct)  "
                    f"[target <= {TARGET_ADDED_P50_MS * 1000:.0f} µs]",
                    ok(add_bare, TARGET_ADDED_P50_MS),
                )
            )
    if args.repeat > 1:
        print("   each round, paced / saturated:")
        for config, (paced_r, sat_r) in per_round.items():
            pairs = ", ".join(f"{p:.2f}/{s:.2f}" for p, s in zip(paced_r, sat_r, strict=True))
            print(f"   {config:<8} {pairs}")
    for extra in ("broken", "all"):
        if extra in configs:
            print(f"   recordings left by '{extra}': {recorded[extra]}")
    print("\n== targets ==")
    for text, good in verdicts:
        print(f"[{'n/a' if good is None else 'PASS' if good else 'MISSED':<6}] {text}")
    print(f"\n(total {time.monotonic() - started:.0f} s; load average at end: {loadavg()})")
    return 1 if any(r.errors for r in rows.values()) else 0


if __name__ == "__main__":
    raise SystemExit(main())
