"""A stream's reads as they came, for the observers that keep them (the live inspector,
the flight recorder): each read's arrival and its bytes, in order, up to a bound.

Kept once per stream for both. The relay appends to :attr:`ReadLog.times` and
:attr:`ReadLog.chunks` itself, two C-level calls and no Python frame per read: a method
called per read, one per observer, cost each of them more than all its other work. What
comes past the bound the relay hands to the observers one read at a time. The log holds
no reference to them: a stream's objects are freed by reference counting when it ends,
not left for a full collection.
"""

from __future__ import annotations

__all__ = ["ReadLog"]


class ReadLog:
    """The first reads of a stream: at most ``max_bytes`` bytes, at most ``max_reads``
    reads (a read that does not fit whole, and every read after it, is past the bound)."""

    __slots__ = ("_counted", "_counted_bytes", "chunks", "max_bytes", "max_reads", "times")

    def __init__(self, max_bytes: int, max_reads: int) -> None:
        self.max_bytes = max_bytes
        self.max_reads = max_reads
        # lists, appended by C-level calls: an array's append parses its argument, a
        # list's only stores it (the floats and bytes are not tracked by the collector)
        self.times: list[float] = []
        self.chunks: list[bytes] = []
        self._counted = 0  # chunks whose sizes are in _counted_bytes
        self._counted_bytes = 0

    def add(self, chunk: bytes, at: float, total: int) -> bool:
        """One read, arrived at ``at``; ``total``: the stream's bytes with it. What the
        relay does inline, for its other paths: False when the read is past the bound."""
        chunks = self.chunks
        if total <= self.max_bytes and len(chunks) < self.max_reads:
            self.times.append(at)
            chunks.append(chunk)
            return True
        return False

    def logged_bytes(self) -> int:
        """The bytes of the reads logged (counted once each, however often asked)."""
        chunks = self.chunks
        counted = self._counted
        if counted < len(chunks):
            self._counted_bytes += sum(map(len, chunks[counted:]))
            self._counted = len(chunks)
        return self._counted_bytes
