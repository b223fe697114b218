"""Bookkeeping that waits while other requests wait for their first byte.

Fifty requests that start together queue on one event loop: whatever the proxy spends on
the first twenty-four streams before the twenty-fifth gets its first byte, that stream's
client waits for. In passthrough, a stream's observation (reassembly, alerts, the taps) and
its end (the summary line, the metrics, the trace) change nothing the client receives, so
while any admitted request has not sent its client a first byte, that work is queued here,
and it runs once none is waiting or after ``max_wait``, whichever comes first, in slices of
``slice_s`` that let the loop in between. A quiet proxy runs it at once, as before.

Nothing is dropped or reordered within a stream: a scrape of the metrics, the inspector and
a shutdown run what is queued first (:meth:`Backlog.flush`).
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from typing import Final

from sse_proxy.obs.logs import get_logger

__all__ = ["Backlog"]

MAX_WAIT: Final = 0.05
"""The longest a stream's bookkeeping waits (its alert lines are this much later, at most)."""
SLICE: Final = 0.002
"""Run queued work for about this long, then let the loop serve reads and writes again."""


class Backlog:
    """One per application: a FIFO of deferred jobs and the count of first bytes owed."""

    __slots__ = ("_handle", "_jobs", "_slice", "_soon", "_wait", "waiting")

    def __init__(self, *, max_wait: float = MAX_WAIT, slice_s: float = SLICE) -> None:
        self.waiting = 0
        """Admitted requests whose client has not had a first byte yet."""
        self._jobs: deque[Callable[[], object]] = deque()
        self._handle: asyncio.TimerHandle | asyncio.Handle | None = None
        self._soon = False  # the handle is a run on the loop's next turn, not the timer
        self._wait = max_wait
        self._slice = slice_s

    @property
    def busy(self) -> bool:
        """Whether new bookkeeping should be queued rather than done now."""
        return self.waiting > 0 or bool(self._jobs)

    def __len__(self) -> int:
        return len(self._jobs)

    def request_started(self) -> None:
        self.waiting += 1

    def first_byte_sent(self) -> None:
        """One request owes no first byte any more (sent, failed or answered otherwise)."""
        self.waiting -= 1
        if self.waiting == 0 and self._jobs:
            self._schedule(soon=True)

    def defer(self, job: Callable[[], object]) -> None:
        """Run ``job`` once no request waits for its first byte (at most ``max_wait``)."""
        self._jobs.append(job)
        if self._handle is None:
            self._schedule(soon=self.waiting == 0)

    def flush(self) -> None:
        """Run everything queued now (a scrape, the inspector, a shutdown)."""
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        jobs = self._jobs
        while jobs:
            _run(jobs.popleft())

    def _schedule(self, *, soon: bool) -> None:
        if self._handle is not None:
            if self._soon or not soon:
                return
            self._handle.cancel()  # the max_wait timer, replaced by a run now
        loop = asyncio.get_running_loop()
        self._soon = soon
        if soon:
            self._handle = loop.call_soon(self._drain)
        else:
            self._handle = loop.call_later(self._wait, self._drain)

    def _drain(self) -> None:
        self._handle = None
        jobs = self._jobs
        deadline = time.perf_counter() + self._slice
        while jobs:
            _run(jobs.popleft())
            if jobs and time.perf_counter() > deadline:
                self._schedule(soon=True)  # the rest after the loop has served I/O
                return


def _run(job: Callable[[], object]) -> None:
    try:
        job()
    except Exception:  # noqa: BLE001 - one stream's bookkeeping must not cost the others theirs
        get_logger().exception("proxy.bookkeeping_failed")
