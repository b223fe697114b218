"""`sse-proxy replay FILE`: serve a recording as an upstream, exactly as it was received.

A garbled answer seen once in production becomes a test fixture forever: the recording
keeps every upstream read with its timing, and replaying it writes the same bytes with the
same boundaries (one write per recorded read, each flushed on its own), optionally with a
chaos strategy on top. Replay with chaos is fully reproducible: the reads are fixed, so the
same seed gives the same writes on every run, unlike a live upstream whose reads vary.

Every request, whatever its method or path, gets the whole recorded response: the recorded
status and headers (minus hop-by-hop ones and Content-Length, as the body is re-framed) and
the recorded body. The request body is read and discarded.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
import sys
from dataclasses import dataclass
from typing import TYPE_CHECKING

from aiohttp import web

from sse_proxy.core import StreamReassembler, dialect_for_path
from sse_proxy.errors import ChaosSpecError, UsageError
from sse_proxy.names import SEED_HEADER
from sse_proxy.rechunk.planner import ChaosPlanner, Write
from sse_proxy.rechunk.spec import ChaosSpec
from sse_proxy.recording import Recording, load_capture
from sse_proxy.server.headers import HOP_BY_HOP

if TYPE_CHECKING:
    from sse_proxy.tools.lockstep import Lockstep

__all__ = ["ReplayPlan", "plan_replay", "run_replay", "start_replay"]

# Hop-by-hop headers, and those the replaying server sets itself for the re-framed body.
_DROP_HEADERS = HOP_BY_HOP | {"content-length", "date", "server"}


@dataclass(frozen=True, slots=True)
class ReplayPlan:
    """The writes of one replayed response, each due ``at`` seconds after the request."""

    status: int
    reason: str | None
    headers: tuple[tuple[str, str], ...]
    writes: tuple[tuple[float, Write], ...]

    @property
    def body(self) -> bytes:
        return b"".join(w.data for _, w in self.writes)


def _headers(recording: Recording) -> tuple[tuple[str, str], ...]:
    raw = recording.response.get("headers") or {}
    if not isinstance(raw, dict):
        raise UsageError("recording: response headers must be an object")
    return tuple((str(k), str(v)) for k, v in raw.items() if str(k).lower() not in _DROP_HEADERS)


def _content_encoding(headers: tuple[tuple[str, str], ...]) -> str:
    for key, value in headers:
        if key.lower() == "content-encoding":
            return value.strip().lower()
    return ""


def plan_replay(recording: Recording, spec: ChaosSpec | None = None) -> ReplayPlan:
    """What a replay writes and when: the recorded reads as they were, or re-chunked.

    Re-chunking needs the frame ends, so each read is fed to a reassembler first, as the
    proxy does. Pure: no sockets, no clock, so tests can compare plans directly.
    """
    headers = _headers(recording)
    status = recording.response.get("status", 200)
    if not isinstance(status, int) or not 100 <= status <= 599:
        raise UsageError(f"recording: bad response status {status!r}")
    reason = recording.response.get("reason")
    if spec is None:
        writes = tuple((t, Write(data)) for t, data in recording.reads if data)
        return ReplayPlan(status, reason if isinstance(reason, str) else None, headers, writes)
    encoding = _content_encoding(headers)
    if encoding not in ("", "identity"):
        raise UsageError(
            f"recording: cannot re-chunk a {encoding}-encoded body (replay it without --chaos)"
        )
    hint = dialect_for_path(str(recording.request.get("path", "")))
    reassembler = StreamReassembler(None, hint=hint, emit_events=False)
    planner = ChaosPlanner(spec, dialect=lambda: reassembler.dialect)
    planned: list[tuple[float, Write]] = []
    last = 0.0
    for t, data in recording.reads:
        out = reassembler.feed(data)
        planned.extend((t, w) for w in planner.plan(data, out.frame_ends))
        last = t
    reassembler.close()
    planned.extend((last, w) for w in planner.flush())
    return ReplayPlan(status, reason if isinstance(reason, str) else None, headers, tuple(planned))


def _spec(chaos: str | ChaosSpec | None, seed: int | None) -> ChaosSpec | None:
    if chaos is None or isinstance(chaos, ChaosSpec):
        return chaos
    try:
        return ChaosSpec.from_options(chaos, seed)
    except ChaosSpecError as exc:
        raise UsageError(f"--chaos: {exc}") from None


def make_replay_app(
    recording: Recording,
    *,
    chaos: str | ChaosSpec | None = None,
    seed: int | None = None,
    timing: bool = True,
    speed: float = 1.0,
    lockstep: Lockstep | None = None,
) -> web.Application:
    """The replay upstream as an aiohttp app; one fixed plan, served to every request.

    A ``lockstep`` paces each write to an in-process proxy's reads (see
    :mod:`sse_proxy.tools.lockstep`)."""
    if not speed > 0:
        raise UsageError(f"--speed must be a positive number, not {speed!r}")
    spec = _spec(chaos, seed)
    plan = plan_replay(recording, spec)

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(status=plan.status, reason=plan.reason)
        for key, value in plan.headers:
            resp.headers.add(key, value)
        if spec is not None:
            resp.headers[SEED_HEADER] = str(spec.seed)
        loop = asyncio.get_running_loop()
        started = loop.time()
        pace = None if lockstep is None else lockstep.begin()
        written = 0
        try:
            await resp.prepare(request)
            for at, write in plan.writes:
                if timing:
                    wait = started + at / speed - loop.time()
                    if wait > 0:
                        await asyncio.sleep(wait)
                if write.delay:
                    await asyncio.sleep(write.delay)
                # One write per recorded read; the yield lets the transport flush it alone.
                await resp.write(write.data)
                written += len(write.data)
                if pace is not None:
                    await pace.written(written)
                await asyncio.sleep(0)
            await resp.write_eof()
        except (ConnectionError, RuntimeError):
            pass  # the client went away; nothing to tell it
        return resp

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return app


async def start_replay(
    recording: Recording,
    *,
    host: str = "127.0.0.1",
    port: int = 0,
    chaos: str | ChaosSpec | None = None,
    seed: int | None = None,
    timing: bool = True,
    speed: float = 1.0,
    lockstep: Lockstep | None = None,
) -> tuple[web.AppRunner, str]:
    """Serve ``recording`` on ``host:port`` (0: ephemeral); return the runner and base URL.

    ``chaos`` (a strategy such as ``"utf8+crlf"`` or a :class:`ChaosSpec`) re-chunks the
    recorded reads; without it each read is one write. ``timing`` keeps the recorded
    timing, scaled by ``speed``. Stop with ``await runner.cleanup()``.
    """
    app = make_replay_app(
        recording, chaos=chaos, seed=seed, timing=timing, speed=speed, lockstep=lockstep
    )
    runner = web.AppRunner(app, access_log=None, shutdown_timeout=1.0)
    await runner.setup()
    site = web.TCPSite(runner, host, port)
    try:
        await site.start()
    except OSError as exc:
        await runner.cleanup()
        raise UsageError(f"cannot listen on {host}:{port}: {exc.strerror or exc}") from None
    bound = int(runner.addresses[0][1])
    shown = f"[{host}]" if ":" in host else host
    return runner, f"http://{shown}:{bound}"


async def _serve(
    path: str,
    host: str,
    port: int,
    chaos: str | None,
    seed: int | None,
    timing: bool,
    speed: float,
) -> int:
    recording = load_capture(path)
    spec = _spec(chaos, seed)
    runner, url = await start_replay(
        recording, host=host, port=port, chaos=spec, timing=timing, speed=speed
    )
    how = f"chaos {spec.header_value()}" if spec is not None else "original read boundaries"
    pace = f"{speed:g}x timing" if timing else "no timing"
    cut = recording.truncated
    truncated = (
        f"; truncated: {cut.get('dropped', '?')} bytes in the middle were not recorded"
        if cut is not None
        else ""
    )
    sys.stdout.write(
        f"replaying {path} ({len(recording.reads)} reads, {len(recording.body)} bytes, "
        f"status {recording.response.get('status', 200)}; {how}, {pace}{truncated}) on {url}\n"
    )
    sys.stdout.flush()
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError):
            loop.add_signal_handler(sig, stop.set)
    try:
        await stop.wait()
    finally:
        await runner.cleanup()
    return 0


def run_replay(
    path: str,
    *,
    host: str = "127.0.0.1",
    port: int = 8788,
    chaos: str | None = None,
    seed: int | None = None,
    timing: bool = True,
    speed: float = 1.0,
) -> int:
    """Blocking entry for ``sse-proxy replay``: serve until SIGINT or SIGTERM."""
    if not speed > 0:
        raise UsageError(f"--speed must be a positive number, not {speed!r}")
    if not 0 <= port <= 65535:
        raise UsageError(f"--port must be 0..65535, not {port}")
    try:
        return asyncio.run(_serve(path, host, port, chaos, seed, timing, speed))
    except KeyboardInterrupt:
        return 0
