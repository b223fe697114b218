"""A stream's timing: time to first token, inter-event gaps, stalls, lingers, the verdict
fields.

The relay calls :meth:`StreamObserver.tick` after every upstream read; it adds one counter
comparison per read, and everything else happens at an alert, at a timer, or once at the
end of the stream.

A stall is time without progress (text, reasoning, tool-call arguments), whatever else
arrives: comments, ping events and empty deltas keep a connection busy and a read timeout
quiet, not the user informed. Progress is looked at by the stream's one timer, not per
event, so a stall is timed from the last event-carrying read before the look that saw the
answer grow: at most a threshold late when pings follow the last text closely. Once the
terminal marker is in, the same timer watches for a body that stays open after it (a
linger).
"""

from __future__ import annotations

from bisect import bisect_left, bisect_right
from collections.abc import Callable, Iterator
from dataclasses import replace
from itertools import compress
from typing import Any

from sse_proxy.core import StreamReassembler
from sse_proxy.core.alerts import Alert, Linger, Stall, StallEnd, Truncated
from sse_proxy.core.dialects.mcp import McpAccumulator
from sse_proxy.core.streammeta import StreamMeta, has_text, meta_of
from sse_proxy.core.verdict import verdict
from sse_proxy.obs.metrics import GAP_BUCKETS as PROM_GAP_BUCKETS
from sse_proxy.obs.metrics import GENAI_BUCKETS
from sse_proxy.obs.sink import AlertSink
from sse_proxy.server.context import RequestContext
from sse_proxy.server.watchdog import Watch, Watchdog

__all__ = ["GAP_BOUNDS", "PROM_GAP_BUCKETS", "StreamObserver"]

# The per-stream gap histogram is finer than the Prometheus one (12 % steps) and contains
# its bounds and the OpenTelemetry GenAI ones, so each fine bucket falls in exactly one
# bucket of each.
GAP_BOUNDS: tuple[float, ...] = tuple(
    sorted(
        {round(1e-4 * 10 ** (i / 20), 7) for i in range(121)}
        | set(PROM_GAP_BUCKETS)
        | set(GENAI_BUCKETS)
    )
)
_GAP_BATCH = 256
_PROM_INDEX = tuple(bisect_left(PROM_GAP_BUCKETS, b) for b in (*GAP_BOUNDS, float("inf")))
_GENAI_INDEX = tuple(bisect_left(GENAI_BUCKETS, b) for b in (*GAP_BOUNDS, float("inf")))


class _GapHistogram:
    """Inter-event gaps in fixed log buckets: bounded memory, percentiles within 12%.

    The buckets are allocated with the first gap put in them (see ``fill``): a stream
    that has not yet had 256 gaps, most of them, holds none while it runs.
    """

    __slots__ = ("count", "counts", "max", "min", "sum")

    def __init__(self) -> None:
        self.counts: list[int] = []
        self.count = 0
        self.sum = 0.0
        self.max = 0.0
        self.min = 0.0

    def fill(self) -> list[int]:
        """The buckets, allocated on first use."""
        if not self.counts:
            self.counts = [0] * (len(GAP_BOUNDS) + 1)
        return self.counts

    def add(self, gap: float) -> None:
        self.fill()[bisect_left(GAP_BOUNDS, gap)] += 1
        self.min = gap if not self.count else min(self.min, gap)
        self.count += 1
        self.sum += gap
        self.max = max(self.max, gap)

    def settle(self, total: float, largest: float, smallest: float = 0.0) -> None:
        """Count, sum, max and min after the hot path filled only ``counts`` (``tick``)."""
        self.count = sum(self.counts)
        self.sum = total
        self.max = largest
        self.min = smallest

    def quantile(self, q: float) -> float | None:
        """The upper bound of the bucket holding the q-quantile (capped at the max seen)."""
        if not self.count:
            return None
        rank = q * self.count
        seen = 0
        counts = self.counts
        for i in self._filled():
            seen += counts[i]
            if seen >= rank:
                return min(GAP_BOUNDS[i] if i < len(GAP_BOUNDS) else self.max, self.max)
        return self.max  # pragma: no cover - the loop always reaches the rank

    def prometheus_buckets(self) -> list[int]:
        """Counts per Prometheus gap bucket (:data:`PROM_GAP_BUCKETS` plus +Inf)."""
        out = [0] * (len(PROM_GAP_BUCKETS) + 1)
        counts = self.counts
        for i in self._filled():
            out[_PROM_INDEX[i]] += counts[i]
        return out

    def genai_buckets(self) -> list[int]:
        """Counts per OpenTelemetry GenAI bucket (:data:`GENAI_BUCKETS` plus +Inf)."""
        out = [0] * (len(GENAI_BUCKETS) + 1)
        counts = self.counts
        for i in self._filled():
            out[_GENAI_INDEX[i]] += counts[i]
        return out

    def _filled(self) -> Iterator[int]:
        """The indices of the buckets that hold gaps, in order, found at C speed: a stream's
        gaps fill a few of the ~135 buckets, and each stream's end reads them three times."""
        return compress(range(len(self.counts)), self.counts)


def _ms(seconds: float | None) -> float | None:
    return None if seconds is None else round(seconds * 1000, 3)


class StreamObserver:
    """Timing and context of one SSE stream, between the reassembler and the log sink.

    ``tick`` runs after every upstream read (cheap unless events were dispatched); a timer
    callback (one handle per stream, not a task) logs ``sse.stall`` while a stall goes
    on, and the read that ends it logs ``sse.stall_end``; after the terminal marker the
    same callback logs ``sse.linger`` once the body has stayed open ``linger_threshold``
    seconds. ``on_alert`` (traces) sees every alert of the stream, one by one, and
    ``on_alerts`` (the inspector) each batch of them.
    """

    def __init__(
        self,
        reassembler: StreamReassembler,
        sink: AlertSink,
        ctx: RequestContext,
        *,
        stall_threshold: float,
        linger_threshold: float = 0.0,
        now: Callable[[], float],
        on_alert: Callable[[Alert], None] | None = None,
        opened: float | None = None,
    ) -> None:
        self.reassembler = reassembler
        self.sink = sink
        self._base_log: Any = None  # the sink's logger before emit binds more (lazily)
        self.ctx = ctx
        self.threshold = stall_threshold
        self.now = now
        self.on_alert = on_alert
        self.on_alerts: Callable[[tuple[Alert, ...]], None] | None = None
        self.opened = now() if opened is None else opened  # (built late: when it opened)
        self.events = 0
        self.last_event = self.opened
        self.first_event: float | None = None
        self.first_text: float | None = None
        self.gaps = _GapHistogram()
        self._gap_max = 0.0
        self._gap_min = float("inf")
        # gaps not yet in the histogram (at most _GAP_BATCH): a list, whose append only
        # stores the float the subtraction made (an array's parses it, at every token)
        self._new_gaps: list[float] = []
        self.stalled_since: float | None = None
        self.stalls = 0
        self.stalls_kept_alive = 0
        self.linger_threshold = linger_threshold
        self.lingered = False
        # the answer's size at the last look that saw it grow, and when that was (the
        # last event-carrying read then); what else had arrived by then
        self.last_progress = self.opened
        self._progress = 0
        self._marks = (0, 0, 0)  # comment lines, pings, events
        self._bound: tuple[str | None, str | None] = (None, None)
        self._watch: Watch | None = None
        self.timeout_kind: str | None = None
        self.catch_up: Callable[[], None] | None = None
        """Observes reads put off (:mod:`..backlog`) before the stall timer looks."""
        self.first_progress: float | None = None
        self.responded: float | None = None
        self._mcp = True
        """Until the first text: look for what only MCP reports (False once the dialect is
        another, or the response came). A flag, not a bound method: no cycle to collect."""

    # -- hot path ----------------------------------------------------------------------

    def tick(self, now: float) -> None:
        """After a read at ``now``: if it completed events, time them (gap, first text,
        stall end). A gap is put aside and bucketed with the next _GAP_BATCH (one loop while
        the histogram is in cache, not a search through it at every token); the sum is the
        time from the first to the last event-carrying read (the gaps telescope)."""
        n = self.reassembler.events_dispatched
        if n == self.events:
            return
        if self.events:
            new_gaps = self._new_gaps
            new_gaps.append(now - self.last_event)
            if len(new_gaps) >= _GAP_BATCH:
                self._bucket_gaps()
        else:
            self.first_event = now
        self.events = n
        self.last_event = now
        if self.stalled_since is not None:
            self._stall_end(now)
        if self.first_text is None:
            if self._mcp:
                self._mcp_marks(now)
            if has_text(self.reassembler):
                self.first_text = now

    def _mcp_marks(self, now: float) -> None:
        """An MCP stream's first progress notification and its response (its text comes
        with the response, if at all): looked at before the first text only, and dropped
        at once for a stream of another dialect."""
        reassembler = self.reassembler
        acc = reassembler.accumulator
        if type(acc) is not McpAccumulator:
            if reassembler.dialect != "unknown":
                self._mcp = False
            return
        if self.first_progress is None and acc.progress:
            self.first_progress = now
        if acc.terminal_seen:
            self.responded = now
            self._mcp = False

    def mcp_times(self, started: float) -> dict[str, float | None]:
        """An MCP stream's ``first_progress_ms`` and ``result_ms`` (from the request)."""
        return {
            "first_progress_ms": _ms(
                None if self.first_progress is None else self.first_progress - started
            ),
            "result_ms": _ms(None if self.responded is None else self.responded - started),
        }

    def _bucket_gaps(self) -> None:
        """The gaps put aside, into their buckets: sorted, a stream's gaps fall in a few
        buckets, and each bucket's share is found by two searches, not one per gap."""
        new_gaps = self._new_gaps
        if not new_gaps:
            return
        counts = self.gaps.fill()
        ordered = sorted(new_gaps)
        i, n, last = 0, len(ordered), len(GAP_BOUNDS)
        while i < n:
            b = bisect_left(GAP_BOUNDS, ordered[i])
            j = bisect_right(ordered, GAP_BOUNDS[b], i) if b < last else n
            counts[b] += j - i
            i = j
        self._gap_max = max(self._gap_max, ordered[-1])
        self._gap_min = min(self._gap_min, ordered[0])
        new_gaps.clear()

    # -- alerts ------------------------------------------------------------------------

    def emit(self, alerts: tuple[Alert, ...]) -> None:
        """Log alerts bound with the current context; hand them to the trace too."""
        if not alerts:  # nothing to log: no binding (most streams end with no alert)
            return
        meta = meta_of(self.reassembler)
        key = (self.ctx.request_model, meta.response_model)
        if key != self._bound:
            self._bound = key
            base = self._base_log
            if base is None:
                base = self._base_log = self.sink.log
            self.sink.log = base.bind(
                model=key[0] or key[1], response_model=key[1], response_id=meta.response_id
            )
        self.sink.emit_all(alerts)
        if self.on_alert is not None:
            for alert in alerts:
                self.on_alert(alert)
        if self.on_alerts is not None:
            self.on_alerts(alerts)

    # -- stall timer -------------------------------------------------------------------

    def start(self, watchdog: Watchdog | None = None) -> None:
        """Watch for stalls and lingers (on ``watchdog``, the app's, so that the running
        loop is not looked up for each stream)."""
        first = self._every()
        if first is not None:
            self._watch = (watchdog or Watchdog.of()).watch(first, self._check)

    def _every(self, left: float | None = None) -> float | None:
        """When to look next: at a stall's deadline (``left``) or a threshold from now,
        and at least every linger threshold (a terminal marker is seen only by looking)."""
        stall, linger = self.threshold, self.linger_threshold
        times = [t for t in (left if left is not None else stall, linger) if t > 0]
        return min(times) if times else None

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None

    def _check(self) -> float | None:
        """At the deadline the watch was set for: the time to the moved one, or report the
        stall (once) and look again a threshold later; past the terminal marker, the
        linger (once). None: nothing left to watch."""
        if self.catch_up is not None:
            self.catch_up()
        now = self.now()
        reassembler = self.reassembler
        if reassembler.terminal_seen:  # the answer is complete: not a stall, maybe a linger
            return self._linger(now)
        if self.threshold <= 0:
            return self._every()
        progress = reassembler.progress()
        if progress != self._progress:  # it grew: by the last event-carrying read at the latest
            if self.stalled_since is not None:
                self._stall_end(self.last_event)
            else:
                self._moved(progress, self.last_event)
        left = self.last_progress + self.threshold - now
        if left > 0:
            return self._every(left)
        if self.stalled_since is None:
            self.stalled_since = self.last_progress
            self.stalls += 1
            comments, pings, events = self._since()
            kept_alive = bool(comments or pings) and events == pings
            self.stalls_kept_alive += kept_alive
            self.emit(
                (
                    Stall(
                        gap_ms=_ms(now - self.last_progress) or 0.0,
                        threshold_ms=_ms(self.threshold) or 0.0,
                        after_event=self._marks[2],
                        comments=comments,
                        pings=pings,
                        events=events,
                        kept_alive_by_comments=kept_alive,
                    ),
                )
            )
        return self._every()

    def _since(self) -> tuple[int, int, int]:
        """Comment lines, pings and events since the answer last grew."""
        reassembler = self.reassembler
        comments, pings = reassembler.keepalives
        comments += reassembler.comments_since_event
        was = self._marks
        return comments - was[0], pings - was[1], self.events - was[2]

    def _moved(self, progress: int, at: float) -> None:
        """The answer grew, at ``at`` (the last event-carrying read): count from there."""
        self._progress = progress
        self.last_progress = at
        comments, pings = self.reassembler.keepalives  # (comments: up to the last event)
        self._marks = (comments, pings, self.events)

    def _linger(self, now: float) -> float | None:
        """Past the terminal marker: report a body still open ``linger_threshold`` after
        the last event (once), then stop looking."""
        threshold = self.linger_threshold
        if threshold <= 0 or self.lingered:
            return None
        left = self.last_event + threshold - now
        if left > 0:
            return left
        self.lingered = True
        self.emit(
            (
                Linger(
                    open_ms=_ms(now - self.last_event) or 0.0,
                    threshold_ms=_ms(threshold) or 0.0,
                    after_event=self.events,
                ),
            )
        )
        return None

    def _stall_end(self, now: float) -> None:
        """An event during a stall: the stall ends if the answer grew (or is complete)."""
        since = self.stalled_since
        if since is None:
            return
        reassembler = self.reassembler
        progress = reassembler.progress()
        if progress == self._progress and not reassembler.terminal_seen:
            return  # a ping or an empty delta: still stalled
        comments, pings, _ = self._since()
        self.stalled_since = None
        self._moved(progress, now)
        self.emit(
            (
                StallEnd(
                    gap_ms=_ms(now - since) or 0.0,
                    after_event=self.events,
                    comments=comments,
                    pings=pings,
                ),
            )
        )

    # -- end of stream -----------------------------------------------------------------

    def closing_alerts(self, alerts: tuple[Alert, ...]) -> tuple[Alert, ...]:
        """A truncation the proxy caused (a timeout) is the proxy's, not the upstream's."""
        if self.timeout_kind is None:
            return alerts
        return tuple(
            replace(a, reason=self.timeout_kind)
            if type(a) is Truncated and a.reason == Truncated.UPSTREAM_CLOSED
            else a
            for a in alerts
        )

    def summary_fields(self, ended_by: str, started: float, end: float) -> dict[str, Any]:
        """Context, usage, timing and verdict for ``stream.summary`` (and the metrics)."""
        meta: StreamMeta = meta_of(self.reassembler)
        self._bucket_gaps()
        gaps = self.gaps
        if self.first_event is not None:
            smallest = self._gap_min if self._gap_min != float("inf") else 0.0
            gaps.settle(self.last_event - self.first_event, self._gap_max, smallest)
        kind, reason = verdict(ended_by, self.sink.counts, self.sink.first_warning)
        if ended_by == "timeout" and self.timeout_kind is not None:
            reason = self.timeout_kind
        tps = None
        if meta.output_tokens is not None:
            begin = self.first_text or self.first_event
            span = (self.last_event - begin) if begin is not None else 0.0
            if span > 0:
                tps = round(meta.output_tokens / span, 2)
        return {
            "verdict": kind,
            "verdict_reason": reason,
            "route": self.ctx.route,  # bound to the log too; the inspector reads it here
            "client_request_id": self.ctx.client_request_id,
            "trace_id": self.ctx.trace_id,
            "model": self.ctx.request_model or meta.response_model,
            "request_model": self.ctx.request_model,
            **meta.fields(),
            "ttft_ms": _ms(None if self.first_text is None else self.first_text - started),
            "gap_p50_ms": _ms(gaps.quantile(0.5)),
            "gap_p99_ms": _ms(gaps.quantile(0.99)),
            "gap_max_ms": _ms(gaps.max) if gaps.count else None,
            "output_tokens_per_s": tps,
            "stalls": self.stalls,
            "stalls_kept_alive": self.stalls_kept_alive,
            "linger_ms": _ms(end - self.last_event) if self.lingered else None,
        }
