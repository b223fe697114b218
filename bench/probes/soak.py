"""Soak: sustained concurrent streams for minutes; the proxy's RSS and open fds stay flat.

Starts the built-in mock upstream (``sse-proxy mock-upstream``) and a real
``sse-proxy serve`` as subprocesses, then keeps ``--concurrency`` clients streaming through
the proxy for ``--minutes``: OpenAI chat streams (checked byte-identical to
:func:`sse_proxy.tools.fixtures.openai_chat_stream`) alternating with larger echoed SSE bodies
(checked byte-identical too). Every ``--every`` seconds it prints streams completed,
throughput (events/s, MB/s), the proxy's RSS and its open fds (psutil). At the
end it compares the first and last thirds of the run and checks the proxy's log: one
``stream.summary`` per stream, all ``ended_by=upstream_eof``.

Hand-run, not a test::

    .venv/bin/python -m bench.probes.soak                      # 2 minutes
    .venv/bin/python -m bench.probes.soak --minutes 10 --concurrency 100

Exit status 1 on any wrong byte, missing summary, or RSS/fd growth past the thresholds.
"""

from __future__ import annotations

import argparse
import asyncio
import collections
import contextlib
import hashlib
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field

import aiohttp

from bench.harness import free_port, open_fds, rss_kib, stop, wait_listening
from sse_proxy.tools import fixtures

MB = 1_000_000
MIB = 1024 * 1024
CHAT = fixtures.openai_chat_stream()
CHAT_SHA = hashlib.sha256(CHAT).digest()


def echo_body(n: int) -> bytes:
    """~32 KB of SSE frames with multi-byte text, distinct per ``n``."""
    return b"".join(
        b'id: %d\ndata: {"n":%d,"i":%d,"text":"caf\xc3\xa9 \xf0\x9f\x99\x82 '
        b'\xe6\x97\xa5\xe6\x9c\xac %s"}\n\n' % (j, n, j, b"x" * 40)
        for j in range(300)
    )


def spawn(args: list[str], log_path: str) -> subprocess.Popen[bytes]:
    with open(log_path, "wb") as log:
        return subprocess.Popen(
            [sys.executable, "-m", "sse_proxy", *args],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=log,
        )


@dataclass
class Totals:
    streams: int = 0
    events: int = 0
    bytes: int = 0
    wrong: int = 0
    errors: collections.Counter[str] = field(default_factory=collections.Counter)


async def worker(
    client: aiohttp.ClientSession, url: str, w: int, deadline: float, totals: Totals
) -> None:
    """Stream back to back until ``deadline``: chat, echo, chat, echo, ..."""
    n = 0
    while time.monotonic() < deadline:
        n += 1
        try:
            if n % 2:
                request = client.post(
                    url + "/v1/chat/completions",
                    json={"stream": True},
                    headers={"X-Mock-Seed": str(w * 1_000_003 + n)},
                )
                want = CHAT_SHA
            else:
                body = echo_body(w * 1_000_003 + n)
                request = client.post(url + "/sse/raw?chunk=4096", data=body)
                want = hashlib.sha256(body).digest()
            async with request as resp:
                got = await resp.read()
            if resp.status != 200 or hashlib.sha256(got).digest() != want:
                totals.wrong += 1
            totals.streams += 1
            totals.events += got.count(b"\n\n")
            totals.bytes += len(got)
        except (aiohttp.ClientError, OSError, TimeoutError) as exc:
            totals.errors[type(exc).__name__] += 1


def check_log(path: str, streams: int) -> tuple[bool, str]:
    """One stream.summary per stream, all ended by upstream_eof; no error lines."""
    ended: collections.Counter[str] = collections.Counter()
    bad = 0
    with open(path, "rb") as f:
        for raw in f:
            try:
                line = json.loads(raw)
            except ValueError:
                bad += 1
                continue
            if line.get("event") == "stream.summary":
                ended[line.get("ended_by")] += 1
            elif line.get("level") in ("error", "critical"):
                bad += 1
    total = sum(ended.values())
    ok = total == streams and set(ended) <= {"upstream_eof"} and bad == 0
    return ok, f"{total} summaries for {streams} streams, ended_by {dict(ended)}, {bad} bad lines"


def thirds(values: list[float]) -> tuple[list[float], list[float]]:
    k = max(1, len(values) // 3)
    return values[:k], values[-k:]


async def main(args: argparse.Namespace) -> int:
    workdir = tempfile.mkdtemp(prefix="sse-proxy-soak-")
    up_port, port = free_port(), free_port()
    upstream = spawn(["mock-upstream", "--port", str(up_port)], os.path.join(workdir, "mock.log"))
    proxy_log = os.path.join(workdir, "proxy.log")
    proxy = spawn(
        [
            *("serve", "--upstream", f"http://127.0.0.1:{up_port}", "--port", str(port)),
            *("--log-level", "info", "--shutdown-grace", "5"),
        ],
        proxy_log,
    )
    url = f"http://127.0.0.1:{port}"
    totals = Totals()
    rows: list[tuple[float, int, int]] = []  # (t, rss KiB, fds)
    try:
        await wait_listening(up_port, upstream, "mock upstream")
        await wait_listening(port, proxy, "proxy")
        print(
            f"soak: {args.concurrency} concurrent streams for {args.minutes:g} min through "
            f"proxy pid {proxy.pid} (logs in {workdir})"
        )
        print(
            f"{'t_s':>6}{'streams':>9}{'/s':>7}{'events/s':>10}{'MB/s':>7}"
            f"{'RSS_MiB':>9}{'fds':>6}{'wrong':>7}{'errors':>8}"
        )
        start = time.monotonic()
        deadline = start + args.minutes * 60
        connector = aiohttp.TCPConnector(limit=0)
        async with aiohttp.ClientSession(connector=connector) as client:
            workers = asyncio.gather(
                *(worker(client, url, w, deadline, totals) for w in range(args.concurrency))
            )
            last = (start, 0, 0, 0)
            while not workers.done():
                with contextlib.suppress(TimeoutError):
                    async with asyncio.timeout(args.every):
                        await asyncio.shield(workers)
                now = time.monotonic()
                rss, fds = rss_kib(proxy.pid), open_fds(proxy.pid)
                rows.append((now - start, rss, fds))
                dt = now - last[0]
                if dt < 1.0:  # the final partial interval: sampled, too short to rate
                    continue
                streams_s = (totals.streams - last[1]) / dt
                events_s = (totals.events - last[2]) / dt
                mb_s = (totals.bytes - last[3]) / dt / MB
                print(
                    f"{now - start:6.0f}{totals.streams:9d}{streams_s:7.0f}{events_s:10.0f}"
                    f"{mb_s:7.2f}{rss / 1024:9.1f}{fds:6d}{totals.wrong:7d}"
                    f"{sum(totals.errors.values()):8d}"
                )
                last = (now, totals.streams, totals.events, totals.bytes)
            await workers
        elapsed = time.monotonic() - start
        await asyncio.sleep(0.5)
        idle_fds = open_fds(proxy.pid)
    finally:
        code = stop(proxy)
        stop(upstream)

    rss_first, rss_last = thirds([r[1] / 1024 for r in rows])
    fds_first, fds_last = thirds([float(r[2]) for r in rows])
    rss_growth = statistics.mean(rss_last) - statistics.mean(rss_first)
    fds_growth = max(fds_last) - max(fds_first)
    log_ok, log_note = check_log(proxy_log, totals.streams)
    rss_ok = rss_growth <= max(args.rss_slack_mib, 0.05 * statistics.mean(rss_first))
    fds_ok = fds_growth <= args.fd_slack
    print()
    print(
        f"{totals.streams} streams in {elapsed:.0f} s: {totals.streams / elapsed:.0f} streams/s, "
        f"{totals.events / elapsed:.0f} events/s, {totals.bytes / elapsed / MB:.2f} MB/s; "
        f"{totals.wrong} wrong, errors {dict(totals.errors) or 0}"
    )
    print(
        f"RSS MiB  first third mean {statistics.mean(rss_first):.1f}, "
        f"last third mean {statistics.mean(rss_last):.1f} (growth {rss_growth:+.1f}), "
        f"max {max(r[1] for r in rows) / 1024:.1f}"
    )
    print(
        f"open fds first third max {max(fds_first):.0f}, last third max {max(fds_last):.0f} "
        f"(growth {fds_growth:+.0f}); {idle_fds} once idle"
    )
    print(f"log: {log_note}; proxy exit status {code}")
    ok = totals.wrong == 0 and not totals.errors and log_ok and rss_ok and fds_ok and code == 0
    print(
        f"verdict: {'FLAT' if rss_ok and fds_ok else 'GROWING'}, "
        f"{'all streams intact' if totals.wrong == 0 and not totals.errors else 'BROKEN STREAMS'}"
        f" -> {'PASS' if ok else 'FAIL'}"
    )
    if ok:
        for name in os.listdir(workdir):
            os.unlink(os.path.join(workdir, name))
        os.rmdir(workdir)
    return 0 if ok else 1


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--minutes", type=float, default=2.0, help="how long to soak")
    p.add_argument("--concurrency", type=int, default=50, help="concurrent streams")
    p.add_argument("--every", type=float, default=5.0, help="seconds between report lines")
    p.add_argument("--rss-slack-mib", type=float, default=5.0, help="allowed RSS growth")
    p.add_argument("--fd-slack", type=int, default=5, help="allowed growth of peak fds")
    return p.parse_args(argv)


if __name__ == "__main__":
    sys.exit(asyncio.run(main(parse_args())))
