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
"""

from __future__ import annotations

import time

from bench.rig import event, final_events
from sse_proxy.core import Limits, StreamReassembler
from sse_proxy.obs.logs import get_logger
from sse_proxy.obs.sink import AlertSink
from sse_proxy.server.context import RequestContext
from sse_proxy.server.timing import StreamObserver

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
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
