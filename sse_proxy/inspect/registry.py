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
from collections import OrderedDict
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from sse_proxy.core.alerts import Alert
from sse_proxy.inspect.strip import AlertMark, alert_marks
from sse_proxy.obs.redact import scrub_held_value

__all__ = ["Registry", "StreamRecord"]

_QUEUE = 256  # updates a slow subscriber may lag behind before it misses some


@dataclass
class StreamRecord:
    """One stream as the inspector shows it."""

    stream_id: str
    method: str
    path: str
    status: int
    mode: str
    hint: str | None
    started_wall: float
    started: float
    request: dict[str, Any]
    response: dict[str, Any]
    max_bytes: int
    max_reads: int
    max_alerts: int
    registry: Registry | None = None
    chunks: list[bytes] = field(default_factory=list)
    kept: int = 0
    received: int = 0
    reads: list[tuple[float, int]] = field(default_factory=list)
    reads_dropped: int = 0
    alerts: list[AlertMark] = field(default_factory=list)
    alert_counts: dict[str, int] = field(default_factory=dict)
    summary: dict[str, Any] | None = None

    @property
    def active(self) -> bool:
        return self.summary is None

    def read(self, chunk: bytes, alerts: Iterable[Alert] = ()) -> None:
        """One observed read: keep its bytes up to the cap, its time, its alerts."""
        t = time.monotonic() - self.started
        n = len(chunk)
        if len(self.reads) < self.max_reads:
            self.reads.append((t, n))
        else:
            self.reads_dropped += 1
        room = self.max_bytes - self.kept
        if room > 0:
            piece = chunk if n <= room else chunk[:room]
            self.chunks.append(piece)
            self.kept += len(piece)
        self.received += n
        if alerts:
            self.add_alerts(alerts)

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

    def finish(self, summary: dict[str, Any]) -> None:
        """The stream's ``stream.summary`` fields (message text is dropped here, and what
        the proxy holds: an upstream may quote a key back as a model name or an id)."""
        self.summary = {k: scrub_held_value(v) for k, v in summary.items() if k != "text"}
        if isinstance(self.summary.get("alerts"), dict):
            self.alert_counts = dict(self.summary["alerts"])
        if self.registry is not None:
            self.registry.publish(self)

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
        hint: str | None,
        request: dict[str, Any],
        response: dict[str, Any],
        started: float,
    ) -> StreamRecord:
        """A new stream (``started`` on the monotonic clock); the oldest leaves past the cap."""
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
