"""What each observer costs sse-proxy, per stream start and per event, and where.

Hand-run (not a test). Each configuration (sse-proxy with the observers of a
``bench.rig`` contender suffix: ``+obs``, ``+obs+broken``, ``+obs+all``, or ``default``)
runs in a child under a cProfile that signals turn on and off
(:mod:`bench.investigations.start_cost`), and meets two phases:

* **starts**: ``--requests`` streams of one event in bursts of 50: CPU and Python calls per
  stream start;
* **paced**: 50 streams of ``--events`` events one per 20 ms (one event per read, how tokens
  arrive): CPU and calls per event, the streams' starts taken out (the first phase's
  figure per start).

A pass without the profiler gives the CPU (the scheduler's, every thread); a second with
it the calls and own time per function, printed for the top functions of the observers'
packages (sse_proxy, opentelemetry, prometheus_client, structlog) beside the default's::

    .venv/bin/python -m bench.investigations.observer_cost --configs default,+obs
    .venv/bin/python -m bench.investigations.observer_cost --configs default,+obs+all --top 30
    .venv/bin/python -m bench.investigations.observer_cost --configs +obs@../before,+obs

``CONFIG@DIR`` runs that configuration from another source tree (a ``git archive`` of the
commit before a change, say): before and after in one run, in turn.
"""

from __future__ import annotations

import argparse
import os
import pstats
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bench import rig
from bench.harness import Service, cpu_seconds, free_port
from bench.investigations.start_cost import _per_function, _role_profiled, _short, _wait_file
from bench.rig import LoadGen

_PACKAGES = ("/sse_proxy/", "/opentelemetry/", "/prometheus_client/", "/structlog/")


def _argv(config: str, upstream: str, port: int, workdir: Path, loop: str) -> list[str]:
    sse = rig.sse_proxy_argv()
    module = sse[2] if sse[:2] == [sys.executable, "-m"] else "sse_proxy"
    extras = [e for e in config.partition("@")[0].split("+") if e and e != "default"]
    return [
        module, "serve", "--upstream", upstream, "--port", str(port), "--mode", "passthrough",
        "--log-level", "warning", "--loop", loop, *rig.observer_args(extras, workdir),
    ]  # fmt: skip


def _one(
    config: str, upstream: Service, workdir: Path, args: argparse.Namespace, profiled: bool
) -> dict[str, Any]:
    src = Path(config.partition("@")[2]).resolve() if "@" in config else rig.PROXY_SRC
    port = free_port()
    out = {ph: workdir / f"{config.replace('/', '_')}-{ph}.prof" for ph in ("starts", "paced")}
    argv = [sys.executable, "-m", "bench.investigations.start_cost", "_profiled"]
    argv += ["--out", str(workdir / "current.prof")]
    if src is not None:
        argv += ["--src", str(src)]
    argv += _argv(config, upstream.url, port, workdir, args.loop)
    env = None
    if src is not None:
        env = {**os.environ, "PYTHONPATH": f"{src}:{os.environ.get('PYTHONPATH', '')}"}
    log = workdir / f"{config.replace('/', '_')}.log"
    svc = Service(config, argv, port, log=log, env=env)
    bursts = max(1, args.requests // 50)
    phases = [{"name": "warmup", "streams": 50, "n": 20, "timeout_s": 60}]
    phases += [{"name": f"b{i}", "streams": 50, "n": 1, "timeout_s": 60} for i in range(bursts)]
    phases.append(
        {"name": "paced", "streams": 50, "n": args.events, "pace_ms": 20.0, "timeout_s": 300}
    )
    load = LoadGen(svc.url, phases)
    result: dict[str, Any] = {"starts": bursts * 50, "events": 50 * (args.events + 2)}
    try:
        load.run("warmup", 60)
        time.sleep(0.3)
        for phase in ("starts", "paced"):
            cpu0 = cpu_seconds(svc.pids)
            if profiled:
                (workdir / "current.prof").unlink(missing_ok=True)
                os.kill(svc.proc.pid, signal.SIGUSR1)
                time.sleep(0.1)
            if phase == "starts":
                for i in range(bursts):
                    load.run(f"b{i}", 60)
            else:
                load.run("paced", 300)
            time.sleep(0.3)  # what a stream's end puts off, done
            result[f"{phase}_cpu"] = cpu_seconds(svc.pids) - cpu0
            if profiled:
                os.kill(svc.proc.pid, signal.SIGUSR2)
                _wait_file(workdir / "current.prof")
                (workdir / "current.prof").rename(out[phase])
                if args.keep is not None:
                    args.keep.mkdir(parents=True, exist_ok=True)
                    shutil.copy(out[phase], args.keep / out[phase].name)
                result[f"{phase}_stats"] = pstats.Stats(str(out[phase]))
    finally:
        load.stop()
        svc.stop()
    return result


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv[:1] == ["_profiled"]:
        return _role_profiled(argv[1:])
    ap = argparse.ArgumentParser(
        prog="python -m bench.investigations.observer_cost", description=__doc__
    )
    ap.add_argument("--configs", default="default,+obs,+obs+broken,+obs+all")
    ap.add_argument("--requests", type=int, default=300, help="stream starts (bursts of 50)")
    ap.add_argument("--events", type=int, default=150, help="events per paced stream")
    ap.add_argument("--loop", choices=rig.LOOPS, default="uvloop")
    ap.add_argument("--rounds", type=int, default=1, help="CPU passes, configurations in turn")
    ap.add_argument("--top", type=int, default=20)
    ap.add_argument("--no-profile", action="store_true", help="the CPU passes only")
    ap.add_argument("--proxy-src", type=Path, help="run sse-proxy from this tree")
    ap.add_argument("--keep", type=Path, help="copy the .prof files here (pstats, snakeviz)")
    args = ap.parse_args(argv)
    if args.proxy_src is not None:
        rig.PROXY_SRC = args.proxy_src.resolve()
    configs = [c for c in args.configs.split(",") if c]
    print(f"observer_cost: {rig.proxy_source()}; load average {os.getloadavg()[0]:.2f}")
    with tempfile.TemporaryDirectory(prefix="observer-cost-") as tmp:
        workdir = Path(tmp)
        upstream = rig.start_upstream(workdir, args.loop)
        sink = rig.start_otlp_sink(workdir)
        rig.OTLP_URL = sink.url
        cpu: dict[str, list[dict[str, Any]]] = {c: [] for c in configs}
        prof: dict[str, dict[str, Any]] = {}
        try:
            for _ in range(args.rounds):
                for c in configs:  # in turn: the machine's load hits them alike
                    cpu[c].append(_one(c, upstream, workdir, args, False))
            if not args.no_profile:
                for c in configs:
                    prof[c] = _one(c, upstream, workdir, args, True)
        finally:
            sink.stop()
            upstream.stop()
    print(f"\n{'configuration':<32}{'CPU µs/start':>14}{'CPU µs/event':>14}   (each round)")
    for c in configs:
        starts = sorted(1e6 * r["starts_cpu"] / r["starts"] for r in cpu[c])
        per_start = starts[len(starts) // 2]
        events = sorted(1e6 * (r["paced_cpu"] - per_start * 50 / 1e6) / r["events"] for r in cpu[c])
        each = ", ".join(f"{s:.0f}/{e:.1f}" for s, e in zip(starts, events, strict=True))
        print(f"{c:<32}{per_start:>14.0f}{events[len(events) // 2]:>14.2f}   ({each})")
    if args.no_profile:
        return 0
    for phase, unit in (("starts", "start"), ("paced", "event")):
        base = configs[0]
        per = {c: _per_function(prof[c][f"{phase}_stats"]) for c in configs}
        n = {c: prof[c][phase if phase == "starts" else "events"] for c in configs}
        print(f"\n== {phase}: calls per {unit} ==")
        for c in configs:
            calls = sum(nc for nc, _ in per[c].values())
            print(f"{c:<32}{calls / n[c]:>10.1f}")
        for c in configs[1:]:
            print(f"\n{c}: top {args.top} functions of its packages by own time per {unit}")
            print(f"{'calls':>8} {f'({base})':>10} {'own µs':>8} {f'({base})':>10}  function")
            own = [(k, v) for k, v in per[c].items() if any(p in k[0] for p in _PACKAGES)]

            base_own = {k: tt / n[base] for k, (_, tt) in per[base].items()}
            more = {k: tt / n[c] - base_own.get(k, 0.0) for k, (_, tt) in own}
            for key, (nc, tt) in sorted(own, key=lambda kv: -more[kv[0]])[: args.top]:
                bc, bt = per[base].get(key, (0, 0.0))
                print(
                    f"{nc / n[c]:8.2f} {bc / n[base]:10.2f} {1e6 * tt / n[c]:8.2f} "
                    f"{1e6 * bt / n[base]:10.2f}  {_short(key)}"
                )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
