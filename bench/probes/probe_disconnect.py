"""Disconnect probe: how soon after a client hangs up does the proxy close its upstream?

A raw in-process upstream notes, per connection, the moment the proxy closed it (EOF or
reset on its read side); clients talk to a real ``sse-proxy serve`` subprocess over plain
sockets and hang up at one of three points:

- ``before_headers``: the upstream has the request but has sent nothing yet;
- ``before_first_byte``: the upstream sent its response headers, no body byte yet;
- ``after_first_byte``: the upstream is streaming one event every 50 ms.

Prints min / median / p95 / max in ms per phase over ``--trials`` trials.

Hand-run, not a test::

    .venv/bin/python -m bench.probes.probe_disconnect                 # ~10 s
    .venv/bin/python -m bench.probes.probe_disconnect --trials 100

Exit status 1 when any trial took longer than ``--limit-ms`` (default 1000), else 0.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import statistics
import subprocess
import sys
import time
from dataclasses import dataclass, field

from bench.harness import free_port, stop, wait_listening

PHASES = ("before_headers", "before_first_byte", "after_first_byte")
HEAD = (
    b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
    b"Cache-Control: no-cache\r\nTransfer-Encoding: chunked\r\n\r\n"
)


def chunk(data: bytes) -> bytes:
    return b"%x\r\n%s\r\n" % (len(data), data)


def event(i: int) -> bytes:
    return b'data: {"choices":[{"index":0,"delta":{"content":"t%d"}}]}\n\n' % i


@dataclass
class Conn:
    """One upstream connection: when the proxy closed it."""

    closed_at: float | None = None
    closed: asyncio.Event = field(default_factory=asyncio.Event)


class Upstream:
    """Serves every request per the phase named in its path; records closes."""

    def __init__(self) -> None:
        self.accepted: asyncio.Queue[Conn] = asyncio.Queue()
        self.tasks: set[asyncio.Task[None]] = set()

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        assert task is not None
        self.tasks.add(task)
        conn = Conn()
        try:
            head = await reader.readuntil(b"\r\n\r\n")
            phase = head.split(b" ", 2)[1].decode().strip("/")
            await self.accepted.put(conn)
            watcher = asyncio.create_task(self.watch(reader, conn))
            if phase != "before_headers":
                writer.write(HEAD)
                await writer.drain()
            i = 0
            while phase == "after_first_byte" and not conn.closed.is_set():
                writer.write(chunk(event(i)))
                await writer.drain()
                i += 1
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(0.05):
                        await conn.closed.wait()
            await watcher
        except (ConnectionError, asyncio.IncompleteReadError):
            self.mark(conn)
        finally:
            writer.close()
            with contextlib.suppress(Exception):
                await writer.wait_closed()
            self.tasks.discard(task)

    async def watch(self, reader: asyncio.StreamReader, conn: Conn) -> None:
        with contextlib.suppress(ConnectionError):
            while await reader.read(65536):
                pass
        self.mark(conn)

    @staticmethod
    def mark(conn: Conn) -> None:
        if conn.closed_at is None:
            conn.closed_at = time.monotonic()
            conn.closed.set()


def spawn_proxy(upstream: str, port: int) -> subprocess.Popen[bytes]:
    return subprocess.Popen(
        [
            *(sys.executable, "-m", "sse_proxy", "serve", "--upstream", upstream),
            *("--port", str(port), "--idle-timeout", "60", "--log-level", "warning"),
        ],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


async def read_until(reader: asyncio.StreamReader, marker: bytes) -> None:
    seen = b""
    while marker not in seen:
        more = await reader.read(4096)
        if not more:
            raise RuntimeError(f"proxy closed before {marker!r}")
        seen += more


async def trial(port: int, upstream: Upstream, phase: str) -> float:
    """One client that hangs up at ``phase``; the upstream's close latency in ms."""
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    writer.write(f"GET /{phase} HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".encode())
    await writer.drain()
    conn = await upstream.accepted.get()
    if phase == "before_headers":
        await asyncio.sleep(0.02)  # the proxy is waiting for the upstream's headers
    else:
        await read_until(reader, b"\r\n\r\n")
        if phase == "after_first_byte":
            await read_until(reader, b"data:")
    writer.close()
    hung_up = time.monotonic()
    async with asyncio.timeout(10):
        await conn.closed.wait()
    assert conn.closed_at is not None
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return (conn.closed_at - hung_up) * 1000


async def main(args: argparse.Namespace) -> int:
    upstream = Upstream()
    server = await asyncio.start_server(upstream.handle, "127.0.0.1", 0)
    up_port = server.sockets[0].getsockname()[1]
    port = free_port()
    proc = spawn_proxy(f"http://127.0.0.1:{up_port}", port)
    worst = 0.0
    try:
        await wait_listening(port, proc)
        for _ in range(3):  # warm-up, not counted
            await trial(port, upstream, "after_first_byte")
        print(f"client hang-up -> upstream connection closed, ms, {args.trials} trials each")
        print(f"{'phase':<20}{'min':>8}{'median':>8}{'p95':>8}{'max':>8}")
        for phase in PHASES:
            ms = [await trial(port, upstream, phase) for _ in range(args.trials)]
            ms.sort()
            p95 = ms[min(len(ms) - 1, round(0.95 * (len(ms) - 1)))]
            worst = max(worst, ms[-1])
            print(f"{phase:<20}{ms[0]:8.2f}{statistics.median(ms):8.2f}{p95:8.2f}{ms[-1]:8.2f}")
    finally:
        stop(proc)
        server.close()
        await server.wait_closed()
        if upstream.tasks:  # the proxy is gone, so every connection ends by itself
            await asyncio.wait(set(upstream.tasks), timeout=2.0)
    ok = worst <= args.limit_ms
    print(f"verdict: {'PASS' if ok else 'FAIL'} (worst {worst:.2f} ms, limit {args.limit_ms:g} ms)")
    return 0 if ok else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--trials", type=int, default=30, help="trials per phase")
    p.add_argument("--limit-ms", type=float, default=1000.0, help="target per trial")
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
