"""The benchmark rig of ``bench_proxy`` and ``bench_scale``: the OpenAI-style stream, the
upstream that writes it, the bare aiohttp pass-through proxy, the load generator, and the
contenders (sse-proxy, nginx, mitmproxy, LiteLLM) started in front of the upstream.

The upstream, the bare proxy and the load generator run as processes of their own
(``python -m bench.rig _upstream|_bare|_load ...``). Each event carries the upstream's
``time.time_ns()`` at send time; the load generator subtracts it from the arrival time.
Processes, ports, CPU and memory are :mod:`bench.harness`'s.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import os
import queue
import re
import resource
import shutil
import signal
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

from bench.harness import (
    ROOT,
    Service,
    die_with_parent,
    free_port,
    pct_ms,
    pin_to,
    with_pythonpath,
)

NGINX_TEMPLATE = Path(__file__).with_name("nginx.conf.template")
API_PATH = "/v1/chat/completions"

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
TS_RE = re.compile(rb'"t":\d{%d}' % TS_DIGITS)
TS_ZERO = b'"t":' + b"0" * TS_DIGITS
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
    return TS_RE.sub(TS_ZERO, b"".join(event(i, zero) for i in range(n)) + final_events(zero))


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

REQUEST_BODY = json.dumps(
    {
        "model": "gpt-4o-mini",
        "stream": True,
        "messages": [{"role": "user", "content": "Say hello in twenty languages."}],
    }
).encode()
REQUEST_HEADERS = {
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
    body = REQUEST_BODY
    if lenient:
        body = json.dumps(
            {**json.loads(REQUEST_BODY), "user": f"bench:n={n}:pace_ms={pace_ms:g}:tsc=1"}
        ).encode()
    try:
        async with session.post(
            url,
            params={"n": str(n), "pace_ms": str(pace_ms)},
            data=body,
            headers=REQUEST_HEADERS,
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
        same = TS_RE.sub(TS_ZERO, b"".join(keep)) == expected_stream(n)
        tally.verified = same
        if not same:
            tally.errors["stream bytes differ from what upstream sent"] += 1
            return
    tally.ok += 1


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
        "lat_p50_ms": pct_ms(lats, 50),
        "lat_p99_ms": pct_ms(lats, 99),
        "lat_max_ms": pct_ms(lats, 100),
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


class LoadGen:
    """The load generator process; runs its phases one at a time on our say-so."""

    def __init__(self, url: str, phases: list[dict[str, Any]]) -> None:
        self.proc = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "bench.rig",
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
            preexec_fn=die_with_parent,  # noqa: PLW1509 - one prctl call, no locks
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
# --peers: each loop explicit, and the proxies a user would pick instead
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
            None if PROXY_SRC is None else {**os.environ, "PYTHONPATH": with_pythonpath(PROXY_SRC)}
        )
        try:
            out = subprocess.run(
                [*sse_proxy_argv(), "serve", "--help"],
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
    name = name.partition("+")[0]  # (observers: the proxy they run in)
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
    pin_to(pids, {cpus[-1]} if role == "proxy" else set(cpus[:-1]))


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


def sse_proxy_argv(src: Path | None = None) -> list[str]:
    src = src or PROXY_SRC
    if src is not None:
        return [sys.executable, "-m", package_in(src) or "sse_proxy"]
    script = Path(sys.executable).with_name("sse-proxy")
    return [str(script)] if script.exists() else [sys.executable, "-m", "sse_proxy"]


def start_contender(name: str, upstream: Service, workdir: Path) -> Service | None:
    """Start ``name``'s proxy in front of ``upstream``; None for ``direct``."""
    if name == "direct":
        return None
    port = free_port()
    log = workdir / f"{name}.log"
    if name in ("bare-aiohttp", "bare-asyncio", "bare-uvloop"):
        argv = [sys.executable, "-m", "bench.rig", "_bare", "--port", str(port)]
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
        argv = [*sse_proxy_argv(BASELINE_SRC), "serve", "--upstream", upstream.url]
        argv += ["--port", str(port), "--mode", "passthrough", "--log-level", SSE_LOG_LEVEL]
        env = {**os.environ, "PYTHONPATH": with_pythonpath(BASELINE_SRC)}
        return Service(name, argv, port, log=log, cwd=BASELINE_SRC, env=env)
    name, *extras = name.split("+")
    mode = name.removeprefix("sse-")
    sse_loop: str | None = None
    if mode in LOOPS:  # sse-asyncio / sse-uvloop: passthrough on that loop
        mode, sse_loop = "passthrough", mode
    argv = [*sse_proxy_argv(), "serve", "--upstream", upstream.url, "--port", str(port)]
    argv += ["--mode", mode, "--log-level", SSE_LOG_LEVEL]
    if sse_loop is not None and sse_proxy_has_loop_flag():
        argv += ["--loop", sse_loop]  # without the flag, sse-proxy runs on asyncio
    argv += observer_args(extras, workdir)
    if PROXY_SRC is None:
        return Service(name, argv, port, log=log)
    env = {**os.environ, "PYTHONPATH": with_pythonpath(PROXY_SRC)}
    return Service(name, argv, port, log=log, cwd=PROXY_SRC, env=env)


# -- observers: "sse-uvloop+obs+broken" is sse-uvloop with these options -----------------------

OTLP_URL: str | None = None  # the bench's OTLP receiver (start_otlp_sink), for "+obs"
OBSERVER_MODELS = "gpt-4o-mini,gpt-4o-mini-2024-07-18"  # the rig's request and response models
OBSERVERS: dict[str, str] = {
    "obs": "the inspector, per-model metrics, OTLP spans and streaming metrics",
    "ui": "the inspector alone",
    "models": "per-model metrics alone",
    "otlp": "OTLP spans and streaming metrics alone",
    "broken": "the flight recorder keeping broken streams (--record DIR --record-on broken)",
    "all": "recording every stream (--record DIR)",
}


def observer_args(extras: Sequence[str], workdir: Path) -> list[str]:
    """``serve`` options for a contender's ``+extra`` suffixes (:data:`OBSERVERS`); each
    recording contender gets a new folder under ``workdir``."""
    out: list[str] = []
    for extra in extras:
        if extra == "obs":
            if OTLP_URL is None:
                raise RuntimeError("+obs needs the OTLP receiver: rig.OTLP_URL (start_otlp_sink)")
            out += ["--ui", "--metrics-models", OBSERVER_MODELS, "--otlp-endpoint", OTLP_URL]
        elif extra == "ui":
            out += ["--ui"]
        elif extra == "models":
            out += ["--metrics-models", OBSERVER_MODELS]
        elif extra == "otlp":
            if OTLP_URL is None:
                raise RuntimeError("+otlp needs the OTLP receiver: rig.OTLP_URL (start_otlp_sink)")
            out += ["--otlp-endpoint", OTLP_URL]
        elif extra in ("broken", "all"):
            where = Path(tempfile.mkdtemp(prefix=f"record-{extra}-", dir=workdir))
            out += ["--record", str(where)]
            if extra == "broken":
                out += ["--record-on", "broken"]
        else:
            raise RuntimeError(f"unknown observer {extra!r} (one of {', '.join(OBSERVERS)})")
    return out


async def _otlp_handler(request: Any) -> Any:
    from aiohttp import web

    await request.read()
    return web.Response(body=b"", content_type="application/x-protobuf")


def _role_otlp(argv: Sequence[str]) -> int:
    """An OTLP/HTTP receiver that accepts every export and keeps nothing."""
    from aiohttp import web

    ap = argparse.ArgumentParser(prog="bench.rig _otlp")
    ap.add_argument("--port", type=int, required=True)
    args = ap.parse_args(argv)
    app = web.Application(client_max_size=64 << 20)
    for path in ("/v1/traces", "/v1/metrics", "/v1/logs"):
        app.router.add_post(path, _otlp_handler)
    run_on("asyncio", _serve(app, args.port, backlog=128))
    return 0


def start_otlp_sink(workdir: Path) -> Service:
    port = free_port()
    argv = [sys.executable, "-m", "bench.rig", "_otlp", "--port", str(port)]
    return Service("otlp", argv, port, log=workdir / "otlp.log")


def nginx_available() -> str | None:
    """None if nginx can be used, else why not."""
    if not (shutil.which("nginx") or Path("/usr/sbin/nginx").exists()):
        return "nginx is not installed (apt-get install -y nginx-light)"
    return None


def start_upstream(workdir: Path, loop: str = "asyncio") -> Service:
    port = free_port()
    argv = [sys.executable, "-m", "bench.rig", "_upstream", "--port", str(port)]
    return Service("upstream", [*argv, "--loop", loop], port, log=workdir / "upstream.log")


def proxy_source() -> str:
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


def versions() -> str:
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


def peer_versions(names: Sequence[str]) -> str:
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
    """Run one of the rig's processes: ``_upstream``, ``_bare`` or ``_load``."""
    argv = list(sys.argv[1:] if argv is None else argv)
    roles = {
        "_upstream": _role_upstream,
        "_bare": _role_bare,
        "_load": _role_load,
        "_otlp": _role_otlp,
    }
    if not argv or argv[0] not in roles:
        print(f"usage: python -m bench.rig {{{','.join(roles)}}} ...", file=sys.stderr)
        return 2
    return roles[argv[0]](argv[1:])


if __name__ == "__main__":
    sys.exit(main())
