"""An in-process upstream and proxy in lockstep: the proxy reads each upstream write apart.

Chaos ``random`` cuts k times per upstream read, and every upstream read's end is a write
boundary the client meets; but a proxy reading a fast upstream gets whatever arrived since
its last read, and that depends on timing. For a harness whose upstream runs on the same
event loop as its proxy (`test-client`, the pytest fixture) that is needless: after each
write the upstream waits (``await lockstep.written(total)``) until the proxy's relay has
read that many bytes of the stream, seen by a read tap installed in the proxy app. The
proxy's reads are then exactly the upstream's seeded writes, so the same seed makes the
same cuts on every run. The wait is bounded: a proxy that does not read the stream (a
client that left, a stream not relayed as SSE) costs :data:`CAP` once, then the upstream
stops waiting for that stream.
"""

from __future__ import annotations

import asyncio
import collections
from typing import Final

from sse_proxy.server.exchange import Exchange
from sse_proxy.server.tap_types import ReadTap, StreamEnd

__all__ = ["CAP", "Lockstep", "Pace"]

CAP: Final = 5.0
"""Seconds an upstream write waits for the proxy to read it, at most."""


class Pace:
    """One upstream stream's side: how much of it the proxy has read."""

    __slots__ = ("_changed", "off", "read")

    def __init__(self) -> None:
        self.read = 0
        self.off = False
        self._changed = asyncio.Event()

    def add(self, n: int) -> None:
        self.read += n
        self._changed.set()

    async def written(self, total: int) -> None:
        """Wait until the proxy has read ``total`` bytes of this stream (bounded)."""
        loop = asyncio.get_running_loop()
        deadline = loop.time() + CAP
        while not self.off and self.read < total:
            self._changed.clear()
            left = deadline - loop.time()
            if left <= 0:
                self.off = True  # the proxy is not reading this stream: stop waiting
                return
            try:
                await asyncio.wait_for(self._changed.wait(), left)
            except TimeoutError:
                self.off = True
                return


class _ReadCounter:
    """The proxy side: counts what the relay read of its stream."""

    __slots__ = ("pace",)

    def __init__(self, pace: Pace) -> None:
        self.pace = pace

    def read(self, chunk: bytes) -> None:
        self.pace.add(len(chunk))

    def finish(self, end: StreamEnd) -> None:
        self.pace.off = True


class Lockstep:
    """Pairs the upstream's streams with the proxy's, in the order they open."""

    def __init__(self) -> None:
        self._waiting: collections.deque[Pace] = collections.deque()

    def begin(self) -> Pace:
        """An upstream stream starts: its pace, matched with the next stream the proxy
        relays."""
        pace = Pace()
        self._waiting.append(pace)
        return pace

    def tap(self, _ex: Exchange) -> ReadTap | None:
        """For the proxy app's ``STREAM_TAPS``."""
        while self._waiting:
            pace = self._waiting.popleft()
            if not pace.off:
                return _ReadCounter(pace)
        return None
