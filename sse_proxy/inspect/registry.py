"""Recent streams for the live inspector, in bounded memory.

The proxy calls a few hooks per stream (opened, read, alerts, finished); the registry
keeps the last ``max_streams`` streams, each with at most ``max_bytes`` of its observed
bytes, ``max_reads`` read timings and ``max_alerts`` alerts, and tells subscribers (the
inspector's SSE feed) about each change. Nothing here blocks or grows without bound.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from array import array
from bisect import bisect_left
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from itertools import accumulate
from typing import Any

from sse_proxy.core.alerts import Alert
from sse_proxy.inspect.strip import AlertMark, alert_marks
from sse_proxy.obs.read_log import ReadLog
from sse_proxy.obs.redact import scrub_held_value

__all__ = ["Registry", "StreamRecord"]

_QUEUE = 256  # updates a slow subscriber may lag behind before it misses some
_monotonic = time.monotonic


_Lazy = Callable[[], Any]


class StreamRecord:
    """One stream as the inspector shows it.

    What only a page shows (the redacted heads, the dialect the path hints at, the summary
    with held values scrubbed) is worked out when a page first asks, not for every stream:
    most streams are never looked at. ``request``, ``response`` and ``hint`` may be given
    as values or as functions that make them.
    """

    __slots__ = (
        "_fields",
        "_hint",
        "_log",
        "_past_bytes",
        "_request",
        "_response",
        "_summary",
        "_untimed",
        "_x_bytes",
        "_x_chunks",
        "_x_sizes",
        "_x_times",
        "alert_counts",
        "alerts",
        "max_alerts",
        "max_bytes",
        "max_reads",
        "method",
        "mode",
        "path",
        "registry",
        "started",
        "started_wall",
        "status",
        "stream_id",
    )

    def __init__(
        self,
        *,
        stream_id: str,
        method: str,
        path: str,
        status: int,
        mode: str,
        hint: str | _Lazy | None,
        started_wall: float,
        started: float,
        request: dict[str, Any] | _Lazy,
        response: dict[str, Any] | _Lazy,
        max_bytes: int,
        max_reads: int,
        max_alerts: int,
        registry: Registry | None = None,
        log: ReadLog | None = None,
    ) -> None:
        """``log``: the stream's reads as the relay keeps them (shared with the flight
        recorder, perhaps with a larger bound); without one the record keeps its own, fed
        by :meth:`read`."""
        self.stream_id = stream_id
        self.method = method
        self.path = path
        self.status = status
        self.mode = mode
        self._hint = hint
        self.started_wall = started_wall
        self.started = started
        self._request = request
        self._response = response
        self.max_bytes = max_bytes
        self.max_reads = max_reads
        self.max_alerts = max_alerts
        self.registry = registry
        if log is None:
            log = ReadLog(max_bytes, max_reads)
        self._log = log
        # reads past the log's bound, timed and kept here up to this record's own bounds
        self._x_times: list[float] = []
        self._x_sizes = array("q")
        self._x_chunks: list[bytes] = []
        self._x_bytes = 0
        self._past_bytes = 0  # received past the log
        self._untimed = 0  # reads past the log not timed
        self.alerts: list[AlertMark] = []
        self.alert_counts: dict[str, int] = {}
        self._fields: Mapping[str, Any] | None = None
        self._summary: dict[str, Any] | None = None

    @property
    def hint(self) -> str | None:
        hint = self._hint
        if callable(hint):
            hint = self._hint = hint()
        return hint

    @property
    def request(self) -> dict[str, Any]:
        request = self._request
        if callable(request):
            request = self._request = request()
        return request

    @property
    def response(self) -> dict[str, Any]:
        response = self._response
        if callable(response):
            response = self._response = response()
        return response

    @property
    def active(self) -> bool:
        return self._fields is None

    @property
    def summary(self) -> dict[str, Any] | None:
        """The stream's ``stream.summary`` fields (message text is dropped here, and what
        the proxy holds: an upstream may quote a key back as a model name or an id)."""
        if self._summary is None and self._fields is not None:
            summary = {k: scrub_held_value(v) for k, v in self._fields.items() if k != "text"}
            summary["alerts"] = dict(self.alert_counts)
            self._summary = summary
        return self._summary

    def read(self, chunk: bytes, alerts: Iterable[Alert] = ()) -> None:
        """One observed read: its bytes and time, up to the bounds, and its alerts (the
        relay appends to the stream's log itself, and hands alerts to :meth:`add_alerts`)."""
        at = _monotonic()
        if not self._log.add(chunk, at, self.received + len(chunk)):
            self.past(chunk, at)
        if alerts:
            self.add_alerts(alerts)

    def past(self, chunk: bytes, at: float) -> None:
        """A read past the log's bound: timed and kept while this record's bounds allow."""
        n = len(chunk)
        self._past_bytes += n
        if len(self._log.times) + len(self._x_times) < self.max_reads:
            self._x_times.append(at)
            self._x_sizes.append(n)
        else:
            self._untimed += 1
        room = self.max_bytes - self.kept
        if room > 0:
            piece = chunk if n <= room else chunk[:room]
            self._x_chunks.append(piece)
            self._x_bytes += len(piece)

    @property
    def received(self) -> int:
        return self._log.logged_bytes() + self._past_bytes

    @property
    def kept(self) -> int:
        return min(self._log.logged_bytes(), self.max_bytes) + self._x_bytes

    @property
    def reads_dropped(self) -> int:
        """Reads not timed (past ``max_reads``)."""
        return max(0, len(self._log.times) - self.max_reads) + self._untimed

    @property
    def chunks(self) -> list[bytes]:
        """The bytes kept, read by read (the read that reaches ``max_bytes`` cut there)."""
        out = []
        room = self.max_bytes
        for chunk in self._log.chunks:
            if room <= 0:
                break
            piece = chunk if len(chunk) <= room else chunk[:room]
            out.append(piece)
            room -= len(piece)
        return out + self._x_chunks

    def _trim(self) -> None:
        """Once the stream is over, let go of what a shared log holds past this record's
        bounds (the recorder keeps a larger head): the registry keeps fifty streams."""
        log = self._log
        n = len(log.chunks)
        timed = min(len(log.times), self.max_reads)
        if log.logged_bytes() <= self.max_bytes:
            covered = n
        elif self.max_bytes <= 0:
            covered = 0
        else:  # the reads that start before max_bytes, found at C speed
            ends = list(accumulate(map(len, log.chunks)))
            covered = min(n, bisect_left(ends, self.max_bytes) + 1)
        if covered >= n and timed >= len(log.times):
            return
        received = self.received
        mine = ReadLog(log.max_bytes, log.max_reads)
        mine.times = log.times[:covered]
        mine.chunks = log.chunks[:covered]
        if timed > covered:  # timed reads whose bytes are past max_bytes: their times only
            self._x_times = log.times[covered:timed] + self._x_times
            self._x_sizes = array("q", map(len, log.chunks[covered:timed])) + self._x_sizes
        self._untimed += len(log.times) - max(timed, covered)
        self._log = mine
        self._past_bytes = received - mine.logged_bytes()

    def add_alerts(self, alerts: Iterable[Alert]) -> None:
        marks = alert_marks(alerts, self.received)
        if not marks:
            return
        for m in marks:
            self.alert_counts[m.name] = self.alert_counts.get(m.name, 0) + 1
            if len(self.alerts) < self.max_alerts:
                self.alerts.append(m)
        if self.registry is not None:
            self.registry.publish(self)

    def finish(self, summary: Mapping[str, Any], alerts: Mapping[str, int] | None = None) -> None:
        """The stream is over: its ``stream.summary`` fields (kept as they are, not to be
        changed; :attr:`summary` makes the page's copy) and its exact alert counts, given
        apart or as the summary's ``alerts`` field."""
        self._fields = summary
        self._trim()
        if alerts is None and isinstance(summary.get("alerts"), dict):
            alerts = summary["alerts"]
        if alerts is not None:
            self.alert_counts = dict(alerts)
        if self.registry is not None:
            self.registry.publish(self)

    @property
    def reads(self) -> list[tuple[float, int]]:
        """Each timed read: (seconds since the stream started, its size)."""
        started = self.started
        log = self._log
        timed = min(len(log.times), self.max_reads)
        out = [
            (t - started, len(c))
            for t, c in zip(log.times[:timed], log.chunks[:timed], strict=True)
        ]
        out += [(t - started, n) for t, n in zip(self._x_times, self._x_sizes, strict=True)]
        return out

    @property
    def body(self) -> bytes:
        return b"".join(self.chunks)

    def read_sizes(self) -> list[int]:
        return [n for _, n in self.reads]

    def row(self) -> dict[str, Any]:
        """The stream-list row: today's summary fields, and the monitoring ones when given."""
        s = self.summary or {}
        alerts = self.alert_counts
        verdict = s.get("verdict")
        if verdict is None:
            verdict = "active" if self.active else "-"
        return {
            "id": self.stream_id,
            "method": self.method,
            "path": self.path,
            "route": s.get("route", "-"),
            "model": s.get("model", "-"),
            "status": self.status,
            "verdict": verdict,
            "active": self.active,
            "alerts": dict(alerts),
            "ttfb_ms": s.get("ttfb_ms", "-"),
            "ttft_ms": s.get("ttft_ms", "-"),
            "duration_ms": s.get("duration_ms", "-"),
            "bytes": s.get("bytes", self.received),
            "events": s.get("events", "-"),
            "dialect": s.get("dialect", self.hint or "-"),
            "ended_by": s.get("ended_by", "-"),
            "finish_reason": s.get("finish_reasons", s.get("finish_reason", "-")),
            "started": self.started_wall,
        }


class Registry:
    """The last ``max_streams`` streams and the subscribers to their updates."""

    def __init__(
        self,
        *,
        max_streams: int = 50,
        max_bytes: int = 256 << 10,
        max_reads: int = 10_000,
        max_alerts: int = 200,
    ) -> None:
        self.max_streams = max_streams
        self.max_bytes = max_bytes
        self.max_reads = max_reads
        self.max_alerts = max_alerts
        self.streams: OrderedDict[str, StreamRecord] = OrderedDict()
        self.subscribers: set[asyncio.Queue[dict[str, Any]]] = set()

    def open(
        self,
        stream_id: str,
        *,
        method: str,
        path: str,
        status: int,
        mode: str,
        hint: str | _Lazy | None,
        request: dict[str, Any] | _Lazy,
        response: dict[str, Any] | _Lazy,
        started: float,
        log: ReadLog | None = None,
    ) -> StreamRecord:
        """A new stream (``started`` on the monotonic clock; ``log``: its reads as the
        relay keeps them); the oldest leaves past the cap."""
        record = StreamRecord(
            stream_id=stream_id,
            method=method,
            path=path,
            status=status,
            mode=mode,
            hint=hint,
            started_wall=time.time() - (time.monotonic() - started),
            started=started,
            request=request,
            response=response,
            max_bytes=self.max_bytes,
            max_reads=self.max_reads,
            max_alerts=self.max_alerts,
            registry=self,
            log=log,
        )
        self.streams[stream_id] = record
        while len(self.streams) > self.max_streams:
            self.streams.popitem(last=False)
        self.publish(record)
        return record

    def get(self, stream_id: str) -> StreamRecord | None:
        return self.streams.get(stream_id)

    def rows(self) -> list[dict[str, Any]]:
        """Newest first."""
        return [r.row() for r in reversed(self.streams.values())]

    def publish(self, record: StreamRecord) -> None:
        """Tell the subscribers (open inspector pages) of a change; with none, nothing to do."""
        if not self.subscribers:
            return
        row = record.row()
        for queue in list(self.subscribers):
            with contextlib.suppress(asyncio.QueueFull):
                queue.put_nowait(row)

    def subscribe(self) -> asyncio.Queue[dict[str, Any]]:
        queue: asyncio.Queue[dict[str, Any]] = asyncio.Queue(_QUEUE)
        self.subscribers.add(queue)
        return queue

    def unsubscribe(self, queue: asyncio.Queue[dict[str, Any]]) -> None:
        self.subscribers.discard(queue)
