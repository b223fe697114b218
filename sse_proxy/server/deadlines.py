"""The deadlines of one exchange, on the loop's :class:`~.watchdog.Watchdog`.

The wait for the upstream's response head (:class:`HeadDeadline`) and the idle time
between the body's reads (:class:`IdleWatch`) are one watch handed over, never a timer per
read or per stream.
"""

from __future__ import annotations

import asyncio

import aiohttp

from sse_proxy.server.exchange import ProxyParts
from sse_proxy.server.watchdog import FINE, Watch, Watchdog

__all__ = ["HeadDeadline", "IdleWatch"]


class HeadDeadline:
    """``asyncio.timeout`` for one await, without its timer and context manager (a
    request's start is the proxy's per-request cost): a watchdog deadline."""

    __slots__ = ("_cancelling", "_fired", "_task", "_watch")

    def __init__(self, parts: ProxyParts, seconds: float) -> None:
        task = asyncio.current_task(parts.loop)  # (the loop given: not looked up again)
        assert task is not None  # a handler runs in a task
        self._task = task
        self._cancelling = task.cancelling()
        self._fired = False
        assert parts.watchdog is not None  # (set while the app runs)
        self._watch = parts.watchdog.watch(seconds, self._fire)

    def _fire(self) -> None:
        self._fired = True
        self._task.cancel()

    def expired(self) -> bool:
        """Whether the cancellation being handled is this deadline's (and only its)."""
        return self._fired and self._task.uncancel() <= self._cancelling

    def cancel(self) -> None:
        self._watch.cancel()

    def hand_over(self) -> Watch:
        """The head is here: the deadline's watch, for the body's :class:`IdleWatch` to
        take over (until it does, it only waits)."""
        self._watch.retarget(_until_taken_over)
        return self._watch


def _until_taken_over() -> float:
    return FINE


class IdleWatch:
    """The idle timeout between upstream chunks, without a timer per chunk or per stream.

    A read only stamps the time (``last``); the loop's :class:`~.watchdog.Watchdog` looks
    at the stamp when the deadline it was set for comes, sets it again for the moved
    deadline, and once the gap passes the limit closes the upstream response, which wakes
    the pending read with an error that the relay then reports as ``timeout``.
    """

    __slots__ = ("_idle", "_upstream", "_watch", "expired", "last", "now")

    def __init__(
        self,
        upstream: aiohttp.ClientResponse,
        idle: float,
        take_over: Watch | None,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        """``take_over``: the deadline of the wait for the head, due no later than this
        one (it only ever checks early, never late), which becomes this watch. ``loop``:
        the running loop, given, so that no read looks it up."""
        self._upstream = upstream
        self._idle = idle
        self.now = loop.time
        self.last = self.now()
        self.expired = False
        self._watch: Watch | None = None
        if take_over is not None and idle:
            take_over.retarget(self._check)
            self._watch = take_over
        elif idle:
            self._watch = Watchdog.of(loop).watch(idle, self._check)

    def _check(self) -> float | None:
        # The deadline moves with every read; a deadline re-armed per read would cost more.
        left = self.last + self._idle - self.now()
        if left > 0:
            return left
        self._watch = None
        self.expired = True
        self._upstream.close()
        return None

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None
