"""What the harness watches of a case's proxy: how its cuts reached the client.

A :class:`CaseWatch` is a tap factory installed in the case's proxy app. For each SSE
stream it keeps the :class:`~sse_proxy.server.delivery.Delivery` (live: the seconds the
proxy held writes back are not the client's, see :mod:`.process`), the last bytes written
(the stream's final line ending decides one diagnosis), at the end the cut counts, and
which shape variants the stream's request did not make possible (left out, or forced).
"""

from __future__ import annotations

from dataclasses import dataclass

from sse_proxy.server.exchange import Exchange
from sse_proxy.server.tap_types import StreamEnd

__all__ = ["CaseWatch", "Delivered"]

_TAIL = 8


@dataclass(frozen=True, slots=True)
class Delivered:
    """A case's cuts: how many, and how many the client read apart (None: not measured,
    the writes were paced)."""

    cuts: int
    read_apart: int | None

    @property
    def complete(self) -> bool:
        """Every cut reached the client as a read boundary (or there were none)."""
        return self.read_apart == self.cuts

    def __str__(self) -> str:
        if not self.cuts:
            return "no cuts"
        if self.read_apart is None:
            return f"{self.cuts} cuts, paced (the client's reads not measured)"
        return f"{self.read_apart} of {self.cuts} cuts read apart"


class _StreamWatch:
    __slots__ = ("ended", "ex", "forced", "not_applicable", "tail")

    def __init__(self, ex: Exchange) -> None:
        self.ex = ex
        self.tail = b""
        self.ended = False
        self.not_applicable: dict[str, str] = {}
        self.forced: dict[str, str] = {}

    def wrote(self, data: bytes) -> None:
        self.tail = (self.tail + data[-_TAIL:])[-_TAIL:]

    def finish(self, end: StreamEnd) -> None:
        self.ended = True
        self.not_applicable = dict(end.fields.get("variants_not_applicable") or {})
        self.forced = dict(end.fields.get("variants_forced") or {})


class CaseWatch:
    """The streams of one case's proxy; install :meth:`tap` in its ``STREAM_TAPS``."""

    def __init__(self) -> None:
        self.streams: list[_StreamWatch] = []

    def tap(self, ex: Exchange) -> _StreamWatch:
        watch = _StreamWatch(ex)
        self.streams.append(watch)
        return watch

    def held_back(self) -> float:
        """Seconds the proxy has held writes back so far (jitter, waits, pacing)."""
        return sum(s.ex.delivery.waited for s in self.streams if s.ex.delivery is not None)

    def not_applicable(self, variant: str) -> str | None:
        """What no request of the case asked for that ``variant`` needs, when it was left
        out of every stream of the case (None: some stream had it, or none ended)."""
        ended = [s for s in self.streams if s.ended]
        if not ended or any(variant not in s.not_applicable for s in ended):
            return None
        return ended[0].not_applicable[variant]

    def forced(self, variant: str) -> str | None:
        """What the request did not ask for that ``variant`` needs, when it was served
        anyway (``--all-shapes``)."""
        return next((s.forced[variant] for s in self.streams if variant in s.forced), None)

    def fault_began(self) -> float | None:
        """When a fault in time began on one of the case's streams (``time.monotonic``);
        None: not yet."""
        began = [
            s.ex.delivery.fault_began
            for s in self.streams
            if s.ex.delivery is not None and s.ex.delivery.fault_began is not None
        ]
        return min(began) if began else None

    def delivered(self) -> Delivered | None:
        """The cuts of every chaos stream of the case; None: no stream was re-chunked."""
        deliveries = [s.ex.delivery for s in self.streams if s.ex.delivery is not None]
        if not deliveries:
            return None
        cuts = sum(d.cuts for d in deliveries)
        apart = [d.read_apart for d in deliveries]
        read_apart = None if any(a is None for a in apart) else sum(a or 0 for a in apart)
        return Delivered(cuts, read_apart)

    def final_bytes(self) -> bytes | None:
        """The last bytes the client was sent on the case's last stream (re-chunked only)."""
        for stream in reversed(self.streams):
            if stream.tail:
                return stream.tail
        return None
