"""Bookkeeping that waits while requests start.

Fifty requests that start together queue on one event loop: whatever the proxy spends on
the first twenty-four streams before the twenty-fifth gets its first byte, that stream's
client waits for. In passthrough, a stream's observation (reassembly, alerts, the taps) and
its end (the summary line, the metrics, the trace) change nothing the client receives, so
while requests are starting that work is queued here: it runs once no admitted request
owes its client a first byte and none has started for ``quiet_s`` (starts spread over some
milliseconds are one burst: between two of them no first byte may be owed, and the queue
run then, in the burst, is what the next requests wait behind), or after ``max_wait``,
whichever comes first, in slices of ``slice_s`` that let the loop in between. Streams that
end together are spread the same way (:meth:`Backlog.ending`). A quiet proxy runs it at
once, as before.

Nothing is dropped or reordered within a stream: a scrape of the metrics, the inspector and
a shutdown run what is queued first (:meth:`Backlog.flush`).
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import Callable
from typing import Final

from sse_proxy.obs.logs import get_logger

__all__ = ["Backlog"]

MAX_WAIT: Final = 0.05
"""The longest a stream's bookkeeping waits (its alert lines are this much later, at most)."""
QUIET: Final = 0.005
"""And it waits until no request has started for this long (a burst's starts, spread)."""
SLICE: Final = 0.002
"""Run queued work for about this long, then let the loop serve reads and writes again."""
BUNCH: Final = 0.001
"""Streams that end within this long of the last one are a bunch (see :meth:`Backlog.ending`)."""


class Backlog:
    """One per application: a FIFO of deferred jobs, the count of first bytes owed and
    when the last request started."""

    __slots__ = (
        "_due",
        "_handle",
        "_jobs",
        "_last_end",
        "_last_start",
        "_quiet",
        "_since",
        "_slice",
        "_wait",
        "waiting",
    )

    def __init__(
        self, *, max_wait: float = MAX_WAIT, quiet_s: float = QUIET, slice_s: float = SLICE
    ) -> None:
        self.waiting = 0
        """Admitted requests whose client has not had a first byte yet."""
        self._jobs: deque[Callable[[], object]] = deque()
        self._handle: asyncio.TimerHandle | asyncio.Handle | None = None
        self._due = math.inf  # when the handle runs the queue (the monotonic clock)
        self._since = 0.0  # when the queue's first job came
        self._last_start = -math.inf
        self._last_end = -math.inf
        self._wait = max_wait
        self._quiet = quiet_s
        self._slice = slice_s

    @property
    def busy(self) -> bool:
        """Whether new bookkeeping should be queued rather than done now."""
        return self.waiting > 0 or bool(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def request_started(self) -> None:
        self.waiting += 1
        self._last_start = time.monotonic()

    def first_byte_sent(self) -> None:
        """One request owes no first byte any more (sent, failed or answered otherwise)."""
        self.waiting -= 1
        if self.waiting == 0 and self._jobs:
            self._schedule()

    def ending(self, now: float) -> bool:
        """A stream ends at ``now`` (the monotonic clock): whether its summing up should be
        queued. Yes while requests owe a first byte, and when another stream ended a
        moment ago: streams that end together (as they start together) would otherwise be
        summed up in one turn of the loop, one after the other, while the others' events
        wait. A lone stream's end is summed up at once, before its client sees
        the end."""
        bunched = now - self._last_end < BUNCH
        self._last_end = now
        return bunched or self.waiting > 0

    def defer(self, job: Callable[[], object]) -> None:
        """Run ``job`` once requests have stopped starting (at most ``max_wait``)."""
        if not self._jobs:
            self._since = time.monotonic()
        self._jobs.append(job)
        if self._handle is None:
            self._schedule()

    def flush(self) -> None:
        """Run everything queued now (a scrape, the inspector, a shutdown)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
            self._due = math.inf
        jobs = self._jobs
        while jobs:
            _run(jobs.popleft())

    def _when(self) -> float:
        """When the queue should run: at its bound, or once the starts have stopped."""
        overdue = self._since + self._wait
        if self.waiting:
            return overdue
        return min(overdue, self._last_start + self._quiet)

    def _schedule(self) -> None:
        due = self._when()
        if self._handle is not None:
            if due >= self._due:
                return
            self._handle.cancel()  # a later run, replaced by a sooner one
        loop = asyncio.get_running_loop()
        self._due = due
        delay = due - time.monotonic()
        if delay <= 0:
            self._handle = loop.call_soon(self._drain)
        else:
            self._handle = loop.call_later(delay, self._drain)

    def _drain(self) -> None:
        self._handle = None
        self._due = math.inf
        if self._when() > time.monotonic() + 0.0005:  # a request started since: later
            self._schedule()
            return
        jobs = self._jobs
        deadline = time.perf_counter() + self._slice
        while jobs:
            _run(jobs.popleft())
            if jobs and time.perf_counter() > deadline:
                # the rest after the loop has served I/O (or, should requests start again,
                # once they stop: still within the first job's bound)
                self._schedule()
                return


def _run(job: Callable[[], object]) -> None:
    try:
        job()
    except Exception:  # noqa: BLE001 - one stream's bookkeeping must not cost the others theirs
        get_logger().exception("proxy.bookkeeping_failed")
