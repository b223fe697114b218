"""Instructions per request under bursts of stream starts, counted by callgrind.

Hand-run (not a test). ``burst_pair`` times the proxies, and on a shared machine
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

    .venv/bin/python -m bench.investigations.instructions          # bare, sse-proxy; 2 rounds
    .venv/bin/python -m bench.investigations.instructions \
        --contenders sse-uvloop@/tmp/main,sse-uvloop
    .venv/bin/python -m bench.investigations.instructions --sse-log-level warning --bursts 6
    .venv/bin/python -m bench.investigations.instructions --spread-ms 10000 --bursts 2
    # (one at a time)
    .venv/bin/python -m bench.investigations.instructions --window --pace-ms 4000 --simulate

With ``--window`` only each burst's window is counted: from its first request to its last
first byte, as ``burst_pair --window-cpu`` times it (``window_cpu_hook.py`` marks the
window's ends for callgrind), so that what the burst's TTFB waits for is counted apart
from what comes after. ``--pace-ms 4000`` keeps every stream's second event out of the
window: the count is then the stream starts alone. ``--simulate`` adds callgrind's cache
and branch simulation: level-1 cache misses and mispredicted branches per request, which
the instruction count does not see and which make a window's time differ from its count.
Under valgrind a window lasts fifty times longer, and the backlog's bound (50 ms) can pass
inside it: some bookkeeping a timed window does not hold is counted in this one, so the
window's count is an upper bound of what the burst's first bytes wait for.

Contenders as in ``burst_pair``: ``bare-uvloop`` (the bare aiohttp proxy of
``bench_proxy.py``) and ``sse-uvloop`` (this tree, or ``sse-uvloop@TREE``, e.g. a
``git archive`` of main), in passthrough on uvloop; ``sse-uvloop+obs`` (``+broken``, ``+all``)
with the observers of :func:`bench.rig.observer_args`, an OTLP receiver started for them.
Each burst is the outside harness's:
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

from bench import harness, rig
from bench.bench_scale import ScaleLoad


def _argv(name: str, upstream: str, port: int, level: str, workdir: Path) -> list[str]:
    if name == "bare-uvloop":
        argv = [sys.executable, "-m", "bench.rig", "_bare", "--upstream", upstream]
        return [*argv, "--port", str(port), "--loop", "uvloop"]
    name, *extras = name.split("+")  # sse-uvloop+obs: with the observers of bench.rig
    argv = [sys.executable, "-m", "sse_proxy", "serve", "--upstream", upstream]
    argv += ["--port", str(port), "--mode", "passthrough", "--log-level", level]
    return [*argv, "--loop", "uvloop", *rig.observer_args(extras, workdir)]


SIMULATED = ("I1mr", "D1mr", "D1mw", "Bcm", "Bim")
"""callgrind's simulated events shown with ``--simulate``: level-1 instruction and data
(read, write) cache misses, mispredicted conditional and indirect branches."""


def one_round(name: str, src: str, workdir: Path, args: argparse.Namespace) -> dict[str, float]:
    """Instructions (and, simulated, misses) per request of a fresh contender over
    ``args.bursts`` bursts: all of each burst, or with ``--window`` its window only."""
    upstream = rig.start_upstream(workdir, "uvloop")
    port = harness.free_port()
    out = workdir / f"callgrind.{name.replace('@', '_').replace('/', '_')}.{time.time_ns()}"
    valgrind = ["valgrind", "--tool=callgrind", "--instr-atstart=no"]
    valgrind.append(f"--callgrind-out-file={out}")
    if args.simulate:
        valgrind += ["--cache-sim=yes", "--branch-sim=yes"]
    env = {**os.environ, "PYTHONHASHSEED": "0"}  # the same dict layouts in every run
    cwd = harness.ROOT
    paths = []
    if args.window:
        hook = workdir / f"hook.{out.name}"
        (hook / "out").mkdir(parents=True)
        shutil.copyfile(Path(__file__).with_name("window_cpu_hook.py"), hook / "sitecustomize.py")
        paths.append(str(hook))
        env["BURST_WINDOW_DIR"] = str(hook / "out")
        env["BURST_WINDOW_STREAMS"] = str(args.streams)
        env["BURST_WINDOW_MARKS"] = "1"
        valgrind += ["--zero-before=os_getppid", "--dump-before=os_getpgrp"]
    if src:
        paths.append(src)
        cwd = Path(src)
    if paths:
        env["PYTHONPATH"] = harness.with_pythonpath(Path(os.pathsep.join(paths)))
    argv = _argv(name, upstream.url, port, args.sse_log_level, workdir)
    try:
        svc = harness.Service(
            name, valgrind + argv, port, log=workdir / f"{port}.log", env=env, cwd=cwd, wait_s=180
        )
        burst = {"streams": args.streams, "n": args.events, "spread_ms": args.spread_ms}
        burst["pace_ms"] = args.pace_ms
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
            if not args.window:
                subprocess.run([*control, "-d", str(svc.proc.pid)], check=True, capture_output=True)
        finally:
            load.stop()
            svc.stop()
    finally:
        upstream.stop()
    # --window: one dump per window (OUT.1, OUT.2...), and OUT itself is what came after
    # the last; otherwise the one dump asked for (the exit's holds nothing: switched off)
    dumps = sorted(workdir.glob(out.name + ".*")) if args.window else workdir.glob(out.name + "*")
    sums: dict[str, int] = {}
    windows = 0
    for dump in dumps:
        names: list[str] = []
        values: dict[str, int] = {}  # the larger of a dump's summary and totals lines
        for line in dump.read_text(errors="replace").splitlines():
            if line.startswith("events:"):
                names = line.split()[1:]
            elif line.startswith(("summary:", "totals:")):
                for key, value in zip(names, map(int, line.split()[1:]), strict=False):
                    values[key] = max(values.get(key, 0), value)
        if args.window:
            windows += 1
            for key, value in values.items():
                sums[key] = sums.get(key, 0) + value
        elif values.get("Ir", 0) > sums.get("Ir", 0):
            sums = values
    if not sums.get("Ir"):
        found = sorted(p.name for p in workdir.glob(out.name + "*"))
        raise RuntimeError(f"{name}: callgrind wrote no counts ({found or 'no dump'})")
    if args.window and windows != args.bursts:
        raise RuntimeError(f"{name}: {windows} windows counted, {args.bursts} bursts run")
    requests: int = args.streams * args.bursts
    return {key: value / requests for key, value in sums.items()}


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.investigations.instructions", description=__doc__
    )
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
    ap.add_argument("--pace-ms", type=float, default=20.0, help="between a stream's events")
    ap.add_argument("--sse-log-level", default="info", help="sse-proxy's --log-level")
    ap.add_argument(
        "--window",
        action="store_true",
        help="count each burst's window only (first request to last first byte)",
    )
    ap.add_argument(
        "--simulate", action="store_true", help="also simulated cache misses and mispredicts"
    )
    args = ap.parse_args(argv)
    for tool in ("valgrind", "callgrind_control"):
        if shutil.which(tool) is None:
            print(f"instructions: {tool} is not installed (Debian: apt-get install valgrind)")
            return 2
    contenders = []
    for spec in args.contenders.split(","):
        name, _, src = spec.strip().partition("@")
        if name.partition("+")[0] not in ("bare-uvloop", "sse-uvloop"):
            print(
                f"instructions: unknown contender {name!r} "
                "(bare-uvloop, sse-uvloop[+obs...][@TREE])"
            )
            return 2
        contenders.append((spec.strip(), name, src))
    where = "each burst's window" if args.window else "the bursts"
    print(
        f"instructions: {args.rounds} rounds x {args.bursts} bursts of {args.streams} streams "
        f"(started within {args.spread_ms:g} ms, {args.events} deltas {args.pace_ms:g} ms "
        f"apart), sse-proxy at {args.sse_log_level}; user-space instructions per request over "
        f"{where} (callgrind)"
    )
    shown = ("Ir", *SIMULATED) if args.simulate else ("Ir",)
    counts: dict[str, list[dict[str, float]]] = {spec: [] for spec, _, _ in contenders}
    with tempfile.TemporaryDirectory(prefix="instructions-") as tmp:
        sink = rig.start_otlp_sink(Path(tmp))  # (for +obs contenders)
        rig.OTLP_URL = sink.url
        try:
            for r in range(args.rounds):
                for spec, name, src in contenders:
                    got = one_round(name, src, Path(tmp), args)
                    counts[spec].append(got)
                    more = "".join(f", {k} {got.get(k, 0):,.0f}" for k in shown[1:])
                    print(f"   round {r + 1}: {spec}: {got['Ir']:,.0f}{more}", flush=True)
        finally:
            sink.stop()
    head = "".join(f"{k:>9}" for k in shown[1:])
    print(f"\n{'contender':<40}{'instructions/request':>22}{'spread':>9}{head}")
    mids: dict[str, dict[str, float]] = {}
    for spec, rounds in counts.items():
        mids[spec] = mid = {k: statistics.median(r.get(k, 0.0) for r in rounds) for k in shown}
        values = [r["Ir"] for r in rounds]
        spread = (max(values) - min(values)) / mid["Ir"] if mid["Ir"] else 0.0
        more = "".join(f"{mid[k]:>9,.0f}" for k in shown[1:])
        print(f"{spec:<40}{mid['Ir']:>22,.0f}{spread:>8.1%}{more}")
    first = next((s for s, n, _ in contenders if n.startswith("sse-uvloop")), None)
    if first is not None:
        ref = mids[first]
        for spec, mid in mids.items():
            if spec != first:
                ratios = ", ".join(f"{k} {mid[k] / ref[k]:.3f}x" for k in shown if ref.get(k))
                print(f"{spec} / {first}: {ratios}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
