"""Hand-run benchmark of sse-proxy against other ways of moving an SSE stream over loopback.

Not a test: run it by hand and read the figures (``bench/proxy_README.md`` says how)::

    .venv/bin/python -m bench.bench_proxy [--quick] [--levels 1,50,500] [--events N]
    .venv/bin/python -m bench.bench_proxy --profile 10     # py-spy of sse-proxy at 50 streams
    .venv/bin/python -m bench.bench_proxy --peers [--quick] [--repeat 3]   # issue 9 (below)

Contenders, measured side by side in one run against the same upstream:

* ``direct``          the load generator talks to the upstream itself (the baseline);
* ``bare-aiohttp``    a pass-through aiohttp proxy with no parsing at all (defined here): the
                      floor for any proxy written on aiohttp;
* ``nginx``           nginx with ``proxy_buffering off`` (one worker), where installed;
* ``sse-passthrough`` ``sse-proxy serve --mode passthrough`` (full validation);
* ``sse-frames``      ``sse-proxy serve --mode frames``;
* ``sse-baseline``    with ``--baseline-src DIR``: passthrough run from another source tree
                      (e.g. ``git archive main``), so a change's cost is measured side by
                      side in one run; the targets section prints the CPU/event ratio.

``--peers`` (issue 9) runs 50 streams, saturated and paced at 20 ms, through ``bare-asyncio``,
``bare-uvloop``, ``sse-asyncio``, ``sse-uvloop`` (passthrough with ``--loop``, where sse-proxy
has the flag), ``mitmproxy`` (reverse mode, a streaming addon) and ``litellm`` (its proxy, an
openai-compatible model_list entry, offline), the last two from bench/.peers-venv/ (made by
bench/setup_peers.sh), and prints the issue's ratios as PASS/MISSED.

Every piece runs in its own process: the upstream (an aiohttp server writing OpenAI-style
``chat.completion.chunk`` events with multilingual content, one event per write), each proxy,
and the load generator (N concurrent streams). Proxy CPU comes from /proc/PID/stat (utime +
stime) around each measured phase, peak RSS from VmHWM. Each event carries the upstream's
``time.time_ns()`` at send time; the load generator subtracts it from the arrival time.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ctypes
import json
import os
import queue
import re
import resource
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from array import array
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
NGINX_TEMPLATE = Path(__file__).with_name("nginx.conf.template")
API_PATH = "/v1/chat/completions"

TARGET_CPU_RATIO = 1.3  # sse-proxy passthrough CPU/event vs the bare aiohttp proxy, at most
TARGET_ADDED_P50_MS = 0.5  # added p50 latency per event at 50 paced streams, at most
TARGET_LEVEL_LATENCY = 50
PACE_MS = 5.0  # gap between events of one paced stream...
PACED_RATE_CAP = 10_000  # ...widened so all paced streams together send at most this many/s
MEMORY_FLAT_MIB = 4.0  # long stream: RSS may grow this much (or 5 %) and still count as flat

CLK_TCK = os.sysconf("SC_CLK_TCK")
PAGE_KIB = os.sysconf("SC_PAGE_SIZE") // 1024

# -- the events ------------------------------------------------------------------------------

TOKENS = (
    " The",
    " quick",
    " 世界",
    "你好",
    " привет",
    " мир",
    " مرحبا",
    " नमस्ते",
    " 🌍",
    " café",
    " naïve",
    " こんにちは",
    " 안녕하세요",
    " γειά",
    " שלום",
    "!",
    " 👍🏽",
    " über",
    " ça",
    " 東京",
)
TS_DIGITS = 19  # time.time_ns() has 19 digits until the year 2286
_HEAD = (
    b'data: {"id":"chatcmpl-bench7Qx2N","object":"chat.completion.chunk",'
    b'"created":1730000000,"model":"gpt-4o-mini-2024-07-18","t":'
)


def _tail(delta: dict[str, str], finish: str | None) -> bytes:
    text = json.dumps(delta, ensure_ascii=False, separators=(",", ":"))
    return (
        f',"choices":[{{"index":0,"delta":{text},"logprobs":null,'
        f'"finish_reason":{json.dumps(finish)}}}]}}\n\n'
    ).encode()


_TAILS = tuple(_tail({"content": tok}, None) for tok in TOKENS)
_FINAL_TAIL = _tail({}, "stop")
_DONE = b"data: [DONE]\n\n"
_TS_RE = re.compile(rb'"t":\d{%d}' % TS_DIGITS)
_TS_ZERO = b'"t":' + b"0" * TS_DIGITS
TS_MARK = b"~T"  # send time in the content text, for proxies that rebuild each chunk


def event(i: int, ts: int) -> bytes:
    """Content event ``i`` stamped with send time ``ts`` (ns since the epoch)."""
    return _HEAD + b"%d" % ts + _TAILS[i % len(_TAILS)]


_ROLE_TAIL = _tail({"role": "assistant", "content": ""}, None)


def role_event(ts: int) -> bytes:
    """The role chunk an OpenAI stream opens with (``role=1``: bench_scale's stream shape)."""
    return _HEAD + b"%d" % ts + _ROLE_TAIL


def final_events(ts: int) -> bytes:
    """The finish_reason chunk and ``[DONE]``, written together at the end of a stream."""
    return _HEAD + b"%d" % ts + _FINAL_TAIL + _DONE


def frames_per_stream(n: int) -> int:
    return n + 2


def expected_len(n: int) -> int:
    stamp = len(_HEAD) + TS_DIGITS
    full, rest = divmod(n, len(_TAILS))
    body = full * sum(len(t) for t in _TAILS) + sum(len(t) for t in _TAILS[:rest])
    return n * stamp + body + stamp + len(_FINAL_TAIL) + len(_DONE)


def expected_stream(n: int) -> bytes:
    """A stream of ``n`` content events with every timestamp zeroed (for verification)."""
    zero = 10 ** (TS_DIGITS - 1)
    return _TS_RE.sub(_TS_ZERO, b"".join(event(i, zero) for i in range(n)) + final_events(zero))


# -- role: upstream --------------------------------------------------------------------------


def event_ts_in_content(i: int, ts: int) -> bytes:
    """Event ``i`` with its send time also in the content (``~T<ns>``).

    For proxies that re-serialise every chunk (LiteLLM) and may drop the unknown ``"t"``
    field: the content text survives any re-encoding.
    """
    tok = TOKENS[i % len(TOKENS)] + f"{TS_MARK.decode()}{ts}"
    return _HEAD + b"%d" % ts + _tail({"content": tok}, None)


def _bench_params(body: bytes) -> dict[str, str]:
    """``n``/``pace_ms``/``tsc`` carried in the body's ``user`` field as ``bench:k=v:k=v``.

    A proxy that builds its own upstream request (LiteLLM) drops the query string but passes
    the OpenAI ``user`` parameter on.
    """
    with contextlib.suppress(ValueError, TypeError, AttributeError):
        user = json.loads(body).get("user", "")
        if isinstance(user, str) and user.startswith("bench:"):
            return dict(kv.split("=", 1) for kv in user.split(":")[1:] if "=" in kv)
    return {}


async def _upstream_handler(request: Any) -> Any:
    from aiohttp import web

    q: Any = request.query
    body = await request.read()
    if "n" not in q:
        q = _bench_params(body)
    n = int(q.get("n", "100"))
    pace = float(q.get("pace_ms", "0")) / 1000
    make = event_ts_in_content if q.get("tsc") == "1" else event
    resp = web.StreamResponse(
        headers={
            "Content-Type": "text/event-stream; charset=utf-8",
            "Cache-Control": "no-cache",
            "x-request-id": "req_bench",
        }
    )
    await resp.prepare(request)
    write = resp.write
    try:
        if q.get("role") == "1":  # the On the Bench shape: a role chunk, then paced deltas
            await write(role_event(time.time_ns()))
            if pace > 0:
                await asyncio.sleep(pace)
        if pace > 0:
            for i in range(n):
                if i:
                    await asyncio.sleep(pace)
                await write(make(i, time.time_ns()))
            await asyncio.sleep(pace)
        else:
            for i in range(n):
                await write(make(i, time.time_ns()))
        await write(final_events(time.time_ns()))
        await resp.write_eof()
    except (ConnectionError, RuntimeError):
        pass  # the client (a proxy) went away
    return resp


LOOPS = ("asyncio", "uvloop")


def uvloop_note() -> str | None:
    """None if uvloop can be imported here, else why not."""
    try:
        import uvloop  # noqa: F401
    except ImportError as exc:
        return f"uvloop is not installed in this venv ({exc})"
    return None


def run_on(loop: str, main: Any) -> None:
    """Run coroutine ``main`` on ``loop`` (``asyncio`` or ``uvloop``)."""
    if loop == "uvloop":
        import uvloop

        with asyncio.Runner(loop_factory=uvloop.new_event_loop) as runner:
            runner.run(main)
    else:
        asyncio.run(main)


async def _serve(app: Any, port: int, backlog: int) -> None:
    from aiohttp import web

    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", port, backlog=backlog)
    await site.start()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    await stop.wait()
    await runner.cleanup()


def _role_upstream(argv: Sequence[str]) -> int:
    from aiohttp import web

    ap = argparse.ArgumentParser(prog="bench_proxy _upstream")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--loop", choices=LOOPS, default="asyncio")
    args = ap.parse_args(argv)
    app = web.Application()
    app.router.add_route("*", API_PATH, _upstream_handler)
    run_on(args.loop, _serve(app, args.port, backlog=4096))
    return 0


# -- role: bare aiohttp pass-through proxy ---------------------------------------------------

_HOP = frozenset(
    {
        "connection",
        "keep-alive",
        "proxy-connection",
        "te",
        "trailer",
        "transfer-encoding",
        "upgrade",
        "host",
    }
)


async def _bare_body(request: Any) -> Any:
    async for chunk in request.content.iter_any():
        yield chunk


def _role_bare(argv: Sequence[str]) -> int:
    """The limit for any aiohttp proxy: forward the request, relay ``iter_any()`` chunks."""
    import aiohttp
    from aiohttp import web
    from multidict import CIMultiDict
    from yarl import URL

    ap = argparse.ArgumentParser(prog="bench_proxy _bare")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--upstream", required=True)
    ap.add_argument("--loop", choices=LOOPS, default="asyncio")
    args = ap.parse_args(argv)
    base = args.upstream.rstrip("/")
    session_key = web.AppKey("session", aiohttp.ClientSession)

    async def handler(request: web.Request) -> web.StreamResponse:
        headers = CIMultiDict((k, v) for k, v in request.headers.items() if k.lower() not in _HOP)
        data = _bare_body(request) if request.body_exists else None
        async with request.app[session_key].request(
            request.method,
            URL(base + request.raw_path, encoded=True),
            headers=headers,
            data=data,
            allow_redirects=False,
            skip_auto_headers=("Accept-Encoding", "User-Agent", "Content-Type"),
        ) as up:
            resp = web.StreamResponse(status=up.status, reason=up.reason)
            for k, v in up.headers.items():
                if k.lower() not in _HOP:
                    resp.headers.add(k, v)
            await resp.prepare(request)
            async for chunk in up.content.iter_any():
                await resp.write(chunk)
            await resp.write_eof()
            return resp

    async def session_ctx(app: web.Application) -> Any:
        async with aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=0),
            auto_decompress=False,
            cookie_jar=aiohttp.DummyCookieJar(),
            timeout=aiohttp.ClientTimeout(total=None),
        ) as session:
            app[session_key] = session
            yield

    app = web.Application()
    app.cleanup_ctx.append(session_ctx)
    app.router.add_route("*", "/{tail:.*}", handler)
    # aiohttp's default, as a bare proxy has it (sse-proxy queues 2,048: server/run.py)
    run_on(args.loop, _serve(app, args.port, backlog=128))
    return 0


# -- role: load generator --------------------------------------------------------------------

_REQUEST_BODY = json.dumps(
    {
        "model": "gpt-4o-mini",
        "stream": True,
        "messages": [{"role": "user", "content": "Say hello in twenty languages."}],
    }
).encode()
_REQUEST_HEADERS = {
    "Content-Type": "application/json",
    "Accept": "text/event-stream",
    "Authorization": "Bearer sk-bench-not-a-real-key",
}


@dataclass
class _Tally:
    frames: int = 0
    bytes: int = 0
    ok: int = 0
    errors: Counter[str] = field(default_factory=Counter)
    lats: array[int] = field(default_factory=lambda: array("q"))
    verified: bool | None = None


async def _one_stream(
    session: Any,
    url: str,
    n: int,
    pace_ms: float,
    delay: float,
    latency: bool,
    verify: bool,
    tally: _Tally,
    lenient: bool = False,
) -> None:
    """One stream; ``lenient`` for a proxy that rebuilds every chunk (LiteLLM).

    Lenient: the parameters also travel in the body's ``user`` field, the upstream puts the
    send time in the content too, and the check is "at least ``n`` events", not exact bytes.
    """
    import aiohttp

    if delay:
        await asyncio.sleep(delay)
    frames = got = 0
    keep: list[bytes] | None = [] if verify and not lenient else None
    body = _REQUEST_BODY
    if lenient:
        body = json.dumps(
            {**json.loads(_REQUEST_BODY), "user": f"bench:n={n}:pace_ms={pace_ms:g}:tsc=1"}
        ).encode()
    try:
        async with session.post(
            url,
            params={"n": str(n), "pace_ms": str(pace_ms)},
            data=body,
            headers=_REQUEST_HEADERS,
        ) as resp:
            ctype = resp.headers.get("Content-Type", "")
            if resp.status != 200 or not ctype.startswith("text/event-stream"):
                body = await resp.read()
                tally.errors[f"HTTP {resp.status} {ctype}: {body[:120]!r}"] += 1
                return
            if latency:
                buf = b""
                lats = tally.lats
                async for chunk in resp.content.iter_any():
                    now = time.time_ns()
                    got += len(chunk)
                    buf += chunk
                    if b"\n\n" not in buf:
                        continue
                    parts = buf.split(b"\n\n")
                    buf = parts.pop()
                    frames += len(parts)
                    for part in parts:
                        i = part.find(b'"t":')
                        if i >= 0:
                            lats.append(now - int(part[i + 4 : i + 4 + TS_DIGITS]))
                        elif lenient and (i := part.find(TS_MARK)) >= 0:
                            lats.append(now - int(part[i + 2 : i + 2 + TS_DIGITS]))
                if buf:
                    tally.errors["bytes after the last blank line"] += 1
            else:
                newlines = 0
                async for chunk in resp.content.iter_any():
                    got += len(chunk)
                    newlines += chunk.count(b"\n")
                    if keep is not None:
                        keep.append(chunk)
                frames = newlines // 2  # each event is one line plus its blank line
    except (aiohttp.ClientError, OSError, TimeoutError) as exc:
        tally.errors[f"{type(exc).__name__}: {str(exc)[:120]}"] += 1
        tally.frames += frames
        tally.bytes += got
        return
    tally.frames += frames
    tally.bytes += got
    if lenient:
        if frames < n:
            tally.errors[f"short stream: {frames} events, expected at least {n}"] += 1
        else:
            tally.ok += 1
        return
    if got != expected_len(n) or frames != frames_per_stream(n):
        tally.errors[
            f"wrong stream: {got} bytes/{frames} events, expected "
            f"{expected_len(n)}/{frames_per_stream(n)}"
        ] += 1
        return
    if keep is not None:
        same = _TS_RE.sub(_TS_ZERO, b"".join(keep)) == expected_stream(n)
        tally.verified = same
        if not same:
            tally.errors["stream bytes differ from what upstream sent"] += 1
            return
    tally.ok += 1


def _pct(sorted_vals: Sequence[int], p: float) -> float:
    if not sorted_vals:
        return float("nan")
    k = min(len(sorted_vals) - 1, round(p / 100 * (len(sorted_vals) - 1)))
    return sorted_vals[k] / 1e6  # ns -> ms


async def _phase(session: Any, url: str, spec: dict[str, Any]) -> dict[str, Any]:
    streams, n, pace = int(spec["streams"]), int(spec["n"]), float(spec.get("pace_ms", 0))
    latency = bool(spec.get("latency"))
    until = float(spec.get("until_s", 0))
    tally = _Tally()
    timed_out = False
    c0, t0 = time.process_time(), time.perf_counter()
    rounds = 0
    while True:
        jobs = [
            _one_stream(
                session,
                url,
                n,
                pace,
                (i * pace / 1000 / streams) if pace else 0.0,  # spread paced streams evenly
                latency,
                bool(spec.get("verify")) and i == 0 and rounds == 0,
                tally,
                bool(spec.get("lenient")),
            )
            for i in range(streams)
        ]
        try:
            async with asyncio.timeout(float(spec.get("timeout_s", 120))):
                await asyncio.gather(*jobs)
        except TimeoutError:
            timed_out = True
            tally.errors["phase timed out (streams hung?)"] += 1
            break
        rounds += 1
        if time.perf_counter() - t0 >= until:
            break
    wall = time.perf_counter() - t0
    cpu = time.process_time() - c0
    lats = sorted(tally.lats)
    return {
        "name": spec["name"],
        "streams": streams * rounds,
        "ok": tally.ok,
        "frames": tally.frames,
        "bytes": tally.bytes,
        "wall_s": wall,
        "load_cpu_s": cpu,
        "events_per_s": tally.frames / wall if wall > 0 else 0.0,
        "lat_n": len(lats),
        "lat_p50_ms": _pct(lats, 50),
        "lat_p99_ms": _pct(lats, 99),
        "lat_max_ms": _pct(lats, 100),
        "verified": tally.verified,
        "errors": dict(tally.errors.most_common(5)),
        "error_count": sum(tally.errors.values()),
        "timed_out": timed_out,
    }


async def _load_main(url: str, phases: list[dict[str, Any]]) -> None:
    import aiohttp

    loop = asyncio.get_running_loop()
    async with aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=0),
        timeout=aiohttp.ClientTimeout(total=None, sock_connect=30, sock_read=60),
    ) as session:
        for spec in phases:
            print(json.dumps({"ready": spec["name"]}), flush=True)
            go = await loop.run_in_executor(None, sys.stdin.readline)
            if go.strip() != "go":
                return
            result = await _phase(session, url, spec)
            print(json.dumps({"result": result}), flush=True)


def _role_load(argv: Sequence[str]) -> int:
    ap = argparse.ArgumentParser(prog="bench_proxy _load")
    ap.add_argument("--url", required=True)
    ap.add_argument("--plan", required=True, help="JSON list of phases")
    args = ap.parse_args(argv)
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    want = 65536 if hard == resource.RLIM_INFINITY else hard
    if soft < want:
        resource.setrlimit(resource.RLIMIT_NOFILE, (want, hard))
    asyncio.run(_load_main(args.url, json.loads(args.plan)))
    return 0


# -- the orchestrator: processes, /proc, phases ----------------------------------------------


try:  # resolved here, not in the forked child: the child only makes one foreign call
    _PRCTL: Any = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None


def _die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """PR_SET_PDEATHSIG: a child we started gets SIGTERM if this process dies first."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _stat_fields(pid: int) -> list[str]:
    text = Path(f"/proc/{pid}/stat").read_text()
    return text.rpartition(")")[2].split()


def ticks(pids: Sequence[int]) -> int:
    """utime + stime of ``pids`` in clock ticks (what /proc/stat's totals are made of)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            f = _stat_fields(pid)
            total += int(f[11]) + int(f[12])
    return total


def cpu_seconds(pids: Sequence[int]) -> float:
    """CPU time of ``pids`` (all their threads), to the nanosecond where schedstat exists.

    /proc/PID/stat counts in 10 ms ticks, too coarse for short phases; the scheduler's
    sum_exec_runtime (first field of /proc/PID/task/TID/schedstat) is exact.
    """
    total = 0.0
    for pid in pids:
        try:
            tasks = list(Path(f"/proc/{pid}/task").iterdir())
            total += sum(int((t / "schedstat").read_text().split()[0]) for t in tasks) / 1e9
        except (OSError, ValueError, IndexError):
            total += ticks([pid]) / CLK_TCK
    return total


def machine_busy_ticks() -> int:
    """CPU ticks spent by every process on the machine (all CPUs), from /proc/stat."""
    fields = Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]
    vals = [int(x) for x in fields[:8]]  # user nice system idle iowait irq softirq steal
    return sum(vals) - vals[3] - vals[4]


def _status_kib(pid: int, key: str) -> int:
    with contextlib.suppress(OSError):
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith(key + ":"):
                return int(line.split()[1])
    return 0


def peak_rss_mib(pids: Sequence[int]) -> float:
    return sum(_status_kib(pid, "VmHWM") for pid in pids) / 1024


def rss_mib(pids: Sequence[int]) -> float:
    return sum(_status_kib(pid, "VmRSS") for pid in pids) / 1024


def _children(pid: int) -> list[int]:
    kids = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError, IndexError, ValueError):
                if int(_stat_fields(int(entry.name))[1]) == pid:
                    kids.append(int(entry.name))
    return kids


def _wait_port(port: int, proc: subprocess.Popen[Any], what: str, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on port {port} within {timeout:.0f} s")


class Service:
    """A process we started (plus, for nginx, its workers); stopped exactly once."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        port: int,
        *,
        log: Path,
        stop_signal: int = signal.SIGTERM,
        cwd: Path = ROOT,
        env: dict[str, str] | None = None,
        wait_s: float = 20,
    ) -> None:
        self.name = name
        self.port = port
        self.stop_signal = stop_signal
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - one prctl call, no locks
        )
        self.log_path = log
        self.pids = [self.proc.pid]
        try:
            _wait_port(port, self.proc, name, wait_s)
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def adopt_children(self) -> None:
        self.pids = [self.proc.pid, *_children(self.proc.pid)]

    def log_tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(self.stop_signal)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        for pid in self.pids[1:]:  # nginx workers: normally gone with their master
            with contextlib.suppress(ProcessLookupError, PermissionError):
                if Path(f"/proc/{pid}").exists() and _stat_fields(pid)[0] != "Z":
                    os.kill(pid, signal.SIGKILL)
        self._log.close()


class LoadGen:
    """The load generator process; runs its phases one at a time on our say-so."""

    def __init__(self, url: str, phases: list[dict[str, Any]]) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.bench_proxy",
                "_load",
                "--url",
                url + API_PATH,
                "--plan",
                json.dumps(phases),
            ],
            cwd=ROOT,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            text=True,
            preexec_fn=_die_with_parent,  # noqa: PLW1509 - one prctl call, no locks
        )
        self.lines: queue.Queue[str | None] = queue.Queue()
        threading.Thread(target=self._pump, daemon=True).start()

    def _pump(self) -> None:
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            self.lines.put(line)
        self.lines.put(None)

    def _next(self, timeout: float, tick: Callable[[], None] | None) -> dict[str, Any]:
        deadline = time.monotonic() + timeout
        while True:
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError("load generator silent past its phase timeout")
            try:
                line = self.lines.get(timeout=min(left, 1.0) if tick else left)
            except queue.Empty:
                if tick:
                    tick()
                continue
            if line is None:
                raise RuntimeError(f"load generator exited with {self.proc.wait()}")
            with contextlib.suppress(ValueError):
                return dict(json.loads(line))

    def run(
        self,
        name: str,
        timeout: float,
        before: Callable[[], None] = lambda: None,
        tick: Callable[[], None] | None = None,
    ) -> dict[str, Any]:
        ready = self._next(60, None)
        assert ready.get("ready") == name, ready
        before()
        assert self.proc.stdin is not None
        self.proc.stdin.write("go\n")
        self.proc.stdin.flush()
        return dict(self._next(timeout + 30, tick)["result"])

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(BrokenPipeError, OSError):
                assert self.proc.stdin is not None
                self.proc.stdin.close()
            try:
                self.proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)


# -- contenders ------------------------------------------------------------------------------

CONTENDERS = ("direct", "bare-aiohttp", "nginx", "sse-passthrough", "sse-frames", "sse-baseline")
TARGET_BASELINE_RATIO = 1.10  # a change may cost at most 10 % more CPU per event (paced)
# --peers (issue 9): each loop explicit, and the proxies a user would pick instead
PEER_CONTENDERS = (
    "direct",
    "bare-asyncio",
    "sse-asyncio",
    "bare-uvloop",
    "sse-uvloop",
    "mitmproxy",
    "litellm",
)
ALL_CONTENDERS = tuple(dict.fromkeys((*CONTENDERS, *PEER_CONTENDERS)))
# slow peers get this fraction of the saturated phase's events (at least 100 per stream)
SLOW_DIVISOR = {"mitmproxy": 5, "litellm": 20}
LENIENT = frozenset({"litellm"})  # rebuilds every chunk: count events, not bytes
PEERS_VENV = Path(os.environ.get("BENCH_PEERS_VENV", Path(__file__).with_name(".peers-venv")))
SETUP_PEERS = Path(__file__).with_name("setup_peers.sh")
MITM_ADDON = """\
# written by bench_proxy: stream every response body through as it arrives
def responseheaders(flow):
    flow.response.stream = True
"""
LITELLM_CONFIG = """\
model_list:
  - model_name: gpt-4o-mini
    litellm_params:
      model: openai/gpt-4o-mini
      api_base: {api_base}
      api_key: sk-bench-not-a-real-key
litellm_settings:
  telemetry: false
  set_verbose: false
  drop_params: true
  callbacks: []
general_settings:
  disable_spend_logs: true
  disable_error_logs: true
"""
# everything LiteLLM would otherwise fetch or report over the network, off
LITELLM_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    # it refuses to start without one; the load generator sends this bearer token
    "LITELLM_MASTER_KEY": "sk-bench-not-a-real-key",
    "LITELLM_TELEMETRY": "False",
    "LITELLM_LOG": "ERROR",
    "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True",
    "DISABLE_SCHEMA_UPDATE": "True",
    "NO_DOCS": "True",
    "HF_HUB_OFFLINE": "1",
}


def peer_exe(name: str) -> Path | None:
    """``mitmdump``/``litellm`` from bench/.peers-venv/<peer>/ (setup_peers.sh), else PATH."""
    venv = PEERS_VENV / {"mitmdump": "mitmproxy"}.get(name, name)
    for cand in (venv / "bin" / name, PEERS_VENV / "bin" / name):
        if cand.exists():
            return cand.absolute()  # LiteLLM runs in its temp dir: a relative path breaks
    found = shutil.which(name)
    return Path(found) if found else None


def peer_version(exe: Path, module: str) -> str:
    """The installed version of ``module`` in the venv of ``exe``, without importing it here."""
    py = exe.with_name("python")
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        out = subprocess.run(
            [
                str(py if py.exists() else sys.executable),
                "-c",
                f"import importlib.metadata as m; print(m.version({module!r}))",
            ],
            check=False,
            capture_output=True,
            text=True,
            timeout=60,
        )
        if out.returncode == 0:
            return out.stdout.strip()
    return "?"


_SSE_LOOP_FLAG: bool | None = None


def sse_proxy_has_loop_flag() -> bool:
    """Whether ``sse-proxy serve`` under test takes ``--loop`` (asked once, via --help)."""
    global _SSE_LOOP_FLAG  # noqa: PLW0603 - a cache for the run
    if _SSE_LOOP_FLAG is None:
        env = (
            None if PROXY_SRC is None else {**os.environ, "PYTHONPATH": _with_pythonpath(PROXY_SRC)}
        )
        try:
            out = subprocess.run(
                [*_sse_proxy_argv(), "serve", "--help"],
                check=False,
                capture_output=True,
                text=True,
                timeout=60,
                cwd=PROXY_SRC or ROOT,
                env=env,
            )
            _SSE_LOOP_FLAG = "--loop" in out.stdout
        except (OSError, subprocess.SubprocessError):
            _SSE_LOOP_FLAG = False
    return _SSE_LOOP_FLAG


def contender_unavailable(name: str) -> str | None:
    """None if ``name`` can run here, else why not (printed as a note; the row is skipped)."""
    if name == "nginx":
        return nginx_available()
    if name.endswith("-uvloop"):
        note = uvloop_note()
        if note:
            return note
        if name.startswith("sse-") and not sse_proxy_has_loop_flag():
            return "`sse-proxy serve` has no --loop option yet (its --help): no uvloop row"
    if name == "mitmproxy" and peer_exe("mitmdump") is None:
        return "mitmdump not found (bash bench/setup_peers.sh, or --setup-peers)"
    if name == "litellm" and peer_exe("litellm") is None:
        return "litellm not found (bash bench/setup_peers.sh, or --setup-peers)"
    return None


PIN: bool = False  # --pin: the proxy under test on a CPU of its own, everything else on the rest


def pin(pids: Sequence[int], role: str) -> None:
    """--pin: put every thread of ``pids`` on the proxy's CPU (``role`` "proxy": the last
    one) or on the others (the upstream and the load generator), so a proxy never waits
    for a CPU that the load it serves is using: what it adds is its own work."""
    if not PIN:
        return
    cpus = sorted(os.sched_getaffinity(0))
    want = {cpus[-1]} if role == "proxy" else set(cpus[:-1])
    for pid in pids:
        with contextlib.suppress(OSError):
            for tid in os.listdir(f"/proc/{pid}/task"):
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(int(tid), want)


SSE_LOG_LEVEL = "warning"  # sse-proxy's --log-level here (its default, info, logs each stream)
PROXY_SRC: Path | None = None  # --proxy-src: run sse-proxy from this source tree instead
BASELINE_SRC: Path | None = None  # --baseline-src: the sse-baseline contender's source tree


def package_in(src: Path) -> str | None:
    """The import name of the sse-proxy package in a source tree: ``sse_proxy``, or
    ``proxy`` in checkouts from before the rename; None when there is neither."""
    for name in ("sse_proxy", "proxy"):
        if (src / name / "__init__.py").exists():
            return name
    return None


def _sse_proxy_argv(src: Path | None = None) -> list[str]:
    src = src or PROXY_SRC
    if src is not None:
        return [sys.executable, "-m", package_in(src) or "sse_proxy"]
    script = Path(sys.executable).with_name("sse-proxy")
    return [str(script)] if script.exists() else [sys.executable, "-m", "sse_proxy"]


def start_contender(name: str, upstream: Service, workdir: Path) -> Service | None:
    """Start ``name``'s proxy in front of ``upstream``; None for ``direct``."""
    if name == "direct":
        return None
    port = _free_port()
    log = workdir / f"{name}.log"
    if name in ("bare-aiohttp", "bare-asyncio", "bare-uvloop"):
        argv = [sys.executable, "-m", "bench.bench_proxy", "_bare", "--port", str(port)]
        loop = "uvloop" if name == "bare-uvloop" else "asyncio"
        return Service(name, [*argv, "--upstream", upstream.url, "--loop", loop], port, log=log)
    if name == "mitmproxy":
        exe = peer_exe("mitmdump")
        assert exe is not None
        addon = workdir / "mitm_stream_addon.py"
        addon.write_text(MITM_ADDON)
        confdir = workdir / "mitmproxy"
        confdir.mkdir(exist_ok=True)
        argv = [
            str(exe), "--mode", f"reverse:{upstream.url}", "--listen-host", "127.0.0.1",
            "--listen-port", str(port), "-s", str(addon), "-q",
            "--set", f"confdir={confdir}",
            "--set", "connection_strategy=lazy",
            "--set", "termlog_verbosity=error",
            "--set", "flow_detail=0",
        ]  # fmt: skip
        return Service(name, argv, port, log=log, wait_s=90)
    if name == "litellm":
        exe = peer_exe("litellm")
        assert exe is not None
        cfg = workdir / "litellm.yaml"
        cfg.write_text(LITELLM_CONFIG.format(api_base=upstream.url + "/v1"))
        env = {**os.environ, **LITELLM_ENV, "HOME": str(workdir)}
        argv = [str(exe), "--config", str(cfg), "--host", "127.0.0.1", "--port", str(port)]
        argv += ["--num_workers", "1"]
        svc = Service(name, argv, port, log=log, env=env, cwd=workdir, wait_s=180)
        svc.adopt_children()
        return svc
    if name == "nginx":
        nginx = shutil.which("nginx") or "/usr/sbin/nginx"
        prefix = workdir / "nginx"
        prefix.mkdir(exist_ok=True)
        conf = prefix / "nginx.conf"
        conf.write_text(
            NGINX_TEMPLATE.read_text().format(prefix=prefix, port=port, upstream_port=upstream.port)
        )
        argv = [nginx, "-p", str(prefix), "-c", str(conf), "-e", str(prefix / "error.log")]
        svc = Service(name, [*argv, "-g", "daemon off;"], port, log=log, stop_signal=signal.SIGQUIT)
        svc.adopt_children()
        return svc
    if name == "sse-baseline":
        if BASELINE_SRC is None:
            raise RuntimeError("sse-baseline needs --baseline-src DIR")
        argv = [*_sse_proxy_argv(BASELINE_SRC), "serve", "--upstream", upstream.url]
        argv += ["--port", str(port), "--mode", "passthrough", "--log-level", SSE_LOG_LEVEL]
        env = {**os.environ, "PYTHONPATH": _with_pythonpath(BASELINE_SRC)}
        return Service(name, argv, port, log=log, cwd=BASELINE_SRC, env=env)
    mode = name.removeprefix("sse-")
    sse_loop: str | None = None
    if mode in LOOPS:  # sse-asyncio / sse-uvloop: passthrough on that loop
        mode, sse_loop = "passthrough", mode
    argv = [*_sse_proxy_argv(), "serve", "--upstream", upstream.url, "--port", str(port)]
    argv += ["--mode", mode, "--log-level", SSE_LOG_LEVEL]
    if sse_loop is not None and sse_proxy_has_loop_flag():
        argv += ["--loop", sse_loop]  # without the flag, sse-proxy runs on asyncio
    if PROXY_SRC is None:
        return Service(name, argv, port, log=log)
    env = {**os.environ, "PYTHONPATH": _with_pythonpath(PROXY_SRC)}
    return Service(name, argv, port, log=log, cwd=PROXY_SRC, env=env)


def _with_pythonpath(first: Path) -> str:
    """``first``, then whatever PYTHONPATH the run has (``burst_pair --window-cpu``'s hook)."""
    rest = os.environ.get("PYTHONPATH")
    return f"{first}{os.pathsep}{rest}" if rest else str(first)


def nginx_available() -> str | None:
    """None if nginx can be used, else why not."""
    if not (shutil.which("nginx") or Path("/usr/sbin/nginx").exists()):
        return "nginx is not installed (apt-get install -y nginx-light)"
    return None


# -- one measurement -------------------------------------------------------------------------


@dataclass
class Row:
    contender: str
    events_per_s: float = float("nan")
    cpu_us_per_event: float = float("nan")
    cpu_pct: float = float("nan")
    paced_cpu_us_per_event: float = float("nan")
    lat_p50_ms: float = float("nan")
    lat_p99_ms: float = float("nan")
    peak_rss_mib: float = float("nan")
    upstream_pct: float = float("nan")
    load_pct: float = float("nan")
    others_pct: float = float("nan")
    paced_others_pct: float = float("nan")
    errors: int = 0
    error_text: list[str] = field(default_factory=list)
    note: str = ""
    info: str = ""  # printed after the row, not a problem


@dataclass(frozen=True)
class Plan:
    levels: tuple[int, ...]
    events: int  # total events per level in the throughput phase
    paced_s: float  # length of each paced stream
    long_events: int
    timeout_s: float
    pace_ms: float = PACE_MS  # gap between events of one paced stream (widened, see paced_ms)


def paced_ms(level: int, base: float = PACE_MS) -> float:
    return max(base, level * 1000 / PACED_RATE_CAP)


def fast_events(name: str, level: int, plan: Plan) -> int:
    """Events per stream in the saturated phase (slow peers get fewer, see SLOW_DIVISOR)."""
    n = max(1, plan.events // level)
    div = SLOW_DIVISOR.get(name, 1)
    return n if div == 1 else min(n, max(100, n // div))


def measure(name: str, level: int, plan: Plan, upstream: Service, workdir: Path) -> Row:
    row = Row(name)
    try:
        svc = start_contender(name, upstream, workdir)
    except (RuntimeError, OSError) as exc:
        row.note = f"did not start: {exc}"
        with contextlib.suppress(OSError):
            lines = (workdir / f"{name}.log").read_text(errors="replace").strip().splitlines()
            if lines:
                row.error_text.append("log tail:\n" + "\n".join(lines[-8:]))
        return row
    url = svc.url if svc is not None else upstream.url
    n_fast = fast_events(name, level, plan)
    if n_fast != max(1, plan.events // level):
        row.info = f"saturated: {n_fast} events/stream"
    lenient = name in LENIENT
    pace = paced_ms(level, plan.pace_ms)
    n_paced = max(10, round(plan.paced_s * 1000 / pace))
    phases = [
        {
            "name": "warmup",
            "streams": min(level, 20),
            "n": 200,
            "timeout_s": 60,
            "lenient": lenient,
        },
        {
            "name": "fast",
            "streams": level,
            "n": n_fast,
            "verify": n_fast <= 300_000,
            "timeout_s": plan.timeout_s,
            "lenient": lenient,
        },
        {
            "name": "paced",
            "streams": level,
            "n": n_paced,
            "pace_ms": pace,
            "latency": True,
            "timeout_s": plan.timeout_s,
            "lenient": lenient,
        },
    ]
    load = LoadGen(url, phases)
    pids = svc.pids if svc is not None else []
    pin(pids, "proxy")
    pin([*upstream.pids, load.proc.pid], "load")
    ours = [*pids, *upstream.pids, load.proc.pid]
    try:
        load.run("warmup", 60)
        results: dict[str, tuple[dict[str, Any], float, float, float]] = {}
        for phase in ("fast", "paced"):
            marks: dict[str, float] = {}

            def before(marks: dict[str, float] = marks) -> None:
                marks["proxy"] = cpu_seconds(pids)
                marks["up"] = cpu_seconds(upstream.pids)
                marks["others"] = machine_busy_ticks() - ticks(ours)

            res = load.run(phase, plan.timeout_s, before)
            others = (machine_busy_ticks() - ticks(ours) - marks["others"]) / CLK_TCK
            results[phase] = (
                res,
                cpu_seconds(pids) - marks["proxy"],
                cpu_seconds(upstream.pids) - marks["up"],
                max(0.0, others),
            )
        fast, fast_cpu, fast_up, fast_others = results["fast"]
        paced, paced_cpu, _, paced_others = results["paced"]
        row.events_per_s = fast["events_per_s"]
        row.upstream_pct = 100 * fast_up / fast["wall_s"]
        row.load_pct = 100 * fast["load_cpu_s"] / fast["wall_s"]
        row.others_pct = 100 * fast_others / fast["wall_s"]
        row.paced_others_pct = 100 * paced_others / paced["wall_s"]
        if svc is not None:
            row.cpu_us_per_event = 1e6 * fast_cpu / max(1, fast["frames"])
            row.cpu_pct = 100 * fast_cpu / fast["wall_s"]
            row.paced_cpu_us_per_event = 1e6 * paced_cpu / max(1, paced["frames"])
            row.peak_rss_mib = peak_rss_mib(pids)
        row.lat_p50_ms = paced["lat_p50_ms"]
        row.lat_p99_ms = paced["lat_p99_ms"]
        for res in (fast, paced):
            row.errors += res["error_count"]
            row.error_text += [f"{res['name']}: {k} (x{v})" for k, v in res["errors"].items()]
            if res["verified"] is False:
                row.note = "WRONG BYTES"
    except (RuntimeError, TimeoutError, AssertionError, KeyError) as exc:
        row.note = f"failed: {exc}"
        row.errors += 1
    finally:
        load.stop()
        if svc is not None:
            if svc.proc.poll() is not None:
                row.note = (row.note + f"; exited with {svc.proc.returncode}").lstrip("; ")
            svc.stop()
            if row.errors or row.note:
                tail = svc.log_tail()
                if tail:
                    row.error_text.append(f"{name} log tail:\n{tail}")
    return row


def median_row(rows: list[Row]) -> Row:
    """Each numeric column's median over repeated rounds of one contender (NaNs left out)."""
    if len(rows) == 1:
        return rows[0]
    out = Row(rows[0].contender)
    for name in (
        "events_per_s",
        "cpu_us_per_event",
        "cpu_pct",
        "paced_cpu_us_per_event",
        "lat_p50_ms",
        "lat_p99_ms",
        "peak_rss_mib",
        "upstream_pct",
        "load_pct",
        "others_pct",
        "paced_others_pct",
    ):
        vals = [v for r in rows if (v := getattr(r, name)) == v]
        if vals:
            setattr(out, name, statistics.median(vals))
    out.errors = sum(r.errors for r in rows)
    out.error_text = [t for r in rows for t in r.error_text]
    out.note = "; ".join(dict.fromkeys(r.note for r in rows if r.note))
    out.info = "; ".join(
        dict.fromkeys([r.info for r in rows if r.info] + [f"median of {len(rows)}"])
    )
    return out


# -- report ----------------------------------------------------------------------------------


def _f(value: float, fmt: str, width: int) -> str:
    return ("-" if value != value else format(value, fmt)).rjust(width)  # NaN -> "-"


HEADER = (
    f"{'contender':<16}{'events/s':>10}{'CPU µs/ev':>11}{'CPU %':>7}{'paced µs/ev':>13}"
    f"{'lat p50':>10}{'lat p99':>10}{'added p50':>11}{'added p99':>11}{'peak RSS':>10}"
    f"{'up %':>6}{'load %':>7}{'other %':>8}{'errors':>7}"
)


def print_table(level: int, plan: Plan, rows: list[Row]) -> None:
    n_fast = max(1, plan.events // level)
    pace = paced_ms(level, plan.pace_ms)
    print(
        f"\n== {level} concurrent stream{'s' if level > 1 else ''}: throughput "
        f"{level} x {n_fast} events; latency {level} paced streams, one event per "
        f"{pace:g} ms, {max(10, round(plan.paced_s * 1000 / pace))} events each =="
    )
    print(HEADER)
    base = next((r for r in rows if r.contender == "direct"), None)
    for r in rows:
        add50 = add99 = float("nan")
        if base is not None and r is not base:
            add50 = r.lat_p50_ms - base.lat_p50_ms
            add99 = r.lat_p99_ms - base.lat_p99_ms
        print(
            f"{r.contender:<16}{_f(r.events_per_s, ',.0f', 10)}"
            f"{_f(r.cpu_us_per_event, '.1f', 11)}{_f(r.cpu_pct, '.0f', 7)}"
            f"{_f(r.paced_cpu_us_per_event, '.1f', 13)}"
            f"{_f(r.lat_p50_ms, '.3f', 10)}{_f(r.lat_p99_ms, '.3f', 10)}"
            f"{_f(add50, '+.3f', 11)}{_f(add99, '+.3f', 11)}"
            f"{_f(r.peak_rss_mib, '.1f', 10)}"
            f"{_f(r.upstream_pct, '.0f', 6)}{_f(r.load_pct, '.0f', 7)}"
            f"{_f(r.others_pct, '.0f', 5)}/{_f(r.paced_others_pct, '.0f', 2)}{r.errors:>7}"
            + (f"  {r.note}" if r.note else "")
            + (f"  ({r.info})" if r.info else "")
        )
    for r in rows:
        for text in r.error_text:
            print(f"   ! {r.contender}: {text}")


def ratio_lines(levels_rows: dict[int, list[Row]]) -> list[tuple[str, bool | None]]:
    out: list[tuple[str, bool | None]] = []
    for level, rows in levels_rows.items():
        by = {r.contender: r for r in rows}
        sse, bare = by.get("sse-passthrough"), by.get("bare-aiohttp")
        if sse is None or bare is None:
            continue
        fast = sse.cpu_us_per_event / bare.cpu_us_per_event
        paced = sse.paced_cpu_us_per_event / bare.paced_cpu_us_per_event
        frames = by.get("sse-frames")
        extra = ""
        if frames is not None:
            extra = f"; frames mode {frames.cpu_us_per_event / bare.cpu_us_per_event:.2f}x"
        measured = fast == fast and paced == paced  # NaN when a contender failed
        ok = max(fast, paced) <= TARGET_CPU_RATIO if measured else None  # both must meet it
        out.append(
            (
                f"{level:>4} streams: sse-proxy passthrough CPU/event = {fast:.2f}x bare aiohttp "
                f"(throughput), {paced:.2f}x (paced){extra}  [target <= {TARGET_CPU_RATIO}x]",
                ok,
            )
        )
        baseline = by.get("sse-baseline")
        if baseline is not None:
            fast_b = sse.cpu_us_per_event / baseline.cpu_us_per_event
            paced_b = sse.paced_cpu_us_per_event / baseline.paced_cpu_us_per_event
            out.append(
                (
                    f"{level:>4} streams: sse-proxy passthrough CPU/event = {fast_b:.3f}x the "
                    f"baseline ({BASELINE_SRC}) (throughput), {paced_b:.3f}x (paced)  "
                    f"[target paced <= {TARGET_BASELINE_RATIO}x]",
                    paced_b <= TARGET_BASELINE_RATIO if paced_b == paced_b else None,
                )
            )
    lat_rows = levels_rows.get(TARGET_LEVEL_LATENCY)
    if lat_rows:
        by = {r.contender: r for r in lat_rows}
        sse, base = by.get("sse-passthrough"), by.get("direct")
        if sse is not None and base is not None:
            added = sse.lat_p50_ms - base.lat_p50_ms
            bare = by.get("bare-aiohttp")
            bare_txt = (
                f"; bare aiohttp adds {bare.lat_p50_ms - base.lat_p50_ms:+.3f} ms"
                if bare is not None
                else ""
            )
            out.append(
                (
                    f"  50 paced streams: sse-proxy passthrough adds {added:+.3f} ms p50 per event "
                    f"over direct (raw send->arrival p50 {sse.lat_p50_ms:.3f} ms){bare_txt}  "
                    f"[target <= {TARGET_ADDED_P50_MS} ms]",
                    added <= TARGET_ADDED_P50_MS if added == added else None,
                )
            )
    return out


# issue 9's targets, for the --peers run (sse-proxy passthrough vs bare aiohttp on the same loop)
TARGET_PACED_CPU = 1.3  # CPU/event, paced, at most
TARGET_SATURATED_CPU = 1.6  # CPU/event, saturated, at most
TARGET_THROUGHPUT = 0.6  # saturated events/s, at least
PEER_PACE_MS = 20.0


def _ok(value: float, good: Callable[[float], bool]) -> bool | None:
    return good(value) if value == value else None  # NaN (a row failed) -> n/a


def _usable(rows: list[Row]) -> dict[str, Row]:
    return {r.contender: r for r in rows if not r.note.startswith(("did not start", "failed"))}


def _paired(rounds: list[list[Row]], value: Callable[[dict[str, Row]], float]) -> list[float]:
    """``value`` computed within each round: two contenders measured minutes apart on a
    shared machine drift apart; two measured back to back mostly drift together."""
    out = []
    for rows in rounds:
        try:
            v = value(_usable(rows))
        except KeyError:
            continue
        if v == v:
            out.append(v)
    return out


def _median_of(vals: list[float]) -> float:
    return statistics.median(vals) if vals else float("nan")


def _rounds_txt(vals: list[float], fmt: str) -> str:
    return "" if len(vals) < 2 else " per round " + ", ".join(format(v, fmt) for v in vals) + ";"


def peer_ratio_lines(
    rows: list[Row], rounds: list[list[Row]] | None = None
) -> list[tuple[str, bool | None]]:
    """Issue 9's ratios, all from this one run (50 streams).

    With several rounds, each ratio (and the added latency) is taken within each round,
    bare and sse-proxy back to back, and the verdict is the median of those.
    """
    rounds = rounds or [rows]
    by = _usable(rows)
    out: list[tuple[str, bool | None]] = []
    direct = by.get("direct")
    for loop in LOOPS:
        sse_name, bare_name = f"sse-{loop}", f"bare-{loop}"
        sse, bare = by.get(sse_name), by.get(bare_name)
        if sse is None or bare is None:
            continue
        who = f"{sse_name} / {bare_name}"

        def ratio(attr: str, s: str = sse_name, b: str = bare_name) -> list[float]:
            return _paired(rounds, lambda r: getattr(r[s], attr) / getattr(r[b], attr))

        paced_r = ratio("paced_cpu_us_per_event")
        sat_r = ratio("cpu_us_per_event")
        thr_r = ratio("events_per_s")
        paced, sat, thr = _median_of(paced_r), _median_of(sat_r), _median_of(thr_r)
        out.append(
            (
                f"{who}: CPU/event paced {paced:.2f}x ({_rounds_txt(paced_r, '.2f')} medians "
                f"{sse.paced_cpu_us_per_event:.1f} vs {bare.paced_cpu_us_per_event:.1f} µs)  "
                f"[target <= {TARGET_PACED_CPU}x]",
                _ok(paced, lambda v: v <= TARGET_PACED_CPU),
            )
        )
        out.append(
            (
                f"{who}: CPU/event saturated {sat:.2f}x ({_rounds_txt(sat_r, '.2f')} medians "
                f"{sse.cpu_us_per_event:.1f} vs {bare.cpu_us_per_event:.1f} µs)  "
                f"[target <= {TARGET_SATURATED_CPU}x]",
                _ok(sat, lambda v: v <= TARGET_SATURATED_CPU),
            )
        )
        out.append(
            (
                f"{who}: saturated throughput {thr:.2f}x ({_rounds_txt(thr_r, '.2f')} medians "
                f"{sse.events_per_s:,.0f} vs {bare.events_per_s:,.0f} events/s)  "
                f"[target >= {TARGET_THROUGHPUT}x]",
                _ok(thr, lambda v: v >= TARGET_THROUGHPUT),
            )
        )
    if direct is not None:
        for loop in LOOPS:
            sse_name, bare_name = f"sse-{loop}", f"bare-{loop}"
            sse = by.get(sse_name)
            if sse is None:
                continue

            def added_in(name: str, attr: str = "lat_p50_ms") -> list[float]:
                return _paired(
                    rounds, lambda r: getattr(r[name], attr) - getattr(r["direct"], attr)
                )

            added_r = added_in(sse_name)
            added = _median_of(added_r)
            p99 = _median_of(added_in(sse_name, "lat_p99_ms"))
            bare_txt = (
                f"; {bare_name} adds {_median_of(added_in(bare_name)):+.3f} ms"
                if bare_name in by
                else ""
            )
            out.append(
                (
                    f"{sse_name}: added latency p50 {added:+.3f} ms at 50 paced streams "
                    f"({_rounds_txt(added_r, '+.3f')} p99 {p99:+.3f} ms){bare_txt}  "
                    f"[target <= {TARGET_ADDED_P50_MS} ms]",
                    _ok(added, lambda v: v <= TARGET_ADDED_P50_MS),
                )
            )
    for peer in ("mitmproxy", "litellm"):
        other = by.get(peer)
        if other is None:
            continue
        for loop in LOOPS:
            sse = by.get(f"sse-{loop}")
            if sse is None:
                continue
            sat = sse.cpu_us_per_event / other.cpu_us_per_event
            paced = sse.paced_cpu_us_per_event / other.paced_cpu_us_per_event
            parts = [
                f"CPU/event saturated {sat:.3g}x (1/{1 / sat:.3g})",
                f"paced {paced:.3g}x (1/{1 / paced:.3g})",
                f"throughput {sse.events_per_s / other.events_per_s:.3g}x",
            ]
            if direct is not None:
                parts.append(
                    f"added p50 {sse.lat_p50_ms - direct.lat_p50_ms:+.3f} vs "
                    f"{other.lat_p50_ms - direct.lat_p50_ms:+.3f} ms"
                )
            out.append((f"sse-{loop} / {peer}: " + ", ".join(parts) + "  [comparison]", None))
    return out


# -- the long stream -------------------------------------------------------------------------


def long_stream(name: str, plan: Plan, upstream: Service, workdir: Path) -> tuple[str, bool | None]:
    print(
        f"\n== memory over one long stream: {plan.long_events:,} events through "
        f"{name}, RSS sampled every second =="
    )
    try:
        svc = start_contender(name, upstream, workdir)
    except (RuntimeError, OSError) as exc:
        print(f"   {name} did not start: {exc}")
        return f"long stream, {name}: not run", None
    assert svc is not None
    phases = [
        {"name": "warmup", "streams": 1, "n": 1000, "timeout_s": 60},
        {"name": "long", "streams": 1, "n": plan.long_events, "timeout_s": plan.timeout_s},
    ]
    load = LoadGen(svc.url, phases)
    samples: list[float] = []
    idle = float("nan")
    try:
        load.run("warmup", 60)

        def before() -> None:
            nonlocal idle
            idle = rss_mib(svc.pids)

        res = load.run(
            "long", plan.timeout_s, before, tick=lambda: samples.append(rss_mib(svc.pids))
        )
        samples.append(rss_mib(svc.pids))  # at the end of the stream
    except (RuntimeError, TimeoutError, AssertionError) as exc:
        print(f"   failed: {exc}")
        res = None
    finally:
        load.stop()
        peak = peak_rss_mib(svc.pids)
        svc.stop()
    if res is None or len(samples) < 2:
        return f"long stream, {name}: too short to sample (raise --long-events)", None
    print(
        f"   {res['frames']:,} events in {res['wall_s']:.1f} s ({res['events_per_s']:,.0f}/s), "
        f"errors: {res['error_count']}"
    )
    print(
        f"   RSS MiB before the stream: {idle:.1f}; samples: "
        + " ".join(f"{s:.1f}" for s in samples)
    )
    first, last, top = samples[0], samples[-1], max(samples)
    growth = top - first
    flat = growth <= max(MEMORY_FLAT_MIB, 0.05 * first) and res["error_count"] == 0
    for k, v in res["errors"].items():
        print(f"   ! {k} (x{v})")
    if peak > top + 1:
        print(f"   note: VmHWM {peak:.1f} MiB > the sampled max: a peak fell between samples")
    print(
        f"   first {first:.1f}  last {last:.1f}  max {top:.1f}  (max - first {growth:+.1f} MiB; "
        f"VmHWM {peak:.1f})"
    )
    return (
        f"long stream, {name}: RSS first {first:.1f} / last {last:.1f} / max {top:.1f} MiB over "
        f"{res['wall_s']:.0f} s  [target: flat, max - first <= {MEMORY_FLAT_MIB:g} MiB or 5 %]",
        flat,
    )


# -- profile ---------------------------------------------------------------------------------


_LAYERS = (
    ("sse_proxy/core/", "sse-proxy core: framing, UTF-8, dialect JSON (incl. orjson)"),
    ("sse_proxy/rechunk/", "sse-proxy rechunk planner"),
    ("sse_proxy/", "sse-proxy server, logging, metrics"),
    ("aiohttp/", "aiohttp (HTTP parsing, streams, writer)"),
    ("asyncio/", "asyncio event loop + socket syscalls"),
    ("selectors", "asyncio event loop + socket syscalls"),
)


def _layer(where: str) -> str:
    for prefix, label in _LAYERS:
        if where.startswith(prefix) or f"/{prefix}" in where:
            return label
    return f"other ({where.rsplit('/', 1)[-1] or '?'})"


def _summarize_raw(path: Path, top: int = 25) -> None:
    """Own and inclusive time per function from py-spy's raw (collapsed) output.

    Without --native, time in C code (orjson, socket send/recv) is charged to the Python
    function that called it.
    """
    own: Counter[str] = Counter()
    incl: Counter[str] = Counter()
    layers: Counter[str] = Counter()
    total = 0
    roots = [str(r) + "/" for r in (PROXY_SRC, ROOT) if r is not None]
    frame_re = re.compile(r"^(.*) \((.*?)(?::\d+)?\)$")
    for line in path.read_text(errors="replace").splitlines():
        stack, _, count_txt = line.rpartition(" ")
        if not stack or not count_txt.isdigit():
            continue
        count = int(count_txt)
        total += count
        names = []
        for frame in stack.split(";"):
            m = frame_re.match(frame)
            fn, where = (m.group(1), m.group(2)) if m else (frame, "")
            where = where.split("site-packages/")[-1]
            for root in roots:
                where = where.replace(root, "")
            names.append(f"{fn} ({where})")
        own[names[-1]] += count
        layers[_layer(names[-1].rpartition(" (")[2].removesuffix(")"))] += count
        for name in set(names):
            incl[name] += count
    if not total:
        print("   py-spy recorded no samples")
        return
    print(f"\n   {total} samples (busy only). Own time by layer:")
    for name, c in layers.most_common():
        print(f"   {100 * c / total:5.1f}%  {name}")
    print("\n   Top functions by own time:")
    for name, c in own.most_common(top):
        print(f"   {100 * c / total:5.1f}%  {name}")
    print("\n   Top functions by inclusive time:")
    for name, c in incl.most_common(top):
        print(f"   {100 * c / total:5.1f}%  {name}")


def profile(seconds: float, mode: str, workdir: Path, keep: Path | None, paced: bool) -> int:
    spy = shutil.which("py-spy") or str(Path(sys.executable).with_name("py-spy"))
    if not Path(spy).exists():
        print("py-spy is not installed: .venv/bin/pip install py-spy")
        return 2
    upstream = _start_upstream(workdir)
    svc = None
    load = None
    try:
        svc = start_contender(
            "bare-aiohttp" if mode == "bare" else f"sse-{mode}", upstream, workdir
        )
        assert svc is not None
        phases = [
            {"name": "warmup", "streams": 20, "n": 200, "timeout_s": 60},
            {"name": "load", "streams": 50, "n": 2000, "until_s": seconds + 4, "timeout_s": 300}
            if not paced
            else {
                "name": "load",
                "streams": 50,
                "n": round((seconds + 4) * 1000 / PACE_MS),
                "pace_ms": PACE_MS,
                "latency": True,
                "timeout_s": 300,
            },
        ]
        load = LoadGen(svc.url, phases)
        load.run("warmup", 60)
        out = keep or workdir / "py-spy.txt"
        spy_proc: list[subprocess.Popen[bytes]] = []

        def start_spy() -> None:
            argv = [spy, "record", "-o", str(out), "--format", "raw", "-d", str(int(seconds))]
            spy_proc.append(
                subprocess.Popen(
                    [*argv, "-p", str(svc.proc.pid)],
                    stdout=subprocess.DEVNULL,
                    stderr=subprocess.DEVNULL,
                )
            )

        res = load.run("load", 300, start_spy)
        spy_proc[0].wait(timeout=seconds + 30)
        print(
            f"{svc.name} under 50 {'paced ' if paced else ''}streams: "
            f"{res['events_per_s']:,.0f} events/s, "
            + (f"lat p50 {res['lat_p50_ms']:.3f} ms, " if paced else "")
            + f"errors {res['error_count']}"
            + (f"; py-spy raw output: {out}" if keep else "")
        )
        _summarize_raw(out)
    finally:
        if load is not None:
            load.stop()
        if svc is not None:
            svc.stop()
        upstream.stop()
    return 0


# -- main ------------------------------------------------------------------------------------


def _start_upstream(workdir: Path, loop: str = "asyncio") -> Service:
    port = _free_port()
    argv = [sys.executable, "-m", "bench.bench_proxy", "_upstream", "--port", str(port)]
    return Service("upstream", [*argv, "--loop", loop], port, log=workdir / "upstream.log")


def _cpu_model() -> str:
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "unknown CPU"


def _loadavg() -> str:
    with contextlib.suppress(OSError):
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    return "?"


def _proxy_source() -> str:
    src = PROXY_SRC or ROOT
    where = "" if PROXY_SRC is None else f"{src}: "
    with contextlib.suppress(OSError, subprocess.SubprocessError):
        head = subprocess.run(
            ["git", "-C", str(src), "log", "-1", "--format=%h %s"],
            check=False,
            capture_output=True,
            text=True,
            timeout=10,
        )
        dirty = subprocess.run(
            ["git", "-C", str(src), "status", "--porcelain", "--", package_in(src) or "."],
            check=False,
            capture_output=True,
            text=True,
            timeout=10,
        )
        if head.returncode == 0:
            n = len(dirty.stdout.splitlines())
            state = f" + {n} uncommitted change(s) under {package_in(src)}/" if n else ""
            return f"{where}{head.stdout.strip()}{state}"
    return f"{where}(not a git work tree)"


def _versions() -> str:
    import aiohttp

    parts = [f"Python {sys.version.split()[0]}", f"aiohttp {aiohttp.__version__}"]
    nginx = shutil.which("nginx")
    if nginx:
        with contextlib.suppress(OSError, subprocess.SubprocessError):
            out = subprocess.run(
                [nginx, "-v"], check=False, capture_output=True, text=True, timeout=10
            )
            parts.append(out.stderr.strip().removeprefix("nginx version: "))
    return ", ".join(parts)


def _peer_versions(names: Sequence[str]) -> str:
    parts = []
    if any(n.endswith("-uvloop") for n in names):
        from importlib.metadata import version

        parts.append(f"uvloop {version('uvloop')}")
    parts.append(
        "sse-proxy serve --loop: " + ("yes" if sse_proxy_has_loop_flag() else "no (runs asyncio)")
    )
    for name, exe_name, module in (
        ("mitmproxy", "mitmdump", "mitmproxy"),
        ("litellm", "litellm", "litellm"),
    ):
        exe = peer_exe(exe_name)
        if name in names and exe is not None:
            parts.append(f"{name} {peer_version(exe, module)} ({exe})")
    return "peers: " + "; ".join(parts)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    roles = {"_upstream": _role_upstream, "_bare": _role_bare, "_load": _role_load}
    if argv and argv[0] in roles:
        return roles[argv[0]](argv[1:])

    ap = argparse.ArgumentParser(
        prog="python -m bench.bench_proxy",
        description="sse-proxy vs direct, a bare aiohttp proxy and nginx, over loopback.",
    )
    ap.add_argument(
        "--quick", action="store_true", help="fewer events: under a minute (--peers: ~2 min)"
    )
    ap.add_argument(
        "--peers",
        action="store_true",
        help="issue 9's run: 50 streams, saturated and paced (20 ms), bare aiohttp and sse-proxy "
        "passthrough on asyncio and on uvloop, mitmproxy and LiteLLM where installed, and the "
        "issue's ratios (--quick: ~2 min)",
    )
    ap.add_argument(
        "--setup-peers",
        action="store_true",
        help="install mitmproxy and LiteLLM into bench/.peers-venv/ (bench/setup_peers.sh), exit",
    )
    ap.add_argument(
        "--pace-ms", type=float, default=None, help="gap between paced events, ms (default 5)"
    )
    ap.add_argument("--levels", default=None, help="concurrent streams, comma-separated")
    ap.add_argument(
        "--repeat",
        type=int,
        default=1,
        help="measure every contender this many times, round-robin, and print each column's "
        "median (on a shared machine, 3 steadies the ratios)",
    )
    ap.add_argument("--events", type=int, default=None, help="events per level (throughput)")
    ap.add_argument("--paced-s", type=float, default=None, help="length of each paced stream, s")
    ap.add_argument(
        "--long-events", type=int, default=None, help="events in the long stream (0: skip it)"
    )
    ap.add_argument(
        "--contenders",
        default=None,
        help=f"which to run, of: {', '.join(ALL_CONTENDERS)} (default: the first five, and "
        "sse-baseline with --baseline-src; --peers: " + ", ".join(PEER_CONTENDERS) + ")",
    )
    ap.add_argument(
        "--baseline-src",
        type=Path,
        default=None,
        help="also run passthrough from this source tree (e.g. `git archive main`) and print "
        "the CPU/event ratio against it",
    )
    ap.add_argument(
        "--profile",
        type=float,
        metavar="SECONDS",
        default=None,
        help="instead: py-spy record one sse-proxy under 50 streams and print top functions",
    )
    ap.add_argument(
        "--profile-mode", default="passthrough", choices=("passthrough", "frames", "bare")
    )
    ap.add_argument(
        "--pin",
        action="store_true",
        help="the proxy under test on the last CPU, the upstream and the load generator on "
        "the others (sched_setaffinity), so the added latency is the proxy's own; needs 2+ CPUs",
    )
    ap.add_argument(
        "--nice",
        type=int,
        default=None,
        help="run the bench and everything it starts at this nice value (negative needs root): "
        "on a shared machine, -5 keeps others' jobs from skewing the figures",
    )
    ap.add_argument(
        "--profile-paced", action="store_true", help="profile under 50 paced streams instead"
    )
    ap.add_argument("--profile-out", type=Path, default=None, help="keep py-spy's raw output")
    ap.add_argument(
        "--proxy-src",
        type=Path,
        default=None,
        help="run sse-proxy from this source tree (e.g. a `git archive` snapshot)",
    )
    args = ap.parse_args(argv)
    if args.repeat < 1:
        ap.error("--repeat: at least 1")
    global PROXY_SRC, BASELINE_SRC, PIN  # noqa: PLW0603 - one switch for the whole run
    if args.setup_peers:
        return subprocess.run(["bash", str(SETUP_PEERS)], check=False).returncode
    if args.pin:
        if len(os.sched_getaffinity(0)) < 2:
            ap.error("--pin: needs at least 2 CPUs")
        PIN = True
    if args.nice is not None:
        try:
            os.setpriority(os.PRIO_PROCESS, 0, args.nice)  # inherited by every child
        except OSError as exc:
            ap.error(f"--nice {args.nice}: {exc.strerror}")
    if args.baseline_src is not None:
        BASELINE_SRC = args.baseline_src.resolve()
        if package_in(BASELINE_SRC) is None:
            ap.error(f"--baseline-src: no sse_proxy/ (or proxy/) package under {BASELINE_SRC}")
    if args.contenders is None and not args.peers:
        args.contenders = ",".join(
            c for c in CONTENDERS if c != "sse-baseline" or BASELINE_SRC is not None
        )
    if args.proxy_src is not None:
        PROXY_SRC = args.proxy_src.resolve()
        if package_in(PROXY_SRC) is None:
            ap.error(f"--proxy-src: no sse_proxy/ (or proxy/) package under {PROXY_SRC}")

    with tempfile.TemporaryDirectory(prefix="bench-proxy-") as tmp:
        workdir = Path(tmp)
        if args.profile is not None:
            return profile(
                args.profile, args.profile_mode, workdir, args.profile_out, args.profile_paced
            )
        try:
            levels = tuple(
                int(x) for x in (args.levels or ("50" if args.peers else "1,50,500")).split(",")
            )
        except ValueError:
            ap.error(f"--levels: comma-separated integers, not {args.levels!r}")
        if args.peers:
            long_default = 0
            paced_default = 2.0 if args.quick else 6.0
        else:
            long_default = 300_000 if args.quick else 2_000_000
            paced_default = 0.8 if args.quick else 3.0
        plan = Plan(
            levels=levels,
            events=args.events if args.events else (50_000 if args.quick else 300_000),
            paced_s=args.paced_s or paced_default,
            long_events=args.long_events if args.long_events is not None else long_default,
            timeout_s=120.0,
            pace_ms=args.pace_ms or (PEER_PACE_MS if args.peers else PACE_MS),
        )
        default = PEER_CONTENDERS if args.peers else CONTENDERS
        names = [c for c in (args.contenders or ",".join(default)).split(",") if c]
        unknown = set(names) - set(ALL_CONTENDERS)
        if unknown:
            ap.error(f"unknown contenders: {', '.join(sorted(unknown))}")
        skipped = {n: note for n in names if (note := contender_unavailable(n))}
        names = [n for n in names if n not in skipped]
        print(f"bench_proxy: {os.cpu_count()} CPUs ({_cpu_model()}); {_versions()}")
        print(f"sse-proxy under test: {_proxy_source()}")
        nice = os.getpriority(os.PRIO_PROCESS, 0)
        print(f"load average at start: {_loadavg()}; bench processes at nice {nice}")
        print(
            "columns: events/s = throughput through the contender (upstream writes as fast as "
            "it can, one event per write); CPU µs/ev and CPU % = the proxy process's "
            "utime+stime during that phase; paced µs/ev = the same with the paced upstream; "
            "lat p50/p99 = send->arrival ms per event with the paced upstream; added = minus "
            "direct's; peak RSS = VmHWM MiB; up % / load % = upstream and load generator CPU "
            "during the throughput phase (near 100 = that process was the bottleneck); "
            "other % = CPU used by everything else on the machine during the throughput/paced "
            "phases (should be ~0; if not, the run shared the CPUs)"
        )
        for n, note in skipped.items():
            print(f"{n} skipped: {note}")
        if (
            not args.peers
            and {"bare-aiohttp", "sse-passthrough"} <= set(names)
            and sse_proxy_has_loop_flag()
        ):
            print(
                "note: bare-aiohttp runs on asyncio, sse-passthrough on sse-proxy's default loop "
                "(--loop auto: uvloop where installed); --peers compares them loop by loop"
            )
        if args.peers:
            print(_peer_versions(names))
        started = time.monotonic()
        upstream = _start_upstream(workdir)
        verdicts: list[tuple[str, bool | None]] = []
        try:
            all_rows: dict[int, list[Row]] = {}
            all_rounds: dict[int, list[list[Row]]] = {}
            for level in levels:
                rounds: list[list[Row]] = []
                for i in range(args.repeat):  # round-robin, so slow drifts in load hit all
                    if args.repeat > 1:
                        print(f"   (level {level}: round {i + 1} of {args.repeat})", flush=True)
                    rounds.append([measure(name, level, plan, upstream, workdir) for name in names])
                rows = [median_row(list(same)) for same in zip(*rounds, strict=True)]
                all_rows[level] = rows
                all_rounds[level] = rounds
                print_table(level, plan, rows)
                sys.stdout.flush()
            verdicts += ratio_lines(all_rows)
            if args.peers:
                for level, rows in all_rows.items():
                    verdicts += peer_ratio_lines(rows, all_rounds[level])
            if "sse-passthrough" in names and plan.long_events > 0:
                if "bare-aiohttp" in names:  # the reference: what aiohttp itself holds
                    text, _ = long_stream("bare-aiohttp", plan, upstream, workdir)
                    verdicts.append((text.replace("  [target", "  [reference; target"), None))
                verdicts.append(long_stream("sse-passthrough", plan, upstream, workdir))
        finally:
            upstream.stop()
        print("\n== targets ==")
        for text, ok in verdicts:
            mark = "n/a" if ok is None else ("PASS" if ok else "MISSED")
            print(f"[{mark:<6}] {text}")
        print(f"\n(total {time.monotonic() - started:.0f} s; load average at end: {_loadavg()})")
        errors = any(r.errors for rows in all_rows.values() for r in rows)
    return 1 if errors else 0


if __name__ == "__main__":
    raise SystemExit(main())
