"""Paced CPU per event of sse-proxy and the bare aiohttp proxy, measured at the same time.

``bench_proxy --peers`` measures its contenders one after another. On a shared machine the
paced figure (one small event per read, the CPU mostly idle between events) swings by a
third between two runs of the same program a few seconds apart, which is more than the
difference being measured. Here both proxies run side by side, each in front of the same
upstream with its own load generator, and their paced phases run in the same seconds: what
the machine does to one it does to the other, and the ratio of the two is steady where
their absolute values are not. Each round starts fresh processes; the median ratio over
the rounds is the result.

    .venv/bin/python -m bench.investigations.paced_pair     # 5 rounds of 50 streams x 300 events
    .venv/bin/python -m bench.investigations.paced_pair --rounds 9 \
        --contenders bare-uvloop,sse-uvloop
    .venv/bin/python -m bench.investigations.paced_pair \
        --contenders sse-baseline,sse-uvloop --baseline-src /tmp/b

Running both at once adds a little contention (each proxy uses about 15 % of a CPU here),
the same for both. It is a hand-run benchmark, not a test.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from bench import rig
from bench.bench_proxy import PEER_PACE_MS, TARGET_PACED_CPU
from bench.harness import Service, cpu_model, cpu_seconds, loadavg
from bench.rig import API_PATH, LoadGen, frames_per_stream, start_contender, start_upstream

__all__ = ["main"]


def _round(
    names: list[str], streams: int, events: int, workdir: Path
) -> dict[str, dict[str, float]]:
    upstream = start_upstream(workdir)
    services: dict[str, Service] = {}
    loads: dict[str, LoadGen] = {}
    try:
        for name in names:
            svc = start_contender(name, upstream, workdir)
            assert svc is not None
            services[name] = svc
            loads[name] = LoadGen(
                svc.url,
                [
                    {"name": "warmup", "streams": 20, "n": 200, "timeout_s": 60},
                    {
                        "name": "paced",
                        "streams": streams,
                        "n": events,
                        "pace_ms": PEER_PACE_MS,
                        "latency": True,
                        "timeout_s": 120,
                    },
                ],
            )
        for load in loads.values():
            load.run("warmup", 60)
        marks: dict[str, float] = {}
        results: dict[str, dict[str, Any]] = {}
        errors: list[BaseException] = []
        start = threading.Barrier(len(names))

        def paced(name: str) -> None:
            def before() -> None:
                start.wait()  # both generators get "go" in the same moment
                marks[name] = cpu_seconds(services[name].pids)

            try:
                results[name] = loads[name].run("paced", 120, before)
            except BaseException as exc:  # reported below, with the round
                errors.append(exc)

        threads = [threading.Thread(target=paced, args=(n,)) for n in names]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        if errors:
            raise errors[0]
        out: dict[str, dict[str, float]] = {}
        for name in names:
            res = results[name]
            cpu = cpu_seconds(services[name].pids) - marks[name]
            if res["error_count"] or res["frames"] != streams * frames_per_stream(events):
                raise RuntimeError(f"{name}: {res['error_count']} errors, {res['frames']} frames")
            out[name] = {
                "cpu_us": 1e6 * cpu / res["frames"],
                "p50_ms": res["lat_p50_ms"],
            }
        return out
    finally:
        for load in loads.values():
            load.stop()
        for svc in services.values():
            svc.stop()
        upstream.stop()


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.investigations.paced_pair", description=__doc__.split("\n")[0]
    )
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument(
        "--proxy-src", type=Path, help="run sse-proxy from this source tree (a `git archive`)"
    )
    ap.add_argument(
        "--baseline-src",
        type=Path,
        help="the tree the sse-baseline contender runs: with --contenders "
        "sse-baseline,sse-uvloop, a before/after of a change, side by side",
    )
    ap.add_argument("--streams", type=int, default=50)
    ap.add_argument("--events", type=int, default=300, help="per stream, one per 20 ms")
    ap.add_argument(
        "--contenders",
        default="bare-uvloop,sse-uvloop",
        help="the reference first, then the one compared with it (bench_proxy's names)",
    )
    args = ap.parse_args(argv)
    for given in (args.proxy_src, args.baseline_src):
        if given is not None and rig.package_in(given) is None:
            ap.error(f"{given}: no sse_proxy/ (or proxy/) package there")
    rig.PROXY_SRC = args.proxy_src.resolve() if args.proxy_src else None
    rig.BASELINE_SRC = args.baseline_src.resolve() if args.baseline_src else None
    if "sse-baseline" in args.contenders and rig.BASELINE_SRC is None:
        ap.error("sse-baseline needs --baseline-src DIR")
    names = args.contenders.split(",")
    if len(names) != 2 or args.rounds < 1:
        ap.error("--contenders: exactly two names; --rounds: at least 1")
    ref, other = names
    print(f"paced_pair: {cpu_model()}; Python {sys.version.split()[0]}; load {loadavg()}")
    print(
        f"{args.rounds} rounds; each: {ref} and {other} side by side, {args.streams} streams x "
        f"{args.events} events at {PEER_PACE_MS:g} ms, fresh processes ({API_PATH})"
    )
    ratios: list[float] = []
    started = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="paced_pair-") as tmp:
        for i in range(args.rounds):
            got = _round(names, args.streams, args.events, Path(tmp))
            ratio = got[other]["cpu_us"] / got[ref]["cpu_us"]
            ratios.append(ratio)
            print(
                f"round {i + 1}: {ref} {got[ref]['cpu_us']:.1f} µs/event (p50 "
                f"{got[ref]['p50_ms']:.3f} ms), {other} {got[other]['cpu_us']:.1f} µs/event "
                f"(p50 {got[other]['p50_ms']:.3f} ms): ratio {ratio:.2f}x",
                flush=True,
            )
    med = statistics.median(ratios)
    # the paced target is against the bare proxy; any other pair is a comparison
    mark = ("PASS" if med <= TARGET_PACED_CPU else "MISSED") if ref.startswith("bare-") else "n/a"
    print(
        f"[{mark:<6}] {other} / {ref}: paced CPU/event {med:.2f}x, median of {len(ratios)} "
        f"side-by-side rounds (min {min(ratios):.2f}, max {max(ratios):.2f})  "
        f"[target <= {TARGET_PACED_CPU}x]"
    )
    print(f"(total {time.monotonic() - started:.0f} s; load average at end: {loadavg()})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
