"""Bursts of stream starts, contenders taking turns: TTFB p50 and CPU per request.

Hand-run (not a test). ``bench_scale``'s TTFB@50 is one burst per contender, and
on a shared machine one burst swings by a third. Here every contender gets ``--bursts``
bursts of ``--streams`` streams started together (connections warm, On the Bench's
stream shape cut to ``--events`` deltas) per round, the contenders take turns round after
round (in the opposite order every other round: the second of a round runs a few percent
worse), and the medians are printed with each round's ratio to the first sse-proxy row, so
that two trees of sse-proxy (``NAME@TREE``, e.g. ``git archive`` of main) and the bare
aiohttp proxy are compared in the same minutes::

    .venv/bin/python -m bench.investigations.burst_pair            # bare, sse-proxy; 3 rounds
    .venv/bin/python -m bench.investigations.burst_pair \
        --contenders bare-uvloop,sse-uvloop@/tmp/main,sse-uvloop
    # the outside harness's burst: starts spread over 20 ms, On the Bench's paced shape,
    # sse-proxy at its default log level, an idle moment before each burst
    .venv/bin/python -m bench.investigations.burst_pair --spread-ms 20 --pace-ms 20 --events 64 \
        --gap-ms 200 --sse-log-level info

CPU per request is the proxy process's (``/proc``), over the bursts only. With
``--window-cpu``, also the CPU it spends per request from each burst's first request to its
last first byte, measured inside it (``window_cpu_hook.py``, the same for every aiohttp
proxy): the figure a burst's TTFB follows, steadier than the TTFB itself. With
``--window-opcodes N``, instead, the hook counts the bytecodes each function runs in the
windows, and the N functions that run the most per request are printed for each contender,
with the totals by package: which code the first bytes wait for, and how much of it is
sse-proxy's (the proxy runs tens of times slower meanwhile, so the timings then mean
nothing; ``--pace-ms 4000`` keeps streams' later events out of the window)::

    .venv/bin/python -m bench.investigations.burst_pair --rounds 1 --bursts 4 --spread-ms 20 \
        --pace-ms 4000 \
        --events 1 --gap-ms 300 --sse-log-level info --window-opcodes 40
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from bench import harness, rig
from bench.bench_scale import ScaleLoad


def one_round(
    name: str, src: str, workdir: Path, args: argparse.Namespace
) -> tuple[float, float, float, float]:
    """(CPU us per request, median TTFB p50 ms, median last first byte ms over the bursts,
    median CPU us per request in a burst's window or NaN) of a fresh contender."""
    rig.PROXY_SRC = Path(src) if src else None
    upstream = rig.start_upstream(workdir, "uvloop")
    try:
        svc = rig.start_contender(name, upstream, workdir)
        assert svc is not None, "direct has no process to measure"
        burst = {
            "streams": args.streams,
            "n": args.events,
            "spread_ms": args.spread_ms,
            "pace_ms": args.pace_ms,
        }
        phases = [{"name": "warm", **burst, "timeout_s": 60}]
        phases += [{"name": f"b{i}", **burst} for i in range(args.bursts)]
        load = ScaleLoad(svc.url, phases)
        rig.pin(svc.pids, "proxy")
        rig.pin([*upstream.pids, load.proc.pid], "load")
        try:
            load.run("warm", 60)
            time.sleep(0.2)
            cpu0 = harness.cpu_seconds(svc.pids)
            ttfb, last = [], []
            for i in range(args.bursts):
                if args.gap_ms:
                    time.sleep(args.gap_ms / 1000)  # the last burst's bookkeeping done
                res = load.run(f"b{i}", 60)
                if res["error_count"]:
                    raise RuntimeError(f"{name}: {res['errors']}")
                ttfb.append(res["ttfb_p50_ms"])
                last.append(res["ttfb_max_ms"])
            cpu = harness.cpu_seconds(svc.pids) - cpu0
            window = _window_cpu(svc.pids, args.bursts)
            if args.window_opcodes:
                _add_opcodes(
                    OPCODES.setdefault(name if not src else f"{name}@{src}", Counter()), svc.pids
                )
        finally:
            load.stop()
            svc.stop()
    finally:
        upstream.stop()
    return (
        1e6 * cpu / (args.streams * args.bursts),
        statistics.median(ttfb),
        statistics.median(last),
        window,
    )


def _window_cpu(pids: Sequence[int], bursts: int) -> float:
    """The median of the last ``bursts`` windows the hook wrote for the contender (the
    warm-up's is before them); NaN without ``--window-cpu``."""
    out = os.environ.get("BURST_WINDOW_DIR")
    if not out:
        return float("nan")
    rows: list[float] = []
    for pid in pids:
        path = Path(out) / f"{pid}.txt"
        if path.exists():
            rows += [float(line) for line in path.read_text().split()]
    return statistics.median(rows[-bursts:]) if rows else float("nan")


OPCODES: dict[str, Counter[str]] = {}
"""``--window-opcodes``: each contender's bytecodes per function, summed over its rounds
(the key ``""`` counts the requests they are over)."""


def _add_opcodes(into: Counter[str], pids: Sequence[int]) -> None:
    out = os.environ.get("BURST_WINDOW_DIR", "")
    for pid in pids:
        path = Path(out) / f"{pid}.opcodes.json"
        if not path.exists():
            continue
        got = json.loads(path.read_text())
        into[""] += got["windows"] * got["streams"]
        for (file, line, func), n in got["rows"]:
            short = re.sub(r".*/(site-packages|sse_proxy|bench|python3\.\d+)/", r"\1/", file)
            into[f"{short}:{line}({func})"] += n


def _package(key: str) -> str:
    first = key.split("/", 1)[0]
    if first == "site-packages":
        return key.split("/", 2)[1]
    return first if first in ("sse_proxy", "bench") else "stdlib"


def _print_opcodes(top: int) -> None:
    for name, counts in OPCODES.items():
        requests = counts.pop("", 0)
        if not requests:
            print(f"\n{name}: no window was counted")
            continue
        total = sum(counts.values()) / requests
        by_package: Counter[str] = Counter()
        for key, n in counts.items():
            by_package[_package(key)] += n
        packages = ", ".join(f"{p} {n / requests:,.0f}" for p, n in by_package.most_common(6))
        print(f"\n{name}: {total:,.0f} bytecodes per request in the window ({packages})")
        for key, n in counts.most_common(top):
            print(f"{n / requests:10.1f}  {key}")


def _install_window_hook(tmp: Path, streams: int) -> None:
    """The hook as the contenders' ``sitecustomize`` (this process's environment is theirs)."""
    hook = tmp / "window-hook"
    (hook / "out").mkdir(parents=True)
    shutil.copyfile(Path(__file__).with_name("window_cpu_hook.py"), hook / "sitecustomize.py")
    os.environ["PYTHONPATH"] = harness.with_pythonpath(hook)
    os.environ["BURST_WINDOW_DIR"] = str(hook / "out")
    os.environ["BURST_WINDOW_STREAMS"] = str(streams)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m bench.investigations.burst_pair", description=__doc__
    )
    ap.add_argument("--contenders", default="bare-uvloop,sse-uvloop", help="NAME or NAME@TREE")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--bursts", type=int, default=8, help="bursts per contender per round")
    ap.add_argument("--streams", type=int, default=50, help="streams started together")
    ap.add_argument("--events", type=int, default=2, help="content deltas per stream")
    ap.add_argument("--spread-ms", type=float, default=0.0, help="the starts spread over this")
    ap.add_argument("--pace-ms", type=float, default=0.0, help="between a stream's events")
    ap.add_argument("--gap-ms", type=float, default=0.0, help="idle time before each burst")
    ap.add_argument(
        "--sse-log-level", default="warning", help="sse-proxy's (info: a summary line a stream)"
    )
    ap.add_argument("--pin", action="store_true", help="the proxy on a CPU of its own")
    ap.add_argument(
        "--window-cpu", action="store_true", help="also the CPU per request in a burst's window"
    )
    ap.add_argument(
        "--window-opcodes",
        type=int,
        default=0,
        metavar="N",
        help="count the bytecodes run in the windows; print the N top functions",
    )
    args = ap.parse_args(argv)
    if args.window_opcodes < 0:
        ap.error("--window-opcodes takes a number of functions to show (0: off)")
    if args.window_opcodes:
        args.window_cpu = True
        os.environ["BURST_WINDOW_OPCODES"] = "1"
    rig.PIN = args.pin
    rig.SSE_LOG_LEVEL = args.sse_log_level
    names = [c for c in args.contenders.split(",") if c]
    print(
        f"burst_pair: {args.rounds} rounds x {args.bursts} bursts of {args.streams} streams"
        f" (started within {args.spread_ms:g} ms{', pinned' if args.pin else ''});"
    )
    print(f"load average at start {harness.loadavg()}", flush=True)
    got: dict[str, list[tuple[float, float, float, float]]] = {c: [] for c in names}
    with tempfile.TemporaryDirectory(prefix="burst-pair-") as tmp:
        if args.window_cpu:
            _install_window_hook(Path(tmp), args.streams)
        for rnd in range(args.rounds):
            # the order turns round by round: whoever runs second in a round ran 5-11 %
            # worse in the window than in the round with the order swapped
            for c in names if rnd % 2 == 0 else names[::-1]:
                name, _, src = c.partition("@")
                got[c].append(one_round(name, src, Path(tmp), args))
                cpu, ttfb, last, window = got[c][-1]
                print(
                    f"   round {rnd + 1}: {c}: {cpu:.0f} us/request, TTFB p50 {ttfb:.1f} ms, "
                    f"last first byte {last:.1f} ms"
                    + (f", in the window {window:.0f} us/request" if args.window_cpu else "")
                )
    print(
        f"\n{'contender':40} {'CPU us/req':>10} {'TTFB p50 ms':>12} {'last ms':>8}"
        + (f" {'window us/req':>14}" if args.window_cpu else "")
    )
    for c, rows in got.items():
        cpu = statistics.median(r[0] for r in rows)
        ttfb = statistics.median(r[1] for r in rows)
        last = statistics.median(r[2] for r in rows)
        window = statistics.median(r[3] for r in rows)
        print(
            f"{c:40} {cpu:10.0f} {ttfb:12.1f} {last:8.1f}"
            + (f" {window:14.0f}" if args.window_cpu else "")
        )
    ref = next((c for c in names if c.startswith("sse-")), None)
    for c in names:
        if ref is None or c == ref:
            continue
        cpu_r = [a[0] / b[0] for a, b in zip(got[c], got[ref], strict=True)]
        ttfb_d = [a[1] - b[1] for a, b in zip(got[c], got[ref], strict=True)]
        last_d = [a[2] - b[2] for a, b in zip(got[c], got[ref], strict=True)]
        window_r = [a[3] / b[3] for a, b in zip(got[c], got[ref], strict=True)]
        print(
            f"{c} vs {ref}, per round: CPU {statistics.median(cpu_r):.2f}x "
            f"{[round(r, 2) for r in cpu_r]}, TTFB {statistics.median(ttfb_d):+.1f} ms "
            f"{[round(d, 1) for d in ttfb_d]}, last first byte "
            f"{statistics.median(last_d):+.1f} ms {[round(d, 1) for d in last_d]}"
            + (
                f", CPU in the window {statistics.median(window_r):.2f}x "
                f"{[round(r, 2) for r in window_r]}"
                if args.window_cpu
                else ""
            )
        )
    if args.window_opcodes:
        _print_opcodes(args.window_opcodes)
    print(f"load average at end {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
