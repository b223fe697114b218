"""Instructions per request under bursts of stream starts, counted by callgrind.

Hand-run (not a test); issue 23. ``burst_pair`` times the proxies, and on a shared machine
one of its rounds differs from the next by a tenth; a change of a few percent is lost in
that. Here each contender runs under valgrind's callgrind (instrumentation switched on
only for the measured bursts, so start-up and the warm-up are left out), and the figure is
user-space instructions per request, which does not move with the machine's load. What
moves it is the proxy's own timing: how a burst's reads fall together under valgrind and
whether bookkeeping is put off, so that the same tree's burst counts differ by up to two
percent from run to run (a smaller change is lost in that). It says nothing about cache
misses or system calls, which is why the timed benchmarks stay. With the starts a tenth
of a second apart (``--spread-ms 10000``) each request runs alone and the count repeats
to within about 0.2 %, which is what a change to one request's path is best measured by::

    .venv/bin/python -m bench.instructions                      # bare, sse-proxy; 2 rounds
    .venv/bin/python -m bench.instructions --contenders sse-uvloop@/tmp/main,sse-uvloop
    .venv/bin/python -m bench.instructions --sse-log-level warning --bursts 6
    .venv/bin/python -m bench.instructions --spread-ms 10000 --bursts 2   # one at a time

Contenders as in ``burst_pair``: ``bare-uvloop`` (the bare aiohttp proxy of
``bench_proxy.py``) and ``sse-uvloop`` (this tree, or ``sse-uvloop@TREE``, e.g. a
``git archive`` of main), in passthrough on uvloop. Each burst is the outside harness's:
``--streams`` streams started within 20 ms, On the Bench's paced shape cut to ``--events``
deltas. The proxy runs about fifty times slower under valgrind, so the bursts are few.
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path

from bench import bench_proxy as bp
from bench.bench_scale import ScaleLoad


def _argv(name: str, upstream: str, port: int, level: str) -> list[str]:
    if name == "bare-uvloop":
        argv = [sys.executable, "-m", "bench.bench_proxy", "_bare", "--upstream", upstream]
        return [*argv, "--port", str(port), "--loop", "uvloop"]
    argv = [sys.executable, "-m", "sse_proxy", "serve", "--upstream", upstream]
    argv += ["--port", str(port), "--mode", "passthrough", "--log-level", level]
    return [*argv, "--loop", "uvloop"]


def one_round(name: str, src: str, workdir: Path, args: argparse.Namespace) -> float:
    """Instructions per request of a fresh contender over ``args.bursts`` bursts."""
    upstream = bp._start_upstream(workdir, "uvloop")
    port = bp._free_port()
    out = workdir / f"callgrind.{name.replace('@', '_').replace('/', '_')}.{time.time_ns()}"
    valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
    valgrind.append(f"--callgrind-out-file={out}")
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same dict layouts in every run
    cwd = bp.ROOT
    if src:
        env["PYTHONPATH"] = bp._with_pythonpath(Path(src))
        cwd = Path(src)
    argv = _argv(name, upstream.url, port, args.sse_log_level)
    try:
        svc = bp.Service(
            name, valgrind + argv, port, log=workdir / f"{port}.log", env=env, cwd=cwd, wait_s=180
        )
        burst = {"streams": args.streams, "n": args.events, "spread_ms": args.spread_ms}
        burst["pace_ms"] = 20
        phases = [{"name": f"w{i}", **burst, "timeout_s": 300} for i in range(2)]
        phases += [{"name": f"b{i}", **burst, "timeout_s": 300} for i in range(args.bursts)]
        load = ScaleLoad(svc.url, phases)
        control = ["callgrind_control"]
        try:
            for i in range(2):
                load.run(f"w{i}", 300)
                time.sleep(1.0)
            subprocess.run(
                [*control, "-i", "on", str(svc.proc.pid)], check=True, capture_output=True
            )
            for i in range(args.bursts):
                res = load.run(f"b{i}", 300)
                if res["error_count"]:
                    raise RuntimeError(f"{name}: {res['errors']}")
                time.sleep(1.0)  # the burst's bookkeeping done, under valgrind too
            subprocess.run(
                [*control, "-i", "off", str(svc.proc.pid)], check=True, capture_output=True
            )
            subprocess.run([*control, "-d", str(svc.proc.pid)], check=True, capture_output=True)
        finally:
            load.stop()
            svc.stop()
    finally:
        upstream.stop()
    total = 0
    for dump in workdir.glob(out.name + "*"):
        for line in dump.read_text(errors="replace").splitlines():
            if line.startswith(("summary:", "totals:")):
                total = max(total, int(line.split()[1]))
    if not total:
        raise RuntimeError(f"{name}: callgrind wrote no counts")
    requests: int = args.streams * args.bursts
    return total / requests


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m bench.instructions", description=__doc__)
    ap.add_argument("--contenders", default="bare-uvloop,sse-uvloop")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--bursts", type=int, default=6, help="measured bursts per round")
    ap.add_argument("--streams", type=int, default=50)
    ap.add_argument("--events", type=int, default=2, help="content deltas per stream")
    ap.add_argument(
        "--spread-ms",
        type=float,
        default=20.0,
        help="a burst's starts spread over this (10000: one at a time, repeating to 0.2 %%)",
    )
    ap.add_argument("--sse-log-level", default="info", help="sse-proxy's --log-level")
    args = ap.parse_args(argv)
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            print(f"instructions: {tool} is not installed (Debian: apt-get install valgrind)")
            return 2
    contenders = []
    for spec in args.contenders.split(","):
        name, _, src = spec.strip().partition("@")
        if name not in ("bare-uvloop", "sse-uvloop"):
            print(f"instructions: unknown contender {name!r} (bare-uvloop, sse-uvloop[@TREE])")
            return 2
        contenders.append((spec.strip(), name, src))
    print(
        f"instructions: {args.rounds} rounds x {args.bursts} bursts of {args.streams} streams "
        f"(started within {args.spread_ms:g} ms, {args.events} paced deltas), sse-proxy at "
        f"{args.sse_log_level}; user-space instructions per request (callgrind)"
    )
    counts: dict[str, list[float]] = {spec: [] for spec, _, _ in contenders}
    with tempfile.TemporaryDirectory(prefix="instructions-") as tmp:
        for r in range(args.rounds):
            for spec, name, src in contenders:
                ir = one_round(name, src, Path(tmp), args)
                counts[spec].append(ir)
                print(f"   round {r + 1}: {spec}: {ir:,.0f}")
    print(f"\n{'contender':<40}{'instructions/request':>22}{'spread':>9}")
    for spec, values in counts.items():
        mid = statistics.median(values)
        spread = (max(values) - min(values)) / mid if mid else 0.0
        print(f"{spec:<40}{mid:>22,.0f}{spread:>8.1%}")
    first = next((s for s, n, _ in contenders if n == "sse-uvloop"), None)
    if first is not None:
        ref = statistics.median(counts[first])
        for spec, values in counts.items():
            if spec != first:
                print(f"{spec} / {first}: {statistics.median(values) / ref:.3f}x")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
