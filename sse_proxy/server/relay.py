"""Relaying a response to the client: :func:`respond` writes its head and starts the
relay that fits, the SSE relay here (each read forwarded, observed, maybe re-chunked) or
the plain one (:mod:`.plain`).

The per-read loop of :class:`_SseRelay` is the proxy's hot path: read its
comments before adding anything to it. What watches a stream is a tap (:mod:`.taps`).
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import sys
import time
from collections.abc import Callable, Sequence
from typing import Any

import aiohttp
from aiohttp import web

from sse_proxy.cache import BoundedCache, size_of
from sse_proxy.core import (
    DIALECTS,
    Alert,
    Limits,
    Output,
    StreamReassembler,
    Truncated,
    dialect_for_path,
    normalize_dialect,
)
from sse_proxy.core.dialects.registry import dialect_for_headers
from sse_proxy.core.verdict import strict_end_cause
from sse_proxy.inspect.registry import StreamRecord
from sse_proxy.inspect.web import open_stream
from sse_proxy.names import SEED_HEADER, STREAM_ID_HEADER
from sse_proxy.obs.read_log import ReadLog
from sse_proxy.obs.redact import redact_url
from sse_proxy.obs.sink import AlertSink
from sse_proxy.rechunk.planner import ChaosPlanner, Planner, Write, make_planner
from sse_proxy.rechunk.timefaults import DROPS
from sse_proxy.server.aiohttp_internals import lean_body
from sse_proxy.server.client_writer import ClientGone, ClientWriter, cut_off
from sse_proxy.server.deadlines import IdleWatch
from sse_proxy.server.decompress import DecodeFailed, ObserverDecoder, make_observer_decoder
from sse_proxy.server.delivery import Delivery, Dropped, stream_kind
from sse_proxy.server.exchange import Exchange
from sse_proxy.server.headers import (
    is_event_stream,
    loggable_headers,
    response_headers_for_client,
)
from sse_proxy.server.plain import relay_plain
from sse_proxy.server.recorder import StreamRecording, head_room
from sse_proxy.server.tap_types import StreamEnd
from sse_proxy.server.taps import (
    DecodedInspectorTap,
    GenAIMetricsTap,
    InspectorTap,
    MetricsTap,
    SpanTap,
    SummaryLine,
    Taps,
)
from sse_proxy.server.timing import StreamObserver

__all__ = ["respond"]


async def respond(ex: Exchange, upstream: aiohttp.ClientResponse) -> web.StreamResponse:
    """The client's response to an upstream response: its head, then the right relay."""
    sse = is_event_stream(upstream.headers.get("Content-Type"))
    if ex.span is not None:
        ex.span.response(upstream.status)
    resp = web.StreamResponse(status=upstream.status, reason=upstream.reason)
    resp.headers.extend(response_headers_for_client(upstream.headers))
    resp.headers[STREAM_ID_HEADER] = ex.stream_id
    if not sse:  # (a stream is counted when its observers are built: after its first byte)
        ex.metrics.child(ex.metrics.requests, kind="other").inc()
        ex.count_route()
    if ex.cfg.log_level == "debug":
        ex.upstream_log.debug(
            "upstream.response",
            status=upstream.status,
            upstream_request_id=_upstream_request_id(upstream),
            headers=loggable_headers(upstream.headers),
        )
    if not sse:
        ex.first_byte_sent()  # its head is next; nothing of it is put off (it is rare)
        return await relay_plain(ex, resp, upstream)

    resp.headers["X-Accel-Buffering"] = "no"
    resp.headers["Cache-Control"] = "no-cache"
    spec = ex.spec
    if spec is not None:
        resp.headers[SEED_HEADER] = str(spec.seed)
        if not spec.rechunk_only:  # rewrites and variants change the bytes
            resp.headers.popall("Content-Length", None)
    if ex.cfg.strict_end:
        # chunked toward the client, so that a body ended without its last chunk is broken
        resp.headers.popall("Content-Length", None)
    lean_body(upstream.content)  # read with readany alone: no per-chunk bookkeeping
    relay = _SseRelay(ex, resp, upstream)
    return await relay.run()


# A read that arrived this long after the previous one's work ended was waited for; work
# with no such wait for longer than _BUSY yields to the event loop.
_WAITED = 0.001
_BUSY = 0.02
# A read larger than this is observed in slices, yielding between them.
_SLICE = 16 << 10
_SLICES_FOR = 0.002  # and the loop is let in after this long of them
_NO_TIMEOUT = contextlib.nullcontext()
_monotonic = time.monotonic


def _each(hooks: Sequence[Callable[[bytes, float], None]], chunk: bytes, at: float) -> None:
    for hook in hooks:
        hook(chunk, at)


_HINTS: BoundedCache[str, str] = BoundedCache(1 << 20)
"""The dialect each request path hints at ("": none), worked out once: a stream start asks
for it, with the same few paths (the client's: bounded in bytes)."""


def _hint_for(path: str) -> str | None:
    hint = _HINTS.get(path)
    if hint is None:
        hint = dialect_for_path(path) or ""
        _HINTS.put(path, hint, size_of(path))
    return hint or None


@functools.lru_cache(maxsize=16)
def _limits(max_line: int, max_frame: int) -> Limits:
    """The core's limits of a configuration: one (immutable) value, not one per stream."""
    return Limits(max_line=max_line, max_frame=max_frame)


def _upstream_request_id(upstream: aiohttp.ClientResponse) -> str | None:
    return upstream.headers.get("x-request-id") or upstream.headers.get("request-id")


class _StreamLog:
    """A stream's logger, bound on first use and then kept (the relay's and its alert
    sink's: one bind), its fields taken then too (most streams log one line, their summary,
    and that after their first byte). It holds the exchange, not the relay: no cycle."""

    __slots__ = ("_ex", "_log", "_upstream")

    def __init__(self, ex: Exchange, upstream: aiohttp.ClientResponse) -> None:
        self._ex = ex
        self._upstream = upstream
        self._log: Any = None

    def __call__(self) -> Any:
        log = self._log
        if log is None:
            ex = self._ex
            log = self._log = ex.stream_log(**self._own(), **ex.ctx.fields())
        return log

    def _own(self) -> dict[str, Any]:
        """The response's fields (the mode asked for, and the chaos spec of a chaos one)."""
        ex, upstream = self._ex, self._upstream
        own = {
            "upstream_status": upstream.status,
            "upstream_request_id": _upstream_request_id(upstream),
            "mode": ex.mode,
        }
        if ex.spec is not None:
            own["chaos"] = ex.spec.header_value()
        return own

    def fields(self) -> dict[str, Any]:
        """What the logger is (or would be) bound with, as a dict: a line logged without
        binding one (the summary of a stream that logged nothing else)."""
        ex = self._ex
        return {**ex.log_fields(), **self._own(), **ex.ctx.fields()}


class _SseRelay:
    """One SSE stream: forward bytes per the planner, feed the observer, log the outcome.

    In passthrough (no planner, nothing to decompress, no tap that sees reads), what
    observes the stream (the reassembler, the alert sink, the observer, the taps) is built
    after the client has its first byte, by the first :meth:`_catch_up`: fifty streams
    that start together do not each build it before the next one's first byte.
    """

    # What most streams keep as it is, at the class: a stream start sets only what differs.
    decode: ObserverDecoder | None = None
    observing = True
    """False when the stream's encoding cannot be decoded to observe it."""
    planner: Planner | None = None
    delivery: Delivery | None = None
    """Chaos only: the writes that carry a cut wait until the client read what went before."""
    recording: StreamRecording | None = None
    record: StreamRecord | None = None
    record_fed = False
    """Whether the inspector's record is fed the observer's reads (decoded), not the log."""
    written: StreamReassembler | None = None
    """A chaos drop's stream: the bytes written to the client, read for their cursor."""
    read_log: ReadLog | None = None
    """Every upstream read as it came, from the first, up to a bound: kept for the flight
    recorder and the inspector (one log for both), or None."""
    log_past: Callable[[bytes, float], None]
    """Where a read past the log's bound goes (the observers keeping the log)."""
    on_read: Any = None
    """What sees every upstream read as it comes, from the first (the taps that read), or
    None."""
    built = False
    """Whether the observers below are built (:meth:`_build`)."""
    obs: StreamObserver
    taps: Taps
    sink: AlertSink
    reassembler: StreamReassembler
    on_observed: Any = None
    timeout_kind: str | None = None

    def __init__(
        self,
        ex: Exchange,
        resp: web.StreamResponse,
        upstream: aiohttp.ClientResponse,
    ) -> None:
        cfg = ex.cfg
        self.ex = ex
        self.request = request = ex.request
        self.resp = resp
        self.upstream = upstream
        self.cfg = cfg
        self.metrics = ex.metrics
        self._log_of = _StreamLog(ex, upstream)
        self.started = ex.started
        self.opened = time.monotonic()
        self.mode = mode = ex.mode
        encoding = upstream.headers.get("Content-Encoding")
        if encoding:
            try:
                self.decode = make_observer_decoder(
                    encoding,
                    max_ratio=cfg.max_decompressed_ratio,
                    max_bytes=cfg.max_decompressed_bytes,
                )
            except DecodeFailed as exc:
                self.observing = False
                self.log.warning("stream.not_observed", reason=exc.reason, **exc.details)
        if mode != "passthrough":
            if self.decode is not None or not self.observing:
                # Write boundaries are planned on the bytes the client gets; compressed
                # bytes have no frames to cut at, so such a stream is passed through.
                self.log.info(
                    "stream.mode_fallback", requested=mode, used="passthrough", reason=encoding
                )
                self.mode = "passthrough"
            else:
                spec = ex.spec
                self.planner = make_planner(
                    mode,
                    spec,
                    max_hold=cfg.max_frame_bytes,
                    dialect=lambda: self.reassembler.dialect,  # its variants: the detected one
                    # what the request asked for, for the variants only some requests get
                    request=ex.ctx.request_json if spec is not None and spec.variants else None,
                    kind=lambda: stream_kind(self.reassembler.dialect),
                    attempt=0 if ex.resume is None else ex.resume.attempt,
                )
                if mode == "chaos":
                    self.delivery = ex.delivery = Delivery(request.transport)
                    self.delivery.cut = self._cut
                    if spec is not None and spec.fault in DROPS:  # what the client got
                        self.written = StreamReassembler(
                            None, hint=_hint_for(request.path), emit_events=False
                        )
        self.client = ClientWriter(resp, request)  # takes over after the first write
        parts = ex.parts
        recorder, registry = parts.recorder, parts.registry
        if recorder is not None:  # the log's bound is the recording's head
            self.read_log = ReadLog(head_room(recorder.max_stream_bytes), sys.maxsize)
            self.recording = recorder.stream(
                ex.stream_id, request, upstream, ex.started, self.read_log
            )
        if registry is not None:
            shared = None  # compressed: the inspector shows the decoded bytes, fed read by read
            if self.decode is None and self.observing:
                if self.read_log is None:
                    self.read_log = ReadLog(registry.max_bytes, registry.max_reads)
                shared = self.read_log
            self.record = open_stream(
                registry, request, upstream, ex.stream_id, self.mode, ex.started, shared
            )
            self.record_fed = shared is None
        if self.read_log is not None:  # the reads past its bound, to the observers keeping it
            pasts: list[Callable[[bytes, float], None]] = []
            if self.recording is not None:
                pasts.append(self.recording.past)
            if self.record is not None and not self.record_fed:
                pasts.append(self.record.past)
            self.log_past = pasts[0] if len(pasts) == 1 else functools.partial(_each, pasts)
        # Passthrough reads observed later (while other requests wait for a first byte):
        # (chunk, when it arrived), in order; _catch_up observes them.
        self.backlog = parts.state.backlog
        self.pending: list[tuple[bytes, float]] = []
        if self.planner is not None or self.decode is not None or parts.taps:
            self._build()

    @property
    def log(self) -> Any:
        """The stream's logger (bound when first used: most streams log their summary only)."""
        return self._log_of()

    def _build(self) -> StreamObserver:
        """The stream's observers: built once, at the start or after the first byte."""
        ex, cfg, request = self.ex, self.cfg, self.request
        metrics = ex.metrics
        metrics.child(metrics.requests, kind="sse").inc()
        ex.count_route()
        self.sink = AlertSink(
            make_logger=self._log_of,
            log_fields=self._log_of.fields,
            max_per_kind=cfg.max_alerts_per_kind,
            keep_text=cfg.log_text,
        )
        dialect = normalize_dialect(ex.route.dialect)
        hint = (
            _hint_for(ex.url.raw_path)
            or _hint_for(request.path)
            or dialect_for_headers(request.headers)  # an MCP client's session or version
        )
        known = dialect or hint
        self.reassembler = StreamReassembler(
            dialect,
            hint=hint,
            limits=_limits(cfg.max_line_bytes, cfg.max_frame_bytes),
            emit_events=False,
            frame_ends=self.mode != "passthrough",  # only planners cut at frame ends
            keep_text=cfg.log_text,  # otherwise only its length is logged: count, don't keep
            tool_schemas=ex.ctx.tool_schemas,  # the request's, for its tool calls
            # the JSON-RPC request it answers (its ids), for a stream known to be MCP
            rpc_request=ex.ctx.rpc_request if known is not None and DIALECTS[known].rpc else None,
            resumed=ex.resume is not None,  # it reads where it starts
        )
        span = ex.span
        self.obs = obs = StreamObserver(
            self.reassembler,
            self.sink,
            ex.ctx,
            stall_threshold=cfg.stall_threshold,
            linger_threshold=cfg.linger_threshold,
            now=time.monotonic,
            on_alert=span.alert if span is not None else None,
            opened=self.opened,
        )
        obs.catch_up = self._catch_up
        resumed = ex.resume
        if resumed is not None:
            joined = resumed.alert()  # the cursor against what the stream it resumes delivered
            if joined is not None:
                obs.emit((joined,))
        genai = ex.parts.tracing.metrics
        # The observers of the stream, in the order they are told its end; built once.
        self.taps = taps = Taps(
            (
                SummaryLine(self.sink),
                None if span is None else SpanTap(span),
                None
                if self.record is None
                else (DecodedInspectorTap if self.record_fed else InspectorTap)(self.record),
                self.recording,
                MetricsTap(ex.metrics, ex.route.name),
                None
                if genai is None
                else GenAIMetricsTap(
                    genai, request.path, ex.route.upstream, ex.metrics.model_label
                ),
                *(make(ex) for make in ex.parts.taps),
            )
        )
        self.on_observed = taps.observed
        if self.record is not None and not self.record_fed:
            obs.on_alerts = self.record.add_alerts  # its reads are in the stream's log
        if taps.read is not None:  # (a tool's tap: the stream was built before its first read)
            self.on_read = taps.read
        self.built = True
        if not self.ended:
            obs.start(ex.parts.watchdog)
        return obs

    ended = False
    """Whether the relay's read loop is over (an observer built later starts no timer)."""
    relaying = False
    """Whether :meth:`_relay` has begun (a task cancelled before its first step has not)."""

    async def run(self) -> web.StreamResponse:
        """The response's head and, in passthrough, the first read, here in the handler's
        task; the rest in a task of its own (:meth:`_relay`).

        The first byte goes out before any task is made: a new task's first step waits a
        turn of the loop behind everything else ready, so streams that start together
        would each wait for all the others. The rest runs in its own task because each
        read resumes the waiting task through every coroutine it is nested in, and the
        handler's nesting (aiohttp, the handler, forward, _http, respond) would add to
        every token's cost. Whatever fails here is
        handed to the task, which ends the stream as it would have."""
        loop = self.ex.parts.loop
        assert loop is not None  # (set while the app runs)
        deadline = loop.time() + self.cfg.total_timeout if self.cfg.total_timeout else None
        watch = IdleWatch(self.upstream, self.cfg.idle_timeout, self.ex.idle_watch, loop)
        early: BaseException | None = None
        carry: bytes | None = None  # a first read for the task to relay whole
        sent: tuple[int, float] | None = None  # the first read's size and time, if sent here
        try:
            await self.resp.prepare(self.request)
            if self.planner is None and self.decode is None:
                carry = await self.upstream.content.readany()
                if carry and len(carry) <= _SLICE:
                    chunk, carry = carry, None
                    watch.last = at = watch.now()
                    sent = (len(chunk), at)
                    log = self.read_log
                    if log is not None:  # a recording sees every read as it came
                        t = _monotonic()
                        if not log.add(chunk, t, len(chunk)):
                            self.log_past(chunk, t)
                    if self.on_read is not None:
                        self.on_read(chunk)
                    self.pending.append((chunk, at))  # observed on the loop's next turn
                    self.backlog.defer(self._catch_up)  # (or once no first byte is owed)
                    client = self.client
                    if not client.send(chunk):
                        await client.write(chunk)
                    self.ex.first_byte_sent()
        except BaseException as exc:  # noqa: BLE001 - the task's except clauses sort it
            early = exc
        relay = self._relay(watch, deadline, early, carry, sent)
        if early is None and self.upstream.content.is_eof():
            return await relay  # the rest is here already: read without a wait, no task
        try:
            return await loop.create_task(relay)
        except asyncio.CancelledError:
            if not self.relaying:  # cancelled before the task's first step: nothing ran
                self.ended = True
                watch.stop()
                received, first = (0, None) if sent is None else sent
                self._finish(self._cancelled_by(), received, first)
            raise

    async def _relay(
        self,
        watch: IdleWatch,
        deadline: float | None,
        early: BaseException | None,
        carry: bytes | None,
        sent: tuple[int, float] | None,
    ) -> web.StreamResponse:
        self.relaying = True
        state = self.ex.parts.state
        task = asyncio.current_task(self.ex.parts.loop)
        if task is not None:
            state.active.add(task)
        self.metrics.active.inc()
        ended_by = "upstream_eof"
        first_byte: float | None = None if sent is None else sent[1]
        received = 0 if sent is None else sent[0]
        obs = self.obs if self.built else None  # (in passthrough: after the first byte)
        try:
            if early is not None:
                raise early
            client = self.client
            async with asyncio.timeout_at(deadline) if deadline is not None else _NO_TIMEOUT:
                # The per-read path, kept to a few calls: one event per read is how tokens
                # arrive, and every coroutine layer costs about as much as the parsing.
                observe = self._observe
                # _observe's work, in the loop, for a passthrough read (and the tap that
                # observes it, if any: the inspector's record)
                feed = tick = seen = None
                if obs is not None:
                    feed, tick, seen = self._fast_feed(), obs.tick, self.on_observed
                send = client.send
                write = client.write
                planner = self.planner
                decode = self.decode
                on_read = self.on_read  # sees reads as they come
                # the read log's appends, inline: a call per read cost more than the rest
                log = self.read_log
                if log is not None:
                    log_time, log_chunk, logged = log.times.append, log.chunks.append, log.chunks
                    log_bytes, log_reads, log_past = log.max_bytes, log.max_reads, self.log_past
                now = watch.now
                # Reads already buffered come back without a suspension: a fast upstream
                # could keep this task on the loop read after read. Past _BUSY seconds of
                # work with no wait in between, it yields, so other streams get their turn.
                busy_since = done = now()
                readany = self.upstream.content.readany  # iter_any() is this, one layer up
                backlog = self.backlog
                pending = self.pending
                owed = sent is None  # the client's first byte (others' bookkeeping waits)
                chunk = carry if carry is not None else await readany()
                while chunk:
                    watch.last = at = now()
                    if at - done > _WAITED:  # the read was waited for: the loop ran others
                        busy_since = at
                    if first_byte is None:
                        first_byte = at  # the same clock as the read stamps
                    received += len(chunk)
                    if log is not None:
                        if received <= log_bytes and len(logged) < log_reads:
                            log_time(_monotonic())
                            log_chunk(chunk)
                        else:
                            log_past(chunk, _monotonic())
                    if on_read is not None:
                        on_read(chunk)
                    if decode is not None:  # compressed: the client's bytes go first
                        await self._forward(chunk, ())
                        await self._observe_decoded(decode, chunk, at)
                    elif len(chunk) > _SLICE:
                        self._catch_up()
                        if planner is None:  # the client's bytes first here too
                            await self._forward(chunk, ())
                            await self._observe_slices(chunk, at)
                        else:
                            await self._forward(chunk, await self._observe_slices(chunk, at))
                    elif planner is None:  # the client's bytes first: no latency added
                        try:
                            if not send(chunk):
                                await write(chunk)
                        finally:  # a read the client missed is still observed
                            if owed:
                                owed = False
                                self.ex.first_byte_sent()
                            if obs is None or pending or backlog.busy:
                                pending.append((chunk, at))
                                if backlog.busy:  # others wait for a first byte: later
                                    if len(pending) == 1:
                                        backlog.defer(self._catch_up)
                                else:
                                    self._catch_up()
                                    if obs is None:  # built just now: the loop's names
                                        obs = self.obs
                                        feed, tick = self._fast_feed(), obs.tick
                                        seen = self.on_observed
                            elif feed is None:
                                observe(chunk, at)
                            else:
                                assert tick is not None
                                out = feed(chunk)
                                tick(at)
                                if out.alerts:
                                    obs.emit(out.alerts)
                                if seen is not None:
                                    seen(chunk, out.alerts)
                    else:
                        await self._send(planner.plan(chunk, observe(chunk, at)))
                        watch.last = now()  # a fault's pause is not the upstream's idling
                    if owed:
                        owed = False
                        self.ex.first_byte_sent()
                    done = now()
                    if done - busy_since > _BUSY:
                        await asyncio.sleep(0)
                        busy_since = done = now()
                    chunk = await readany()
                if self.planner is not None:
                    await self._send(self.planner.flush())
                    pause = self.planner.end_pause()  # a linger: the body stays open
                    if pause is not None and self.delivery is not None:
                        await self.delivery.hold(pause, client.write, self.taps.wrote)
        except ClientGone:
            ended_by = "client_disconnect"
        except Dropped:  # a chaos drop cut the client off
            ended_by = "dropped"
        except TimeoutError:
            ended_by = "timeout"
            self.timeout_kind = Truncated.TOTAL_TIMEOUT
        except (aiohttp.ClientError, OSError) as exc:
            if watch.expired:
                ended_by = "timeout"
                self.timeout_kind = Truncated.IDLE_TIMEOUT
            else:
                ended_by = "upstream_error"
                self.log.warning(
                    "upstream.error",
                    kind="stream_read_failed",
                    error=redact_url(str(exc)),
                    upstream_url=redact_url(str(self.upstream.url)),
                )
                self.metrics.upstream_errors.labels(kind="stream_read_failed").inc()
                self.metrics.count_total("upstream_errors")
        except asyncio.CancelledError:
            self._finish(self._cancelled_by(), received, first_byte)
            raise
        finally:
            self.ended = True
            watch.stop()
            if self.built:
                self.obs.stop()
            self.metrics.active.dec()
            if task is not None:
                state.active.discard(task)
        end = time.monotonic()
        if ended_by == "upstream_eof" and not self.cfg.strict_end and self.backlog.ending(end):
            # the summary needs nothing from how the body ends: the client's end goes first
            # while others wait for a first byte or streams end together (otherwise the
            # stream is summed up, its reads put off observed, before its client sees the
            # end, as on a quiet proxy)
            with contextlib.suppress(ConnectionError, aiohttp.ClientConnectionError, RuntimeError):
                await self.resp.write_eof()
            self.ex.span_kept = True  # its summary goes in the span before the span ends
            self.backlog.defer(lambda: self._finish(ended_by, received, first_byte, end))
            return self.resp
        strict = self._finish(ended_by, received, first_byte)
        if ended_by != "upstream_eof" or strict is not None:
            cut_off(self.request)  # never a fake completion
            return self.resp
        with contextlib.suppress(ConnectionError, aiohttp.ClientConnectionError, RuntimeError):
            await self.resp.write_eof()
        return self.resp

    def _wrote(self, data: bytes) -> None:
        """A drop's stream: what the client got is read too (where it must resume)."""
        assert self.written is not None
        if not self.written.closed:
            self.written.feed(data)
        tap = self.taps.wrote
        if tap is not None:
            tap(data)

    async def _cut(self) -> None:
        """A chaos drop: the client's connection is closed mid-body (what was written goes
        first), as a connection that breaks."""
        cut_off(self.request)

    def _remember(self, fields: dict[str, Any]) -> None:
        """What the stream delivered last, for a stream that may resume it; a resumed
        stream's summary says which one it resumed, and how."""
        ex = self.ex
        resume = ex.resume
        reassembler = self.reassembler
        if self.written is not None and fields.get("ended_by") == "dropped":
            reassembler = self.written  # the proxy cut it: what the client got counts
        cursors = reassembler.cursors
        event_cursor = reassembler.event_cursor if cursors is None else None
        by_id = cursors is not None or event_cursor is not None
        response_id = None
        last: str | None
        cut: str | None
        if by_id:  # numbered in its data (Responses), or an id in it (an interaction)
            last = str(cursors[1]) if cursors is not None else event_cursor
            cut = None
            response_id = resume.response_id if resume is not None else None
            response_id = response_id or fields.get("response_id")
        elif resume is not None and resume.kind == "event_id":  # nothing new arrived
            last, cut, response_id = resume.cursor, None, resume.response_id
            by_id = True
        else:
            last, cut = reassembler.last_event_id, reassembler.pending_event_id
        if resume is not None:
            fields.update(resume.fields())
            of = resume.of
            fields["answer_text_length"] = fields.get("text_length", 0) + (
                0 if of is None else of.text_length
            )
        if (last is not None or cut is not None) and (not by_id or response_id):
            ex.parts.state.resumes.remember(
                ex.route.name,
                self.request.path,
                ex.stream_id,
                resume=resume,
                last=last,
                cut=cut,
                response_id=response_id,
                text_length=int(
                    (reassembler.summary() if reassembler is not self.reassembler else fields).get(
                        "text_length"
                    )
                    or 0
                ),
            )

    def _cancelled_by(self) -> str:
        """How a cancelled relay ended: aiohttp cancels the handler once the client's
        connection is lost; a shutdown cancels it with the connection still there (a client
        may leave mid-drain too)."""
        shutdown = self.ex.parts.state.shutting_down and self.request.transport is not None
        return "shutdown" if shutdown else "client_disconnect"

    def _fast_feed(self) -> Any:
        """The reassembler's feed, where _observe's work can be done inline (a passthrough
        read); None where it cannot."""
        return self.reassembler.feed if self.observing else None

    def _catch_up(self) -> None:
        """Observe the reads put off (built the observers first, if not yet)."""
        if not self.built:
            self._build()
        pending = self.pending
        for chunk, at in pending:
            self._observe(chunk, at)
        pending.clear()

    def _observe(self, chunk: bytes, now: float | None) -> tuple[int, ...]:
        """Feed the observer; ``now``: when the read arrived (None: a piece of one whose
        time is taken once its last piece is in)."""
        if not self.observing:
            return ()
        out = self._feed(chunk, now)
        observed = self.on_observed
        if observed is not None:
            observed(chunk, out.alerts)
        return out.frame_ends

    def _feed(self, chunk: bytes, now: float | None) -> Output:
        out = self.reassembler.feed(chunk)
        obs = self.obs
        if now is not None:
            obs.tick(now)
        if out.alerts:
            obs.emit(out.alerts)
        return out

    async def _observe_slices(self, chunk: bytes, now: float) -> tuple[int, ...]:
        """A large read, observed in slices with the event loop let in between (a hostile
        read must not hold every other stream); one read for the taps."""
        if not self.observing:
            return ()
        ends: list[int] = []
        alerts: list[Alert] = []
        clock = time.perf_counter
        until = clock() + _SLICES_FOR
        size = len(chunk)
        start = 0
        while start < size:
            if start and clock() > until:  # (a slice is tens of microseconds)
                await asyncio.sleep(0)
                until = clock() + _SLICES_FOR
            stop = start + _SLICE
            if stop < size:  # cut after a blank line if one is near: slices of whole frames
                blank = chunk.rfind(b"\n\n", stop - (_SLICE >> 2), stop)
                if blank > 0:
                    stop = blank + 2
            out = self._feed(chunk[start:stop], now if stop >= size else None)
            ends += out.frame_ends
            alerts += out.alerts
            start = stop
        observed = self.on_observed
        if observed is not None:
            observed(chunk, tuple(alerts))
        return tuple(ends)

    async def _observe_decoded(self, decode: ObserverDecoder, chunk: bytes, now: float) -> None:
        """Feed the decompressed copy in bounded slices, letting other streams run between."""
        if not self.observing:
            return
        first = True
        try:
            for piece in decode.feed(chunk):
                if not first:
                    await asyncio.sleep(0)
                first = False
                self._observe(piece, None)
        except DecodeFailed as exc:
            self.observing = False
            self.log.warning("stream.not_observed", reason=exc.reason, **exc.details)
        if self.observing:
            self.obs.tick(now)

    async def _forward(self, chunk: bytes, frame_ends: tuple[int, ...]) -> None:
        if self.planner is None:
            await self.client.write(chunk)
        else:
            await self._send(self.planner.plan(chunk, frame_ends))

    async def _send(self, writes: list[Write]) -> None:
        wrote = self.taps.wrote
        if self.written is not None:
            wrote = self._wrote
        if self.delivery is not None:
            await self.delivery.send(writes, self.client.write, wrote)
            return
        for w in writes:
            if w.delay:
                await asyncio.sleep(w.delay)
            await self.client.write(w.data)
            if wrote is not None:
                wrote(w.data)

    def _finish(
        self, ended_by: str, received: int, first_byte: float | None, end: float | None = None
    ) -> str | None:
        """Close the reassembler, sum the stream up once, and tell every tap; return why
        ``--strict-end`` ends the client's body as broken (None: it ends normally).
        ``end``: when the stream ended, if this runs later (from the backlog)."""
        self._catch_up()
        reassembler = self.reassembler
        obs = self.obs
        obs.stop()  # (built after the read loop ended, it set no timer)
        if self.timeout_kind is not None:
            obs.timeout_kind = self.timeout_kind
        closing: tuple[Alert, ...] = ()
        if not reassembler.closed:
            out = reassembler.close(
                upstream_error=ended_by in ("upstream_error", "timeout"),
                # a stream not read to its end gets no end-of-stream verdicts
                abandoned=ended_by in ("client_disconnect", "shutdown", "dropped")
                or not self.observing,
            )
            closing = obs.closing_alerts(out.alerts)
            obs.emit(closing)
        now = time.monotonic() if end is None else end
        started = self.started
        summary = reassembler.summary()
        summary.pop("alerts", None)
        summary["bytes"] = received
        summary["bytes_observed"] = reassembler.bytes_fed
        ttfb = None if first_byte is None else first_byte - started
        fields: dict[str, Any] = {
            **summary,
            "ended_by": ended_by,
            "duration_ms": round((now - started) * 1000, 3),
            "ttfb_ms": None if ttfb is None else round(ttfb * 1000, 3),
            "observed": self.observing,
            **obs.summary_fields(ended_by, started, now),
        }
        strict = None
        if self.cfg.strict_end:  # known only now, every byte forwarded: nothing held back
            strict = strict_end_cause(ended_by, self.sink.counts) if self.observing else None
            fields["strict_end"] = strict
        if self.delivery is not None:
            self.delivery.close()
            fields.update(self.delivery.fields())
        mcp = fields.get("mcp")
        if mcp is not None:  # an MCP stream: when its first progress and its response came
            mcp.update(obs.mcp_times(started))
        planner = self.planner
        if isinstance(planner, ChaosPlanner) and planner.shapes is not None:
            fields.update(planner.shapes.fields())  # the variants left out, or forced
        if self.cfg.log_text:
            fields["text"] = reassembler.text
        self._remember(fields)
        self.taps.finish(
            StreamEnd(
                ended_by=ended_by,
                fields=fields,
                alerts=self.sink.counts,
                closing=closing,
                received=received,
                events=reassembler.events_dispatched,
                ttfb=ttfb,
                duration=now - started,
                gaps=obs.gaps,
                ttfc=None if obs.first_event is None else obs.first_event - started,
            )
        )
        obs.catch_up = None  # the observer's way back to this relay: no cycle to collect
        return strict
