"""Hand-run benchmark: SSE throughput through `sse-proxy serve --workers N` for N = 1, 2, 4.

Not a test: run it by hand and read the figures::

    .venv/bin/python -m bench.bench_workers [--workers 1,2,4] [--concurrency 16]
                                            [--seconds 6] [--events 2000]

A fast upstream runs in its own process (a raw asyncio server that answers every request
with the same prebuilt OpenAI-style stream of ``--events`` chunks, keep-alive, no parsing
beyond the request head). For each worker count the real ``sse-proxy serve`` runs as a
subprocess on a fixed loopback port, and this process keeps ``--concurrency`` streams in
flight for ``--seconds`` (after a warm-up), each on a fresh connection so the kernel's
SO_REUSEPORT hashing spreads them over the workers. Every response is checked (length and
the ``[DONE]`` sentinel); the figure is events per second relayed and validated. The worker
counts take turns over ``--rounds`` rounds and each keeps its best, so that background
load on a shared machine does not favour one of them; CPU use of each role is printed too.

All three roles share the machine: on a 2-core machine 2 workers vs 1 is the meaningful
point (4 workers only oversubscribe the cores that the upstream and the load generator
also need). The run exits 1 if 2 workers are not at least ``--min-ratio`` times faster.
The figures of a run are recorded in deploy/README.md ("Throughput with workers").
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import multiprocessing
import os
import platform
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from bench.harness import free_port, process_cpu

SSE_PROXY = str(Path(sys.executable).with_name("sse-proxy"))


def _read_shared(fd: int) -> bytes:
    """The log the workers write, read without moving the offset they share with it (a
    ``seek(0)`` here between two of their writes would make the next overwrite the start)."""
    parts, at = [], 0
    while block := os.pread(fd, 1 << 16, at):
        parts.append(block)
        at += len(block)
    return b"".join(parts)


def build_stream(events: int) -> bytes:
    """An OpenAI Chat Completions stream of ``events`` content chunks plus ``[DONE]``."""
    words = ("The", " quick", " brown", " café", " 🙂", " 日本", "語", " naïve", " fox")
    out = bytearray()
    for i in range(events):
        chunk = {
            "id": "chatcmpl-bench",
            "object": "chat.completion.chunk",
            "created": 1700000000,
            "model": "gpt-bench",
            "choices": [
                {"index": 0, "delta": {"content": words[i % len(words)]}, "finish_reason": None}
            ],
        }
        out += b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"
    out += b"data: [DONE]\n\n"
    return bytes(out)


# ------------------------------------------------------------------- the upstream


def _run_upstream(port: int, events: int) -> None:  # pragma: no cover - child process
    body = build_stream(events)
    head = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nCache-Control: no-cache\r\n"
        b"Content-Length: " + str(len(body)).encode() + b"\r\n\r\n"
    )

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        try:
            while True:
                request = await reader.readuntil(b"\r\n\r\n")
                length = 0
                for line in request.split(b"\r\n"):
                    if line[:15].lower() == b"content-length:":
                        length = int(line[15:])
                if length:
                    await reader.readexactly(length)
                writer.write(head + body)
                await writer.drain()
        except (asyncio.IncompleteReadError, ConnectionError, asyncio.LimitOverrunError):
            pass
        finally:
            writer.close()

    async def main() -> None:
        server = await asyncio.start_server(handle, "127.0.0.1", port, backlog=1024)
        stop = asyncio.Event()
        loop = asyncio.get_running_loop()
        loop.add_signal_handler(signal.SIGTERM, stop.set)
        async with server:
            await stop.wait()

    asyncio.run(main())


# ------------------------------------------------------------------------ the load


@dataclass
class Result:
    workers: int
    streams: int
    seconds: float
    events: int
    bytes: int
    proxy_cpu: float  # CPU seconds per second, all workers together
    load_cpu: float  # this process (the load generator)
    upstream_cpu: float

    @property
    def events_per_s(self) -> float:
        return self.events / self.seconds

    @property
    def mb_per_s(self) -> float:
        return self.bytes / self.seconds / 1e6

    @property
    def events_per_cpu_s(self) -> float:
        """Events per CPU second of the proxy processes: what one core's worth buys."""
        return self.events_per_s / self.proxy_cpu if self.proxy_cpu else 0.0


async def _load(
    base: str, concurrency: int, seconds: float, expected: bytes, events: int
) -> tuple[int, int, int, float]:
    """Keep ``concurrency`` streams in flight for ``seconds``; (streams, events, bytes, t)."""
    connector = aiohttp.TCPConnector(force_close=True, limit=0)
    timeout = aiohttp.ClientTimeout(total=60)
    done = failures = received = 0
    payload = {"model": "gpt-bench", "stream": True, "messages": []}
    async with aiohttp.ClientSession(connector=connector, timeout=timeout) as session:
        started = time.perf_counter()
        deadline = started + seconds

        async def client() -> None:
            nonlocal done, failures, received
            while time.perf_counter() < deadline:
                try:
                    async with session.post(base + "/v1/chat/completions", json=payload) as resp:
                        body = await resp.read()
                except aiohttp.ClientError:
                    failures += 1
                    continue
                if resp.status != 200 or len(body) != len(expected) or body != expected:
                    failures += 1
                    continue
                done += 1
                received += len(body)

        await asyncio.gather(*(client() for _ in range(concurrency)))
        elapsed = time.perf_counter() - started
    if failures:
        raise SystemExit(f"{failures} streams failed or came back altered")
    return done, done * events, received, elapsed


def _cpu_of(pid: int) -> float:
    """User + system CPU seconds of ``pid`` so far (0 once it is gone)."""
    return process_cpu(pid) or 0.0


def _own_cpu() -> float:
    t = os.times()
    return t.user + t.system


def _wait_healthy(url: str, proc: subprocess.Popen[bytes], timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"sse-proxy exited early with {proc.returncode}")
        try:
            with urllib.request.urlopen(url, timeout=1) as resp:
                if resp.status == 200:
                    return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"sse-proxy not healthy at {url}")


def run_one(
    workers: int,
    upstream: str,
    upstream_pid: int,
    concurrency: int,
    seconds: float,
    warmup: float,
    events: int,
) -> Result:
    port = free_port()
    env = {k: v for k, v in os.environ.items() if not k.startswith("SSE_PROXY_")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(
            [
                *(SSE_PROXY, "serve", "--upstream", upstream),
                *("--port", str(port), "--workers", str(workers)),
            ],
            stdout=subprocess.DEVNULL,
            stderr=log,
            env=env,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            _wait_healthy(base + "/_sse-proxy/health", proc)
            # Every worker must be up before measuring (each logs proxy.started).
            pids: list[int] = []
            deadline = time.monotonic() + 30
            while time.monotonic() < deadline and len(pids) < workers:
                pids = [
                    json.loads(line)["pid"]
                    for line in _read_shared(log.fileno()).splitlines()
                    if b'"proxy.started"' in line
                ]
                time.sleep(0.1)
            expected = build_stream(events)
            if warmup:
                asyncio.run(_load(base, concurrency, warmup, expected, events))
            before = (sum(_cpu_of(pid) for pid in pids), _own_cpu(), _cpu_of(upstream_pid))
            streams, n_events, n_bytes, elapsed = asyncio.run(
                _load(base, concurrency, seconds, expected, events)
            )
            after = (sum(_cpu_of(pid) for pid in pids), _own_cpu(), _cpu_of(upstream_pid))
            cpu = [(b - a) / elapsed for a, b in zip(before, after, strict=True)]
        finally:
            proc.send_signal(signal.SIGTERM)
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        errors = [
            line
            for line in _read_shared(log.fileno()).decode("utf-8", "replace").splitlines()
            if '"level":"error"' in line
        ]
    if errors:
        raise SystemExit("sse-proxy logged errors:\n" + "\n".join(errors[:5]))
    return Result(workers, streams, elapsed, n_events, n_bytes, *cpu)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--workers", default="1,2,4", help="comma-separated worker counts")
    parser.add_argument("--concurrency", type=int, default=16, help="streams in flight")
    parser.add_argument("--seconds", type=float, default=6.0, help="measured time per run")
    parser.add_argument("--warmup", type=float, default=1.5, help="unmeasured time per run")
    parser.add_argument("--events", type=int, default=2000, help="events per stream")
    parser.add_argument(
        "--rounds", type=int, default=3, help="worker counts take turns; best round counts"
    )
    parser.add_argument(
        "--min-ratio", type=float, default=1.2, help="2 workers vs 1 must reach this"
    )
    args = parser.parse_args(argv)
    counts = [int(x) for x in args.workers.split(",")]

    up_port = free_port()
    ctx = multiprocessing.get_context("spawn")
    upstream_proc = ctx.Process(target=_run_upstream, args=(up_port, args.events), daemon=True)
    upstream_proc.start()
    upstream = f"http://127.0.0.1:{up_port}"
    body = build_stream(args.events)
    print(
        f"sse-proxy --workers benchmark: {os.cpu_count()} CPUs, {platform.python_version()}, "
        f"{args.events} events/stream ({len(body) / 1e3:.0f} kB), "
        f"{args.concurrency} streams in flight, {args.seconds:.0f} s per run, "
        "upstream and load generator in their own processes on the same machine"
    )
    best: dict[int, Result] = {}
    try:
        for _ in range(100):  # the upstream takes a moment to listen
            with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", up_port)):
                break
            time.sleep(0.05)
        # The worker counts take turns within each round, so that background load on a
        # shared machine hits them alike; each keeps its best round.
        for round_no in range(1, args.rounds + 1):
            line = []
            for workers in counts:
                assert upstream_proc.pid is not None
                result = run_one(
                    workers,
                    upstream,
                    upstream_proc.pid,
                    args.concurrency,
                    args.seconds,
                    args.warmup,
                    args.events,
                )
                line.append(f"{workers}w {result.events_per_s:,.0f}/s")
                if workers not in best or result.events_per_s > best[workers].events_per_s:
                    best[workers] = result
            print(f"round {round_no}: " + ", ".join(line), flush=True)
    finally:
        if upstream_proc.pid is not None:
            os.kill(upstream_proc.pid, signal.SIGTERM)
        upstream_proc.join(10)

    results = [best[w] for w in counts]
    base = next((r for r in results if r.workers == 1), results[0])
    print()
    print(
        f"{'workers':>7}  {'streams':>7}  {'events/s':>10}  {'MB/s':>6}  {'vs 1':>6}"
        f"  {'CPU: proxy':>10}  {'load gen':>8}  {'upstream':>8}  {'events/proxy CPU-s':>18}"
    )
    for r in results:
        ratio = r.events_per_s / base.events_per_s
        print(
            f"{r.workers:>7}  {r.streams:>7}  {r.events_per_s:>10,.0f}  {r.mb_per_s:>6.1f}"
            f"  {ratio:>5.2f}x  {r.proxy_cpu:>10.2f}  {r.load_cpu:>8.2f}  {r.upstream_cpu:>8.2f}"
            f"  {r.events_per_cpu_s:>18,.0f}"
        )
    print("(CPU: cores busy, i.e. CPU seconds per wall-clock second, all of a role's processes)")
    loaded = os.getloadavg()[0] if hasattr(os, "getloadavg") else 0.0
    print(f"load average at the end: {loaded:.2f} on {os.cpu_count()} cores")
    two = next((r for r in results if r.workers == 2), None)
    cpus = os.cpu_count() or 1
    if cpus <= 2:
        print(
            f"\nThis machine has {cpus} cores shared by the proxy, the upstream and the load "
            "generator: 2 workers vs 1 is the meaningful comparison here; more workers than "
            "cores only add contention."
        )
    if two is not None and base.workers == 1:
        ratio = two.events_per_s / base.events_per_s
        verdict = "OK" if ratio >= args.min_ratio else "FAIL"
        print(f"2 workers vs 1: {ratio:.2f}x (needs >= {args.min_ratio:.2f}x): {verdict}")
        if ratio < args.min_ratio:
            return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
