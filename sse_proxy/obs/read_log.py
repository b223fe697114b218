"""A stream's reads as they came, for the observers that keep them (the live inspector,
the flight recorder): each read's arrival and its bytes, in order, up to a bound.

Kept once per stream for both. The relay appends to :attr:`ReadLog.times` and
:attr:`ReadLog.chunks` itself, two C-level calls and no Python frame per read: a method
called per read, one per observer, cost each of them more than all its other work. What
comes past the bound goes to the observers' :attr:`ReadLog.past` hooks, one read at a time.
"""

from __future__ import annotations

from array import array
from collections.abc import Callable

__all__ = ["PastHook", "ReadLog"]

PastHook = Callable[[bytes, float], None]
"""A read past the log's bound, and when it arrived."""


class ReadLog:
    """The first reads of a stream: at most ``max_bytes`` bytes, at most ``max_reads``
    reads (a read that does not fit whole, and every read after it, is past the bound)."""

    __slots__ = ("_counted", "_counted_bytes", "chunks", "max_bytes", "max_reads", "past", "times")

    def __init__(self, max_bytes: int, max_reads: int) -> None:
        self.max_bytes = max_bytes
        self.max_reads = max_reads
        # arrays and one list: no object per read for the garbage collector to walk
        self.times = array("d")
        self.chunks: list[bytes] = []
        self.past: list[PastHook] = []
        self._counted = 0  # chunks whose sizes are in _counted_bytes
        self._counted_bytes = 0

    def add(self, chunk: bytes, at: float, total: int) -> None:
        """One read, arrived at ``at``; ``total``: the stream's bytes with it. What the
        relay does inline, for its other paths."""
        chunks = self.chunks
        if total <= self.max_bytes and len(chunks) < self.max_reads:
            self.times.append(at)
            chunks.append(chunk)
        else:
            self.past_read(chunk, at)

    def past_read(self, chunk: bytes, at: float) -> None:
        for hook in self.past:
            hook(chunk, at)

    def logged_bytes(self) -> int:
        """The bytes of the reads logged (counted once each, however often asked)."""
        chunks = self.chunks
        counted = self._counted
        if counted < len(chunks):
            self._counted_bytes += sum(map(len, chunks[counted:]))
            self._counted = len(chunks)
        return self._counted_bytes
