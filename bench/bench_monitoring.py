"""Hand-run: what the monitoring adds to the proxy's per-read hot path, in CPU per event.

Not a test. The whole-proxy figure comes from ``bench.bench_proxy --baseline-src`` (the
branch against ``main``, side by side); on a shared 2-core machine its noise is larger
than the cost being measured, so this isolates that cost in one process::

    .venv/bin/python -m bench.bench_monitoring

It feeds the bench's OpenAI stream one event per read (what a paced upstream produces)
to the reassembler exactly as the relay does (passthrough: no events, no frame ends, no
text kept), with and without :meth:`StreamObserver.tick` after each read, and prints CPU
µs per event for both (best of 7, process CPU time). The difference is the hot-path cost
of the monitoring; divided by the proxy's paced CPU per event (bench_proxy) it is the
share of the proxy's CPU.

Then what a stream's end costs the two metric exports, per stream and spread over its
events: the Prometheus histograms (``Metrics.record_stream``) and, with ``--otlp-endpoint``,
the OpenTelemetry GenAI streaming histograms (``GenAIMetricsTap``: time to first chunk and
every gap, from the gap histogram the stream already keeps), for streams of 50, 500 and
5,000 paced events.
"""

from __future__ import annotations

import time
from typing import Any

from bench.rig import event, final_events
from sse_proxy.core import Limits, StreamReassembler
from sse_proxy.obs.logs import get_logger
from sse_proxy.obs.metrics import Metrics
from sse_proxy.obs.sink import AlertSink
from sse_proxy.server.context import RequestContext
from sse_proxy.server.tap_types import StreamEnd
from sse_proxy.server.taps import GenAIMetricsTap
from sse_proxy.server.timing import StreamObserver
from sse_proxy.server.tracing import StreamMetrics

EVENTS = 20_000
ROUNDS = 7


def _reads() -> list[bytes]:
    return [event(i, 1_700_000_000_000_000_000 + i) for i in range(EVENTS)] + [final_events(0)]


def _run(reads: list[bytes], observe: bool) -> float:
    r = StreamReassembler(
        None,
        hint="openai",
        limits=Limits(),
        emit_events=False,
        frame_ends=False,
        keep_text=False,
    )
    sink = AlertSink(get_logger(stream_id="bench"))
    obs = StreamObserver(
        r, sink, RequestContext(route="bench"), stall_threshold=15.0, now=time.monotonic
    )
    feed, tick, clock = r.feed, obs.tick, time.monotonic
    start = time.process_time()
    if observe:
        for chunk in reads:
            out = feed(chunk)
            tick(clock())  # the relay passes the time its idle watch took
            if out.alerts:
                obs.emit(out.alerts)
    else:
        for chunk in reads:
            clock()  # the relay's idle watch stamps every read either way
            out = feed(chunk)
            if out.alerts:
                sink.emit_all(out.alerts)
    elapsed = time.process_time() - start
    r.close()
    obs.summary_fields("upstream_eof", 0.0, time.monotonic())
    assert r.events_dispatched == EVENTS + 2
    return elapsed / (EVENTS + 2) * 1e6


class _NoExport:
    """An exporter that sends nothing: the bench times the recording, not the network."""

    def export(self, _data: Any, **_kw: Any) -> None:
        return None

    def shutdown(self, **_kw: Any) -> None:
        return None


def _ended(events: int) -> StreamEnd:
    """A finished paced stream of ``events`` events (gaps of 20-40 ms), as the relay ends it."""
    r = StreamReassembler(None, hint="openai", emit_events=False, frame_ends=False)
    sink = AlertSink(get_logger(stream_id="bench"))
    clock = [0.0]
    obs = StreamObserver(
        r, sink, RequestContext(route="bench"), stall_threshold=15.0, now=lambda: clock[0]
    )
    for i in range(events):
        clock[0] += 0.02 + (i % 7) * 0.003
        r.feed(event(i, 1_700_000_000_000_000_000 + i))
        obs.tick(clock[0])
    r.feed(final_events(0))
    r.close()
    fields = obs.summary_fields("upstream_eof", 0.0, clock[0])
    fields.update(dialect="openai", ended_by="upstream_eof", bytes=0)
    return StreamEnd(
        ended_by="upstream_eof",
        fields=fields,
        alerts={},
        closing=(),
        received=0,
        events=events,
        ttfb=0.2,
        duration=clock[0],
        gaps=obs.gaps,
        ttfc=0.25,
    )


def _stream_end(events: int, rounds: int = 2000) -> tuple[float, float]:
    """CPU µs per stream end: (Prometheus record_stream, the GenAI tap's finish)."""
    end = _ended(events)
    metrics = Metrics()
    genai = StreamMetrics("", None, exporter=_NoExport())
    tap = GenAIMetricsTap(genai, "/v1/chat/completions", "http://api.example:443", str)

    def prometheus() -> None:
        metrics.record_stream(end.fields, end.gaps, duration=end.duration, alerts={})

    def otlp() -> None:
        tap.finish(end)

    out = []
    for record in (prometheus, otlp):
        best = float("inf")
        for _ in range(ROUNDS):
            start = time.process_time()
            for _ in range(rounds):
                record()
            best = min(best, (time.process_time() - start) / rounds * 1e6)
        out.append(best)
    genai.shutdown()
    return out[0], out[1]


def main() -> int:
    reads = _reads()
    base = min(_run(reads, False) for _ in range(ROUNDS))
    with_obs = min(_run(reads, True) for _ in range(ROUNDS))
    added = with_obs - base
    print(f"reassembler per read (one event per read), best of {ROUNDS}, {EVENTS:,} events:")
    print(f"  without monitoring  {base:6.2f} CPU µs/event")
    print(f"  with monitoring     {with_obs:6.2f} CPU µs/event  (+{added:.2f} µs)")
    for paced in (35.0, 40.0):
        print(
            f"  at {paced:.0f} µs/event of whole-proxy CPU (bench_proxy, 50 paced streams): "
            f"+{added / paced * 100:.1f} %"
        )
    print("at a stream's end, best of 7 (CPU µs per stream; per event of that stream):")
    for n in (50, 500, 5000):
        prom, otel = _stream_end(n)
        print(
            f"  {n:>5} events  Prometheus histograms {prom:6.2f} µs ({prom / n:.4f}/event)  "
            f"GenAI OTLP histograms {otel:6.2f} µs ({otel / n:.4f}/event)"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
