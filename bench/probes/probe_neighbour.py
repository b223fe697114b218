"""Neighbour-stream probe: one hostile stream must not hold the proxy's event loop.

Three processes on loopback: an upstream (this module with ``--upstream``, a tiny aiohttp
server), a real ``sse-proxy serve`` in front of it, and this probe as the client. For each
hostile input the probe starts a fresh proxy, opens a *neighbour* stream (an OpenAI chat
stream ticking every ``--tick-ms`` ms, each tick stamped with the upstream's monotonic
clock), waits until it ticks steadily, then fetches the hostile stream through the same
proxy and records every neighbour arrival. The figure is the largest gap between two
neighbour arrivals while the hostile stream is in flight (from its request until its last
byte reached the client, plus a few ticks, since the proxy observes each read before it
forwards it). Target: under ~50 ms + one tick, for every input.

The hostile inputs are those of ``bench/worst_case.py`` (the typical stream is the control
row), each written by the upstream in one write, plus gzip-compressed ones
(``Content-Encoding: gzip``) that expand past 4 MiB: comment lines and a typical stream.
Every hostile body must also reach the client byte for byte (checked by SHA-256).

Hand-run, not a test::

    .venv/bin/python -m bench.probes.probe_neighbour --quick      # ~0.2 MB inputs, 10 s cap
    .venv/bin/python -m bench.probes.probe_neighbour              # ~1 MB inputs, 30 s cap
    .venv/bin/python -m bench.probes.probe_neighbour --case invalid-ff --cap 180

A case that is still running at ``--cap`` seconds is cut off and reported as
``FAIL (timeout)``; its proxy is then stopped (SIGTERM, SIGKILL after 3 s: a proxy stuck in
one read cannot run its signal handler). Exit status 1 if a hostile body arrived altered or
the probe itself could not run a case, else 0 (FAIL rows are printed, not an error).
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import gzip
import hashlib
import itertools
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import aiohttp
from aiohttp import web

from bench.bench_core import core_revision
from bench.corpus import lf_corpus
from bench.harness import free_port, process_cpu, stop, wait_listening
from bench.worst_case import CASES, build_case

MIB = 1 << 20
GZIP_CASES = ("gzip-comments", "gzip-typical")
_TICK_RE = re.compile(rb'"t":(\d+)')


# -- the upstream (a child process) ------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Body:
    """A hostile body as the upstream sends it, and its size once decoded."""

    data: bytes
    gzip: bool
    decoded: int


def build_body(name: str, size: int, gzip_size: int) -> Body:
    """The hostile body ``name``: a worst-case input, or a gzip bomb of ``gzip_size`` bytes."""
    if name == "gzip-comments":
        raw = b":\n" * (gzip_size // 2)
    elif name == "gzip-typical":
        raw = lf_corpus(gzip_size / 1e6, seed=1).data
    else:
        raw = build_case(name, size).data
        return Body(raw, False, len(raw))
    return Body(gzip.compress(raw, compresslevel=6, mtime=0), True, len(raw))


def _tick(i: int) -> bytes:
    return (
        b'data: {"id":"chatcmpl-neighbour","object":"chat.completion.chunk","created":1718000000,'
        b'"model":"gpt-4o-mini","choices":[{"index":0,"delta":{"content":" tick'
        + str(i).encode()
        + b'"},"logprobs":null,"finish_reason":null}],"t":'
        + str(time.monotonic_ns()).encode()
        + b"}\n\n"
    )


def make_upstream(bodies: dict[str, Body], write_size: int) -> web.Application:
    """``?kind=neighbour&tick_ms=N``: ticks until the client leaves (10 min at most);
    ``?kind=hostile&case=NAME``: the prebuilt body, in writes of ``write_size`` (0: one)."""

    async def handle(request: web.Request) -> web.StreamResponse:
        q = request.query
        if q.get("kind") == "neighbour":
            tick = float(q.get("tick_ms", "20")) / 1e3
            resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
            await resp.prepare(request)
            loop = asyncio.get_running_loop()
            start = loop.time()
            with contextlib.suppress(ConnectionError):
                for i in range(int(600 / tick)):
                    await resp.write(_tick(i))
                    await asyncio.sleep(max(0.0, start + (i + 1) * tick - loop.time()))
                await resp.write(b"data: [DONE]\n\n")
            return resp
        body = bodies.get(q.get("case", ""))
        if body is None:
            raise web.HTTPNotFound(text="unknown case")
        headers = {
            "Content-Type": "text/event-stream",
            "X-Probe-Sha256": hashlib.sha256(body.data).hexdigest(),
        }
        if body.gzip:
            headers["Content-Encoding"] = "gzip"
        resp = web.StreamResponse(headers=headers)
        await resp.prepare(request)
        step = write_size or len(body.data)
        with contextlib.suppress(ConnectionError):
            for i in range(0, len(body.data), step):
                await resp.write(body.data[i : i + step])
            await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_route("*", "/v1/chat/completions", handle)
    return app


def run_upstream(args: argparse.Namespace) -> int:
    """The ``--upstream`` child: build every body first, then serve until SIGTERM."""
    bodies = {n: build_body(n, args.size, args.gzip_size) for n in args.case}
    web.run_app(
        make_upstream(bodies, args.write_kib * 1024),
        host="127.0.0.1",
        port=args.port,
        access_log=None,
        print=None,
        shutdown_timeout=0.5,
    )
    return 0


# -- the probe ---------------------------------------------------------------------------------


def spawn(cmd: list[str], log_path: str) -> subprocess.Popen[bytes]:
    """``cmd`` as a child, its stderr (JSON log lines, tracebacks) to ``log_path``."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            cmd, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=log
        )


@dataclass
class Neighbour:
    """Arrival times (monotonic s) of the neighbour's reads, and each read's worst lag."""

    arrivals: list[float] = field(default_factory=list)
    lags: list[float] = field(default_factory=list)  # s from the upstream's stamp to arrival
    ticks: int = 0


async def read_neighbour(session: aiohttp.ClientSession, url: str, nb: Neighbour) -> None:
    async with session.get(url) as resp:
        carry = b""
        async for chunk in resp.content.iter_any():
            now_ns = time.monotonic_ns()
            data = carry + chunk
            cut = data.rfind(b"\n\n") + 2  # whole frames only: a stamp may straddle reads
            whole, carry = data[:cut], data[cut:]
            stamps = [int(m) for m in _TICK_RE.findall(whole)]
            if stamps:
                nb.arrivals.append(now_ns / 1e9)
                nb.lags.append((now_ns - min(stamps)) / 1e9)
                nb.ticks += len(stamps)


@dataclass
class Row:
    case: str
    mb_in: float = 0.0
    mb_observed: float = 0.0
    baseline_gap: float = 0.0
    gap: float = 0.0
    lag: float = 0.0
    seconds: float = 0.0
    proxy_cpu: float = 0.0  # CPU s the proxy used while the hostile stream was in flight
    timeout: bool = False
    error: str | None = None
    altered: bool = False


async def _wait_ticks(nb: Neighbour, n: int, within: float) -> None:
    deadline = time.monotonic() + within
    while len(nb.arrivals) < n:
        if time.monotonic() > deadline:
            raise RuntimeError(f"the neighbour stream did not tick ({len(nb.arrivals)} reads)")
        await asyncio.sleep(0.01)


def _max_gap(arrivals: list[float], start: float, end: float) -> float:
    """Largest gap between consecutive arrivals that overlaps [start, end]."""
    worst = 0.0
    for prev, cur in itertools.pairwise(arrivals):
        if cur >= start and prev <= end:
            worst = max(worst, cur - prev)
    return worst


async def run_case(
    name: str, body: Body, up_url: str, args: argparse.Namespace, log_dir: str
) -> Row:
    row = Row(name, len(body.data) / 1e6, body.decoded / 1e6)
    port = free_port()
    log_path = os.path.join(log_dir, f"proxy.{name}.log")
    proc = spawn(
        [
            *(sys.executable, "-m", "sse_proxy", "serve", "--upstream", up_url),
            *("--port", str(port), "--shutdown-grace", "1", "--log-level", "warning"),
        ],
        log_path,
    )
    nb = Neighbour()
    proxy = f"http://127.0.0.1:{port}/v1/chat/completions"
    try:
        await wait_listening(port, proc, f"proxy (log: {log_path})")
        timeout = aiohttp.ClientTimeout(total=None, sock_connect=5)
        async with aiohttp.ClientSession(timeout=timeout, auto_decompress=False) as session:
            nb_task = asyncio.create_task(
                read_neighbour(session, f"{proxy}?kind=neighbour&tick_ms={args.tick_ms:g}", nb)
            )
            try:
                await _wait_ticks(nb, 10, 10.0)
                quiet_start = time.monotonic()
                await asyncio.sleep(args.quiet)
                row.baseline_gap = _max_gap(nb.arrivals, quiet_start, time.monotonic())
                cpu0 = process_cpu(proc.pid) or 0.0
                start = time.monotonic()
                digest = hashlib.sha256()
                expected = ""
                try:
                    async with asyncio.timeout(args.cap):
                        async with session.get(f"{proxy}?kind=hostile&case={name}") as resp:
                            expected = resp.headers.get("X-Probe-Sha256", "")
                            async for chunk in resp.content.iter_any():
                                digest.update(chunk)
                except TimeoutError:
                    row.timeout = True
                end = time.monotonic()
                row.seconds = end - start
                row.proxy_cpu = (process_cpu(proc.pid) or 0.0) - cpu0
                if row.timeout:
                    # Still stalled: the gap so far counts (it is only a lower bound).
                    last = nb.arrivals[-1] if nb.arrivals else start
                    row.gap = max(_max_gap(nb.arrivals, start, end), end - last)
                else:
                    row.altered = digest.hexdigest() != expected
                    await _wait_ticks(nb, len(nb.arrivals) + args.tail_ticks, 10.0)
                    row.gap = _max_gap(nb.arrivals, start, time.monotonic())
                row.lag = max(
                    (lag for t, lag in zip(nb.arrivals, nb.lags, strict=True) if t >= start),
                    default=0.0,
                )
            finally:
                nb_task.cancel()
                with contextlib.suppress(asyncio.CancelledError, aiohttp.ClientError):
                    await nb_task
    except (RuntimeError, aiohttp.ClientError, OSError) as exc:
        row.error = f"{type(exc).__name__}: {exc}"[:200]
    finally:
        stop(proc, timeout=3)
    return row


def print_table(rows: list[Row], limit_ms: float, cap: float) -> list[str]:
    head = (
        f"{'hostile input':<16} {'MB sent':>8} {'MB dec':>7} {'quiet gap':>10} "
        f"{'max gap ms':>11} {'max lag ms':>11} {'took s':>7} {'proxy CPU':>10} {'verdict':>8}"
        "  note"
    )
    print(head)
    print("-" * len(head))
    failed: list[str] = []
    for r in rows:
        ok = r.error is None and not r.timeout and not r.altered and r.gap * 1e3 < limit_ms
        note = ""
        if r.error is not None:
            note = f"ERROR: {r.error}"
        elif r.timeout:
            note = f"FAIL (timeout at {cap:g} s): neighbour still stalled or slowed"
        elif r.altered:
            note = "hostile body ALTERED on the way"
        pre = ">" if r.timeout else ""
        lag = "--" if r.timeout else f"{r.lag * 1e3:,.0f}"  # the stalled tick never arrived
        print(
            f"{r.case:<16} {r.mb_in:8.3f} {r.mb_observed:7.2f} {r.baseline_gap * 1e3:8.0f}ms "
            f"{pre + f'{r.gap * 1e3:,.0f}':>11} {lag:>11} {pre + f'{r.seconds:.2f}':>7} "
            f"{pre + f'{r.proxy_cpu:.2f}s':>10} {'PASS' if ok else 'FAIL':>8}  {note}".rstrip()
        )
        if not ok:
            failed.append(r.case)
    return failed


async def probe(args: argparse.Namespace) -> int:
    up_port = free_port()
    up_url = f"http://127.0.0.1:{up_port}"
    cmd = [
        *(
            sys.executable,
            "-m",
            "bench.probes.probe_neighbour",
            "--upstream",
            "--port",
            str(up_port),
        ),
        *("--size", str(args.size), "--gzip-size", str(args.gzip_size)),
        *("--write-kib", str(args.write_kib)),
        *(a for n in args.case for a in ("--case", n)),
    ]
    limit_ms = args.limit_ms + args.tick_ms
    print(
        f"sse-proxy neighbour probe: Python {platform.python_version()}, {os.cpu_count()} CPUs "
        f"(load average {os.getloadavg()[0]:.1f} at the start, nice "
        f"{os.getpriority(os.PRIO_PROCESS, 0)}); "
        f"sse-proxy at {core_revision()}; {time.strftime('%Y-%m-%d %H:%M UTC', time.gmtime())}\n"
        f"sse-proxy serve --mode passthrough (a fresh proxy per input); neighbour ticks every "
        f"{args.tick_ms:g} ms; hostile inputs ~{args.size / 1e6:g} MB, gzip ones "
        f"{args.gzip_size / MIB:.1f} MiB decoded, each sent "
        + ("in one write" if not args.write_kib else f"in {args.write_kib} KiB writes")
        + f"; cap {args.cap:g} s per input\n"
        f"target: max gap < {args.limit_ms:g} ms + one tick = {limit_ms:g} ms; 'quiet gap' = "
        f"max gap over {args.quiet:g} s before the hostile request (this machine's noise); "
        "'MB dec' = decoded size; 'max lag' = upstream stamp to arrival, worst neighbour tick; "
        "'proxy CPU' = CPU the "
        "proxy used meanwhile (psutil; 10 ms ticks)\n",
        flush=True,
    )
    t_start = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="probe_neighbour.") as log_dir:
        up_log = os.path.join(log_dir, "upstream.log")
        upstream = spawn(cmd, up_log)
        rows: list[Row] = []
        try:
            for attempt in range(4):  # it builds every body first: up to a minute when loaded
                try:
                    await wait_listening(up_port, upstream, f"upstream (log: {up_log})")
                    break
                except RuntimeError:
                    if upstream.poll() is not None or attempt == 3:
                        raise
            for name in args.case:
                body = build_body(name, args.size, args.gzip_size)
                row = await run_case(name, body, up_url, args, log_dir)
                rows.append(row)
                print(
                    f"  ran {name:<16} gap {row.gap * 1e3:9.0f} ms  took {row.seconds:6.2f} s"
                    + ("  (timeout)" if row.timeout else "")
                    + (f"  {row.error}" if row.error else ""),
                    file=sys.stderr,
                    flush=True,
                )
        finally:
            stop(upstream, timeout=5)
    print()
    failed = print_table(rows, limit_ms, args.cap)
    print()
    print(
        f"verdict: {len(rows) - len(failed)} of {len(rows)} inputs PASS"
        + (f"; FAIL: {', '.join(failed)}" if failed else "")
    )
    print(f"(total wall time {time.monotonic() - t_start:.0f} s)")
    return 1 if any(r.error is not None or r.altered for r in rows) else 0


ALL_CASES = (*(c.name for c in CASES), *GZIP_CASES)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(
        prog="python -m bench.probes.probe_neighbour", description=(__doc__ or "").split("\n")[0]
    )
    p.add_argument("--quick", action="store_true", help="~0.2 MB inputs, 10 s cap per input")
    p.add_argument("--case", action="append", choices=ALL_CASES, help="input (repeatable)")
    p.add_argument("--size", type=int, help="bytes per hostile input (1,000,000; quick 200,000)")
    p.add_argument(
        "--gzip-size", type=int, help="decoded bytes of the gzip inputs (9 MiB; quick 5 MiB)"
    )
    p.add_argument(
        "--cap", type=float, help="seconds per input before it is cut off (30; quick 10)"
    )
    p.add_argument("--tick-ms", type=float, default=20.0, help="neighbour tick period")
    p.add_argument("--limit-ms", type=float, default=50.0, help="allowed hold, plus one tick")
    p.add_argument("--quiet", type=float, default=1.0, help="s of baseline before each input")
    p.add_argument("--tail-ticks", type=int, default=5, help="neighbour reads after the end")
    p.add_argument(
        "--write-kib", type=int, default=0, help="upstream write size for hostile bodies (0: one)"
    )
    p.add_argument(
        "--nice",
        type=int,
        default=None,
        help="run the probe and everything it starts at this nice value (negative needs "
        "root): on a loaded shared machine, -5 keeps others' jobs out of the gaps",
    )
    p.add_argument("--upstream", action="store_true", help=argparse.SUPPRESS)
    p.add_argument("--port", type=int, default=0, help=argparse.SUPPRESS)
    args = p.parse_args(argv)
    args.case = list(dict.fromkeys(args.case or ALL_CASES))
    if args.size is None:
        args.size = 200_000 if args.quick else 1_000_000
    if args.gzip_size is None:
        args.gzip_size = 5 * MIB if args.quick else 9 * MIB
    if args.cap is None:
        args.cap = 10.0 if args.quick else 30.0
    if not 100 <= args.size <= 1_040_000:
        p.error("--size must be 100..1,040,000 bytes (inputs must stay under the 1 MiB limit)")
    if args.gzip_size < 1 or args.cap <= 0 or args.tick_ms <= 0 or args.write_kib < 0:
        p.error("--gzip-size, --cap and --tick-ms must be > 0, --write-kib >= 0")
    if args.nice is not None and not args.upstream:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, args.nice)  # inherited by every child
        except OSError as exc:
            p.error(f"--nice {args.nice}: {exc.strerror}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    if args.upstream:
        return run_upstream(args)
    return asyncio.run(probe(args))


if __name__ == "__main__":
    sys.exit(main())
