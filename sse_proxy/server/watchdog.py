"""Every stream's deadlines on one timer of the event loop.

A stream has three: the wait for its response's head, the idle timeout between reads and
the stall watch. A loop timer each (a ``call_later`` handle to set and to cancel) would be
a good part of what a stream start costs; here a deadline is an entry in a bin, the bins'
times in a heap, and the loop has one timer, for the earliest bin. A near deadline's bin
is its 10 ms, rounded up (it is met at most that late); a far one's is its whole second,
rounded down: the bin is looked at early, and a watch not due yet goes into the near bin
it is due in (a check is never called before its time). Cancelling is a set removal; a
stream adds nothing that stays once it ends.
"""

from __future__ import annotations

import asyncio
import heapq
import math
import weakref
from collections.abc import Callable
from typing import Final

__all__ = ["Watch", "Watchdog"]

FINE: Final = 0.01
"""A near deadline is met at most this late (seconds)."""
_COARSE_STEPS: Final = 100  # a far deadline's bin: this many FINE steps (one second)
_FAR: Final = 2.0  # from this far ahead, a deadline goes into a coarse bin


class Watch:
    """One deadline of one stream: ``check`` is called when it comes and returns the
    seconds until it should be called again (None: done)."""

    __slots__ = ("_at", "_bin", "_check")

    def __init__(self, check: Callable[[], float | None]) -> None:
        self._check: Callable[[], float | None] | None = check
        self._bin: set[Watch] | None = None
        self._at = 0.0  # when it is due (the loop's clock): never called before

    def cancel(self) -> None:
        if self._bin is not None:
            self._bin.discard(self)
            self._bin = None
        self._check = None  # and nothing of the stream is held

    def retarget(self, check: Callable[[], float | None]) -> None:
        """The same deadline, decided by ``check`` from now on (a cancelled one stays so).
        A stream's head deadline becomes its idle watch this way: one entry, not two."""
        if self._check is not None:
            self._check = check


_DOGS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Watchdog] = weakref.WeakKeyDictionary()


class Watchdog:
    """The deadlines of one event loop (:meth:`of`)."""

    __slots__ = ("__weakref__", "_armed", "_bins", "_handle", "_keys", "_loop")

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self._loop = loop
        self._bins: dict[int, set[Watch]] = {}
        self._keys: list[int] = []  # a heap of the bins' keys (their times in FINE steps)
        self._handle: asyncio.TimerHandle | None = None
        self._armed = math.inf

    @classmethod
    def of(cls, loop: asyncio.AbstractEventLoop | None = None) -> Watchdog:
        """The running (or given) loop's watchdog, made on first use."""
        loop = loop or asyncio.get_running_loop()
        dog = _DOGS.get(loop)
        if dog is None:
            dog = _DOGS[loop] = cls(loop)
        return dog

    def watch(self, delay: float, check: Callable[[], float | None]) -> Watch:
        """Call ``check`` in ``delay`` seconds (and again as long as it asks to)."""
        watch = Watch(check)
        self._put(watch, delay)
        return watch

    def pending(self) -> int:
        """Watches not yet due or cancelled, counted bin by bin (not a ``__len__``: a
        watchdog is always true, and ``dog or ...`` must not count them)."""
        return sum(map(len, self._bins.values()))

    def _put(self, watch: Watch, delay: float) -> None:
        watch._at = due = self._loop.time() + delay
        at = due / FINE
        # far: the whole second's bin, looked at early; near: its 10 ms, at most that late
        key = math.floor(at / _COARSE_STEPS) * _COARSE_STEPS if delay >= _FAR else math.ceil(at)
        found = self._bins.get(key)
        if found is None:
            found = self._bins[key] = set()
            heapq.heappush(self._keys, key)
            if key < self._armed:
                self._arm(key)
        found.add(watch)
        watch._bin = found

    def _arm(self, key: int) -> None:
        if self._handle is not None:
            self._handle.cancel()
        self._armed = key
        self._handle = self._loop.call_at(key * FINE, self._fire)

    def _fire(self) -> None:
        self._handle = None
        self._armed = math.inf
        clock = self._loop.time()
        now = clock / FINE + 0.1  # a loop's clock in whole milliseconds
        keys, bins = self._keys, self._bins
        due: list[Watch] = []
        while keys and keys[0] <= now:
            found = bins.pop(heapq.heappop(keys), None)
            if found:
                due.extend(found)
        try:
            for watch in due:
                watch._bin = None
                check = watch._check
                if check is None:
                    continue
                early = watch._at - clock
                if early > 0.001:  # a far bin, looked at early: into the near bin it is due in
                    self._put(watch, early)
                    continue
                try:
                    left = check()
                except Exception as exc:  # noqa: BLE001 - one stream's bug, not every stream's deadlines
                    self._loop.call_exception_handler(
                        {"message": "sse-proxy: a deadline's check failed", "exception": exc}
                    )
                    continue
                if left is not None and watch._check is not None:  # (it may cancel itself)
                    self._put(watch, max(left, FINE))
        finally:
            if keys and keys[0] < self._armed:
                self._arm(keys[0])
