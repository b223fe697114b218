"""What a stream's observers are told, and the protocols they implement.

A leaf: the concrete taps (:mod:`.taps`), the exchange that makes them and the relay that
feeds them all import this, and it imports none of them.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, NamedTuple, Protocol, runtime_checkable

from sse_proxy.core.alerts import Alert
from sse_proxy.obs.metrics import GapHistogram

__all__ = ["ObserveTap", "ReadTap", "StreamEnd", "Tap", "WriteTap"]


class StreamEnd(NamedTuple):
    """How one stream went: computed once at its end, the same for every tap (immutable:
    a named tuple, built at C speed, where a frozen dataclass sets each field in Python)."""

    ended_by: str
    fields: dict[str, Any]
    """The ``stream.summary`` fields (``text`` too with ``--log-text``); not to be changed."""
    alerts: Mapping[str, int]
    """Exact counts per alert name, the rate-limited ones included."""
    closing: tuple[Alert, ...]
    """The alerts the stream's close raised (already logged and counted)."""
    received: int
    """Bytes read from the upstream."""
    events: int
    ttfb: float | None
    """Seconds from the upstream request to its first byte (None: no byte came)."""
    duration: float
    gaps: GapHistogram
    """The inter-event gaps."""
    ttfc: float | None = None
    """Seconds from the request to the first upstream read that completed an event (the
    first chunk, as the GenAI conventions count them); None: no event came."""


@runtime_checkable
class Tap(Protocol):
    """An observer of one stream."""

    def finish(self, end: StreamEnd) -> None:
        """The stream is over; called once, in the order the taps were listed."""


@runtime_checkable
class ReadTap(Tap, Protocol):
    """A tap that also sees every upstream read as it arrived (compressed, if it was)."""

    def read(self, chunk: bytes) -> None: ...


@runtime_checkable
class ObserveTap(Tap, Protocol):
    """A tap that also sees what the reassembler was fed (decompressed; a large read
    whole) and the alerts that raised."""

    def observed(self, chunk: bytes, alerts: tuple[Alert, ...]) -> None: ...


@runtime_checkable
class WriteTap(Tap, Protocol):
    """A tap that also sees every write to the client when the proxy re-chunks it (frames,
    chaos); in passthrough the writes are the reads."""

    def wrote(self, data: bytes) -> None: ...
