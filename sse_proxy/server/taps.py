"""The observers of one SSE stream, behind one small protocol.

A stream has several observers: the ``stream.summary`` line, the trace span, the live
inspector's record, the recording of ``--record``, the metrics, and whatever a tool adds
(``test-client --html`` keeps what the client was sent). Each is a :class:`Tap`: told
once, at the end, how the stream went (:class:`StreamEnd`, computed once for all).

The few that need the bytes too implement a per-read hook as well (:class:`ReadTap`,
:class:`ObserveTap`, :class:`WriteTap`). :class:`Taps` sorts a stream's taps by hook once,
when the stream opens (as httpcore's ``Trace`` decides once whether to trace): the relay
keeps each hook in a local and calls it only when some tap has it, so a stream with no
recorder, inspector or write capture pays nothing per read.
"""

from __future__ import annotations

import functools
import itertools
from collections.abc import Callable, Iterable, Sequence
from typing import Any, ParamSpec, cast

from sse_proxy.cache import size_of
from sse_proxy.core.alerts import Alert
from sse_proxy.core.dialects.registry import DIALECTS
from sse_proxy.inspect.registry import StreamRecord
from sse_proxy.obs.metrics import Metrics
from sse_proxy.obs.sink import AlertSink
from sse_proxy.server.exchange import Exchange
from sse_proxy.server.tap_types import ObserveTap, ReadTap, StreamEnd, Tap, WriteTap
from sse_proxy.server.tracing import Attrs, RequestSpan, StreamMetrics, server_of

__all__ = [
    "ClientWrites",
    "DecodedInspectorTap",
    "GenAIMetricsTap",
    "InspectorTap",
    "MetricsTap",
    "SpanTap",
    "SummaryLine",
    "Taps",
]

_P = ParamSpec("_P")


def _fan(hooks: Sequence[Callable[_P, None]]) -> Callable[_P, None] | None:
    """One callable for a hook: None when no tap has it, the tap's own when one does."""
    if not hooks:
        return None
    if len(hooks) == 1:
        return hooks[0]

    def each(*args: _P.args, **kwargs: _P.kwargs) -> None:
        for hook in hooks:
            hook(*args, **kwargs)

    return each


@functools.cache
def _hooks_of(cls: type[Tap]) -> tuple[bool, bool, bool]:
    """Which per-read hooks a tap class has (read, observed, wrote). A runtime protocol
    check costs tens of microseconds: it is made once per class, not per stream."""
    return issubclass(cls, ReadTap), issubclass(cls, ObserveTap), issubclass(cls, WriteTap)


class Taps:
    """One stream's taps, sorted by hook once; ``read``, ``observed``, ``wrote``: the hook
    to call per read or write, None when no tap has it."""

    __slots__ = ("observed", "read", "taps", "wrote")

    def __init__(self, taps: Iterable[Tap | None]) -> None:
        self.taps = tuple(t for t in taps if t is not None)
        reads: list[Callable[[bytes], None]] = []
        observes: list[Callable[[bytes, tuple[Alert, ...]], None]] = []
        writes: list[Callable[[bytes], None]] = []
        for tap in self.taps:
            reads_, observes_, writes_ = _hooks_of(type(tap))
            if reads_:
                reads.append(cast(ReadTap, tap).read)
            if observes_:
                observes.append(cast(ObserveTap, tap).observed)
            if writes_:
                writes.append(cast(WriteTap, tap).wrote)
        self.read = _fan(reads)
        self.observed = _fan(observes)
        self.wrote = _fan(writes)

    def finish(self, end: StreamEnd) -> None:
        for tap in self.taps:
            tap.finish(end)


class SummaryLine:
    """The ``stream.summary`` line: a warning for a stream that went wrong."""

    __slots__ = ("sink",)

    def __init__(self, sink: AlertSink) -> None:
        self.sink = sink

    def finish(self, end: StreamEnd) -> None:
        broken = end.fields["verdict"] != "ok"
        self.sink.summary_of(end.fields, level="warning" if self.sink.warned or broken else "info")


class SpanTap:
    """The request's trace span: the stream's GenAI attributes, verdict and timings; the
    span ends here (a stream summed up after its handler returned is still in it)."""

    __slots__ = ("span",)

    def __init__(self, span: RequestSpan) -> None:
        self.span = span

    def finish(self, end: StreamEnd) -> None:
        self.span.stream(end.fields, end.ttfc)
        self.span.end()


_NO_PROVIDER: Attrs = ()


class GenAIMetricsTap:
    """The GenAI streaming histograms (time to first chunk, time per output chunk), with
    the conventions' attributes; a stream of no known GenAI provider is not theirs. The
    attributes of a dialect, pair of models, path and upstream are worked out once and
    kept (in ``metrics.attrs``: the app's, bounded in bytes, the path being the client's)."""

    __slots__ = ("labels", "metrics", "path", "upstream")

    def __init__(
        self,
        metrics: StreamMetrics,
        path: str,
        upstream: str,
        labels: Callable[[str | None], str],
    ) -> None:
        self.metrics = metrics
        self.path = path  # the request's: it tells Vertex AI from the Gemini API
        self.upstream = upstream
        self.labels = labels  # the metrics' bounded model names

    def finish(self, end: StreamEnd) -> None:
        get = end.fields.get
        metrics = self.metrics
        key = (
            get("dialect"),
            get("request_model"),
            get("response_model"),
            self.path,
            self.upstream,
        )
        attrs = metrics.attrs.get(key)
        if attrs is None:
            attrs = self._attrs(*key[:4])
            cost = size_of(self.path, self.upstream, *(str(v) for v in key[:3]))
            metrics.attrs.put(key, attrs, cost + 64 * len(attrs))
        if attrs:
            metrics.record(attrs, end.ttfc, end.gaps)

    def _attrs(self, dialect: Any, request_model: Any, response_model: Any, path: str) -> Attrs:
        described = DIALECTS.get(str(dialect))
        provider = described.provider_for(path) if described is not None else None
        if provider is None:
            return _NO_PROVIDER
        attrs: list[tuple[str, Any]] = [
            ("gen_ai.operation.name", provider.operation),
            ("gen_ai.provider.name", provider.name),
        ]
        for name, model in (("request", request_model), ("response", response_model)):
            if model:
                attrs.append((f"gen_ai.{name}.model", self.labels(str(model))))
        address, port = server_of(self.upstream)
        attrs += [("server.address", address), ("server.port", port)]
        return tuple(attrs)


class InspectorTap:
    """The live inspector's record of the stream (``serve --ui``): its reads are the
    stream's read log, its alerts come from the stream's observer."""

    __slots__ = ("record",)

    def __init__(self, record: StreamRecord) -> None:
        self.record = record

    def finish(self, end: StreamEnd) -> None:
        if end.closing:
            self.record.add_alerts(end.closing)
        self.record.finish(end.fields, end.alerts)


class DecodedInspectorTap(InspectorTap):
    """The inspector's record of a compressed stream: fed what the observer reads, the
    decoded bytes, with their alerts."""

    __slots__ = ("observed",)

    def __init__(self, record: StreamRecord) -> None:
        super().__init__(record)
        self.observed = record.read  # the record's own method: no layer per read


class MetricsTap:
    """The stream's counters and histograms."""

    __slots__ = ("metrics", "route")

    def __init__(self, metrics: Metrics, route: str) -> None:
        self.metrics = metrics
        self.route = route

    def finish(self, end: StreamEnd) -> None:
        m = self.metrics
        m.bytes.inc(end.received)
        m.events.inc(end.events)
        for name, count in end.alerts.items():
            m.child(m.alerts, event=name).inc(count)
        m.route_stream(self.route, end.ended_by).inc()
        if end.ttfb is not None:
            m.ttfb.observe(end.ttfb)
        m.record_stream(end.fields, end.gaps, duration=end.duration, alerts=end.alerts)


class _Writes:
    """One stream's writes to the client, up to a cap."""

    __slots__ = ("kept", "room")

    def __init__(self, room: int) -> None:
        self.kept: list[bytes] = []
        self.room = room

    def wrote(self, data: bytes) -> None:
        if self.room > 0:
            piece = data[: self.room]
            self.kept.append(piece)
            self.room -= len(piece)

    def finish(self, end: StreamEnd) -> None:
        pass


class ClientWrites:
    """What the proxy wrote to the client when it re-chunked, write by write, for a tool
    that shows where the writes fell (``test-client --html``); install :meth:`tap` in
    the app's ``STREAM_TAPS``.

    ``max_bytes`` caps what is kept of each stream.
    """

    def __init__(self, max_bytes: int = 256 << 10) -> None:
        self.max_bytes = max_bytes
        self.streams: list[_Writes] = []

    def tap(self, _ex: Exchange) -> WriteTap:
        writes = _Writes(self.max_bytes)
        self.streams.append(writes)
        return writes

    def one_stream(self) -> tuple[bytes, tuple[int, ...]] | None:
        """The bytes written on the one SSE stream there was, and the end offset of each
        write; None when there was no such stream, several, or nothing was re-chunked."""
        if len(self.streams) != 1 or not self.streams[0].kept:
            return None
        kept = self.streams[0].kept
        return b"".join(kept), tuple(itertools.accumulate(len(c) for c in kept))
