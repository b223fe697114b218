"""Backpressure probe: a slow client must not make the proxy buffer what upstream pushes.

An in-process upstream tries to push ``--mb`` MB of OpenAI-shaped SSE per stream as fast
as TCP lets it; ``--streams`` clients read through a real ``sse-proxy serve`` subprocess at
``--rate-kib`` KiB/s each for ``--seconds``. The proxy's RSS (``VmRSS`` of
psutil) is sampled throughout; printed: baseline, peak, growth per stream,
and how far upstream got ahead of the client (what sits in buffers along the chain).

Hand-run, not a test::

    .venv/bin/python -m bench.probes.probe_backpressure                  # ~65 s
    .venv/bin/python -m bench.probes.probe_backpressure --streams 8 --seconds 30

Exit status 1 when the growth per stream exceeds ``--max-growth-mib``, else 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

from aiohttp import web

from bench.harness import free_port, rss_kib, stop, wait_listening

MIB = 1024 * 1024


@dataclass
class Upstream:
    """Pushes OpenAI chat chunks until ``limit`` bytes per stream; counts what TCP took."""

    limit: int
    content: str
    pushed: dict[int, int] = field(default_factory=dict)
    finished: int = 0

    def frame(self, i: int) -> bytes:
        chunk = {
            "id": "chatcmpl-probe0000000000000000001",
            "object": "chat.completion.chunk",
            "created": 1_700_000_000,
            "model": "gpt-4o-mini-2024-07-18",
            "system_fingerprint": "fp_probe",
            "choices": [
                {
                    "index": 0,
                    "delta": {"content": self.content.format(i=i % 1000)},
                    "logprobs": None,
                    "finish_reason": None,
                }
            ],
        }
        return b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n"

    async def handle(self, request: web.Request) -> web.StreamResponse:
        key = int(request.query.get("n", "0"))
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        sent, i = 0, 0
        self.pushed[key] = 0
        with contextlib.suppress(ConnectionError):
            while sent < self.limit:
                batch = b"".join(self.frame(i + j) for j in range(64))  # ~16 KiB a write
                i += 64
                await resp.write(batch)  # waits while the proxy does not read
                sent += len(batch)
                self.pushed[key] = sent
            await resp.write(b"data: [DONE]\n\n")
            await resp.write_eof()
            self.finished += 1
        return resp


async def start_upstream(up: Upstream) -> tuple[web.AppRunner, str]:
    app = web.Application()
    app.router.add_get("/v1/chat/completions", up.handle)
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    return runner, f"http://127.0.0.1:{runner.addresses[0][1]}"


def kernel_queues(pid: int) -> tuple[int, int]:
    """Bytes queued in the kernel on ``pid``'s TCP sockets: (receive, send).

    From /proc/net/tcp{,6} (``tx_queue:rx_queue``), matched by socket inode to the fds of
    ``pid``: what the kernel holds for the proxy, which its RSS does not count.
    """
    inodes = set()
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:["):
                inodes.add(target[8:-1])
    rx = tx = 0
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        with contextlib.suppress(OSError), open(table, encoding="ascii") as f:
            next(f)
            for line in f:
                cols = line.split()
                if cols[9] in inodes:
                    t, r = cols[4].split(":")
                    tx += int(t, 16)
                    rx += int(r, 16)
    return rx, tx


def spawn_proxy(upstream: str, port: int, log_path: str) -> subprocess.Popen[bytes]:
    """`sse-proxy serve` as a child, its JSON log lines to ``log_path``."""
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [
                *(sys.executable, "-m", "sse_proxy", "serve", "--upstream", upstream),
                *("--port", str(port), "--shutdown-grace", "1", "--log-level", "info"),
            ],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


async def start_proxy_process(upstream: str, log_path: str) -> tuple[subprocess.Popen[bytes], str]:
    port = free_port()
    proc = spawn_proxy(upstream, port, log_path)
    await wait_listening(port, proc, f"proxy (see {log_path})")
    return proc, f"http://127.0.0.1:{port}"


async def slow_client(url: str, n: int, rate: float, seconds: float, got: dict[int, int]) -> None:
    """GET a stream and read it at ``rate`` bytes/s (token bucket) for ``seconds``."""
    host, port = url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port), limit=16 * 1024)
    writer.write(
        f"GET /v1/chat/completions?n={n} HTTP/1.1\r\nHost: {host}\r\n"
        "Accept: text/event-stream\r\n\r\n".encode()
    )
    await writer.drain()
    got[n] = 0
    start = time.monotonic()
    try:
        while (now := time.monotonic()) - start < seconds:
            ahead = got[n] / rate - (now - start)
            if ahead > 0:
                await asyncio.sleep(min(ahead, seconds - (now - start)))
                continue
            data = await reader.read(8192)
            if not data:
                break
            got[n] += len(data)
    finally:
        writer.close()
        with contextlib.suppress(OSError):
            await writer.wait_closed()


async def warm_up(url: str) -> None:
    """One short stream first, so the baseline includes the proxy's one-off state."""
    got: dict[int, int] = {}
    await slow_client(url, 10_000, 50 * MIB, 0.5, got)


async def main(args: argparse.Namespace) -> int:
    up = Upstream(limit=int(args.mb * 1_000_000), content=args.content)
    up_runner, up_url = await start_upstream(up)
    log_path = os.path.join(tempfile.gettempdir(), f"probe_backpressure.{os.getpid()}.log")
    proc, url = await start_proxy_process(up_url, log_path)
    pid = proc.pid
    rate = args.rate_kib * 1024
    try:
        await warm_up(url)
        await asyncio.sleep(1.0)
        baseline = rss_kib(pid)
        print(
            f"proxy pid {pid}: baseline RSS {baseline / 1024:.1f} MiB; {args.streams} stream(s), "
            f"client {args.rate_kib:g} KiB/s for {args.seconds:g} s, upstream pushing "
            f"{args.mb:g} MB each"
        )
        got: dict[int, int] = {}
        clients = asyncio.gather(
            *(slow_client(url, n, rate, args.seconds, got) for n in range(args.streams))
        )
        samples: list[int] = []
        queued: list[tuple[int, int]] = []
        start = time.monotonic()
        next_print = 0.0
        while not clients.done():
            samples.append(rss_kib(pid))
            queued.append(kernel_queues(pid))
            elapsed = time.monotonic() - start
            if elapsed >= next_print:
                read = sum(got.values())
                pushed = sum(v for k, v in up.pushed.items() if k < args.streams)
                rx, tx = queued[-1]
                print(
                    f"  t={elapsed:5.1f}s  client read {read / MIB:7.2f} MiB  "
                    f"upstream pushed {pushed / MIB:7.2f} MiB  RSS {samples[-1] / 1024:6.1f} MiB  "
                    f"kernel rx/tx queues {rx / MIB:5.2f}/{tx / MIB:5.2f} MiB"
                )
                next_print += 5.0
            with contextlib.suppress(TimeoutError):
                async with asyncio.timeout(args.sample):
                    await asyncio.shield(clients)
        await clients
        await asyncio.sleep(1.0)
        after = rss_kib(pid)
        peak = max(*samples, after)  # closing a stream counts too
        growth = (peak - baseline) / 1024
        per_stream = growth / args.streams
        read = sum(got.values())
        pushed = sum(v for k, v in up.pushed.items() if k < args.streams)
        print()
        print(f"baseline RSS        {baseline / 1024:8.1f} MiB")
        print(f"peak RSS            {peak / 1024:8.1f} MiB")
        print(f"growth              {growth:8.1f} MiB  ({per_stream:.2f} MiB per stream)")
        print(f"RSS after close     {after / 1024:8.1f} MiB")
        rx_peak, tx_peak = max(q[0] for q in queued), max(q[1] for q in queued)
        print(
            f"kernel queues       {rx_peak / MIB:8.2f} MiB rx, {tx_peak / MIB:.2f} MiB tx at peak "
            "on the proxy's sockets (kernel memory, not RSS)"
        )
        print(f"client read         {read / MIB:8.2f} MiB  ({read / MIB / args.seconds:.3f} MiB/s)")
        print(
            f"upstream pushed     {pushed / MIB:8.2f} MiB of {args.streams * args.mb:g} MB "
            f"(ahead of the client by {(pushed - read) / MIB:.2f} MiB: socket buffers)"
        )
        ok = per_stream <= args.max_growth_mib and up.finished == 0
        if up.finished:
            print(f"upstream finished {up.finished} stream(s): the chain buffered everything")
        print(
            f"verdict: {'PASS' if ok else 'FAIL'} "
            f"(target <= {args.max_growth_mib:g} MiB growth per stream)"
        )
        return 0 if ok else 1
    finally:
        stop(proc, timeout=10)
        await up_runner.cleanup()
        with contextlib.suppress(OSError):
            os.unlink(log_path)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--mb", type=float, default=50.0, help="MB upstream tries to push per stream")
    p.add_argument("--rate-kib", type=float, default=64.0, help="client read rate, KiB/s")
    p.add_argument("--seconds", type=float, default=60.0, help="how long the clients read")
    p.add_argument("--streams", type=int, default=1, help="concurrent slow streams")
    p.add_argument(
        "--content",
        default=" token{i} café 🙂",
        help="each delta's content ({i}: a counter); '' sends no text at all",
    )
    p.add_argument("--sample", type=float, default=0.25, help="RSS sampling period, s")
    p.add_argument("--max-growth-mib", type=float, default=4.0, help="target per stream")
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
