"""What one stream start costs a proxy: function calls and CPU per request, under a burst.

Hand-run (not a test): the per-request work of sse-proxy against the
bare aiohttp proxy of ``bench_proxy.py``, on the same loop, counted rather than timed
where it can be (cProfile's call counts do not move with the machine's load)::

    .venv/bin/python -m bench.investigations.start_cost            # 400 requests, bursts of 50
    .venv/bin/python -m bench.investigations.start_cost --loop asyncio --top 40
    .venv/bin/python -m bench.investigations.start_cost --events 64 --requests 200
    .venv/bin/python -m bench.investigations.start_cost --serve-arg=--log-level=info
    # (what logging adds)

Each contender runs in a child (``_profiled``: the contender's own ``__main__`` under a
cProfile that SIGUSR1 turns on and SIGUSR2 off and dumps), in front of the upstream of
``bench_proxy.py``; the load generator sends ``--requests`` streams of ``--events`` events
in bursts of ``--burst`` that start together, after a warm-up that fills the upstream
connection pool. Two passes per contender: one without the profiler (CPU per request from
the scheduler, exact but load-sensitive) and one with it (calls per request, exact).
"""

from __future__ import annotations

import argparse
import cProfile
import os
import pstats
import runpy
import shutil
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench.harness import Service, cpu_seconds, free_port
from bench.rig import LoadGen, sse_proxy_argv, start_upstream

_LAYERS = (
    ("sse_proxy", "/sse_proxy/"),
    ("bench (bare proxy)", "/bench/"),
    ("aiohttp", "/aiohttp/"),
    ("multidict/yarl", "/multidict/"),
    ("multidict/yarl", "/yarl/"),
    ("structlog", "/structlog/"),
    ("prometheus_client", "/prometheus_client/"),
    ("asyncio", "/asyncio/"),
    ("uvloop", "uvloop"),
)


def _layer(filename: str) -> str:
    for name, marker in _LAYERS:
        if marker in filename:
            return name
    if filename == "~":
        return "builtins (C)"
    return "other Python"


def _role_profiled(argv: Sequence[str]) -> int:
    """Run a module as ``__main__`` with a cProfile toggled by SIGUSR1/SIGUSR2 (each
    SIGUSR1 starts a new profile: one file per window)."""
    ap = argparse.ArgumentParser(prog="start_cost _profiled")
    ap.add_argument("--out", required=True)
    ap.add_argument("--src", default=None, help="import the module from this tree")
    ap.add_argument("module")
    ap.add_argument("args", nargs=argparse.REMAINDER)
    args = ap.parse_args(argv)
    prof = [cProfile.Profile()]

    def on(_sig: int, _frame: Any) -> None:
        prof[0] = cProfile.Profile()
        prof[0].enable()

    def off(_sig: int, _frame: Any) -> None:
        prof[0].disable()
        prof[0].dump_stats(args.out)

    signal.signal(signal.SIGUSR1, on)
    signal.signal(signal.SIGUSR2, off)
    sys.argv = [args.module, *args.args]
    if args.src:
        sys.path.insert(0, args.src)
    runpy.run_module(args.module, run_name="__main__", alter_sys=True)
    return 0


def _contender_argv(name: str, upstream_url: str, port: int, extra: Sequence[str]) -> list[str]:
    loop = name.rpartition("-")[2]
    if name.startswith("bare-"):
        return [
            "bench.rig", "_bare", "--port", str(port), "--upstream", upstream_url,
            "--loop", loop,
        ]  # fmt: skip
    sse = sse_proxy_argv()
    module = sse[2] if sse[:2] == [sys.executable, "-m"] else "sse_proxy"
    return [
        module, "serve", "--upstream", upstream_url, "--port", str(port),
        "--mode", "passthrough", "--log-level", "warning", "--loop", loop, *extra,
    ]  # fmt: skip


def _wait_file(path: Path, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if path.exists() and path.stat().st_size > 0:
            time.sleep(0.2)  # written whole
            return
        time.sleep(0.05)
    raise RuntimeError(f"no profile written to {path}")


def _one(
    name: str, upstream: Service, workdir: Path, args: argparse.Namespace, profiled: bool
) -> dict[str, Any]:
    port = free_port()
    out = workdir / f"{name}.prof"
    out.unlink(missing_ok=True)
    argv = [sys.executable, "-m", "bench.investigations.start_cost", "_profiled", "--out", str(out)]
    if args.proxy_src is not None and name.startswith("sse-"):
        argv += ["--src", str(args.proxy_src)]
    argv += _contender_argv(name, upstream.url, port, args.serve_arg)
    svc = Service(name, argv, port, log=workdir / f"{name}.log")
    bursts = max(1, args.requests // args.burst)
    phases = [{"name": "warmup", "streams": args.burst, "n": args.events, "timeout_s": 60}]
    phases += [
        {"name": f"b{i}", "streams": args.burst, "n": args.events, "timeout_s": 60}
        for i in range(bursts)
    ]
    load = LoadGen(svc.url, phases)
    errors = 0
    try:
        res = load.run("warmup", 60)
        errors += res["error_count"]
        time.sleep(0.3)
        cpu0 = cpu_seconds(svc.pids)
        if profiled:
            os.kill(svc.proc.pid, signal.SIGUSR1)
            time.sleep(0.1)
        wall = 0.0
        for i in range(bursts):
            res = load.run(f"b{i}", 60)
            errors += res["error_count"]
            wall += res["wall_s"]
        cpu = cpu_seconds(svc.pids) - cpu0
        if profiled:
            os.kill(svc.proc.pid, signal.SIGUSR2)
            _wait_file(out)
    finally:
        load.stop()
        svc.stop()
    result: dict[str, Any] = {
        "requests": bursts * args.burst,
        "cpu_s": cpu,
        "wall_s": wall,
        "errors": errors,
    }
    if profiled:
        result["stats"] = pstats.Stats(str(out))
    return result


def _median_cpu(passes: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The pass with the median CPU per request (all of them listed in ``each``)."""
    if not passes:
        return None
    per = sorted(passes, key=lambda p: p["cpu_s"] / p["requests"])
    out = dict(per[len(per) // 2])
    out["each"] = [round(1e6 * p["cpu_s"] / p["requests"]) for p in passes]
    out["errors"] = sum(p["errors"] for p in passes)
    return out


def _per_function(stats: pstats.Stats) -> dict[tuple[str, int, str], tuple[int, float]]:
    raw: dict[Any, Any] = stats.stats  # type: ignore[attr-defined]
    return {key: (nc, tt) for key, (_cc, nc, tt, _ct, _callers) in raw.items()}


def _short(key: tuple[str, int, str]) -> str:
    filename, line, func = key
    if filename == "~":
        return func
    parts = Path(filename).parts
    tail = "/".join(parts[-2:]) if len(parts) > 1 else filename
    return f"{tail}:{line}({func})"


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_profiled"]:
        return _role_profiled(argv[1:])
    ap = argparse.ArgumentParser(
        prog="python -m bench.investigations.start_cost", description=__doc__
    )
    ap.add_argument("--requests", type=int, default=400)
    ap.add_argument("--burst", type=int, default=50, help="streams started together")
    ap.add_argument("--events", type=int, default=1, help="content events per stream")
    ap.add_argument("--loop", choices=("uvloop", "asyncio"), default="uvloop")
    ap.add_argument("--top", type=int, default=30)
    ap.add_argument("--serve-arg", action="append", default=[], help="one more serve option")
    ap.add_argument("--no-cpu-pass", action="store_true", help="only the profiled pass")
    ap.add_argument("--rounds", type=int, default=1, help="CPU passes per contender, alternating")
    ap.add_argument("--proxy-src", type=Path, help="run sse-proxy from this tree (git archive)")
    ap.add_argument("--keep", type=Path, help="copy each contender's .prof file here")
    args = ap.parse_args(argv)
    names = [f"bare-{args.loop}", f"sse-{args.loop}"]
    print(f"start_cost: {args.requests} requests in bursts of {args.burst}, {args.events} events")
    print(f"each, loop {args.loop}; load average {os.getloadavg()[0]:.2f} at start", flush=True)
    with tempfile.TemporaryDirectory(prefix="start-cost-") as tmp:
        workdir = Path(tmp)
        upstream = start_upstream(workdir)
        try:
            runs: dict[str, dict[str, Any]] = {}
            cpus: dict[str, list[dict[str, Any]]] = {name: [] for name in names}
            for _ in range(0 if args.no_cpu_pass else args.rounds):
                for name in names:  # taking turns: the machine's load hits both alike
                    cpus[name].append(_one(name, upstream, workdir, args, False))
            for name in names:
                cpu = _median_cpu(cpus[name])
                prof = _one(name, upstream, workdir, args, True)
                runs[name] = {"cpu": cpu, "prof": prof}
                if args.keep is not None:
                    args.keep.mkdir(parents=True, exist_ok=True)
                    shutil.copy(workdir / f"{name}.prof", args.keep / f"{name}.prof")
        finally:
            upstream.stop()
    print()
    print(f"{'contender':14} {'calls/req':>10} {'CPU us/req':>11} {'errors':>7}")
    funcs: dict[str, dict[tuple[str, int, str], tuple[int, float]]] = {}
    layers: dict[str, Counter[str]] = {}
    for name, run in runs.items():
        prof = run["prof"]
        n = prof["requests"]
        funcs[name] = per = _per_function(prof["stats"])
        calls = sum(nc for nc, _ in per.values())
        layer: Counter[str] = Counter()
        for key, (nc, _) in per.items():
            layer[_layer(key[0])] += nc
        layers[name] = layer
        cpu = run["cpu"]
        cpu_us = f"{1e6 * cpu['cpu_s'] / cpu['requests']:.0f}" if cpu else "-"
        errs = prof["errors"] + (cpu["errors"] if cpu else 0)
        each = f"  (passes: {cpu['each']})" if cpu and len(cpu["each"]) > 1 else ""
        print(f"{name:14} {calls / n:10.0f} {cpu_us:>11} {errs:7}{each}")
    bare, sse = names
    nb, ns = runs[bare]["prof"]["requests"], runs[sse]["prof"]["requests"]
    print("\ncalls per request by layer:")
    print(f"{'layer':22} {bare:>12} {sse:>12} {'extra':>8}")
    for lay in sorted(set(layers[bare]) | set(layers[sse]), key=lambda k: -layers[sse][k]):
        b, s = layers[bare][lay] / nb, layers[sse][lay] / ns
        print(f"{lay:22} {b:12.1f} {s:12.1f} {s - b:+8.1f}")
    print(f"\n{sse}: top {args.top} functions by calls per request (bare's count alongside)")
    print(f"{'calls/req':>9} {'bare':>7} {'tottime us/req':>14}  function")
    per_s, per_b = funcs[sse], funcs[bare]
    for key, (nc, tt) in sorted(per_s.items(), key=lambda kv: -kv[1][0])[: args.top]:
        b = per_b.get(key, (0, 0.0))[0] / nb
        print(f"{nc / ns:9.1f} {b:7.1f} {1e6 * tt / ns:14.1f}  {_short(key)}")
    print(f"\n{sse}: top {args.top} of its own functions (sse_proxy/) by own time per request")
    own = [(k, v) for k, v in per_s.items() if "/sse_proxy/" in k[0]]
    for key, (nc, tt) in sorted(own, key=lambda kv: -kv[1][1])[: args.top]:
        print(f"{nc / ns:9.1f} {'':7} {1e6 * tt / ns:14.1f}  {_short(key)}")
    print(f"\nload average at end: {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
