"""Events the reassembler dispatches. Small, frozen, complete when emitted; don't subclass."""

from __future__ import annotations

from dataclasses import dataclass, field

__all__ = ["SSEEvent"]


@dataclass(frozen=True, slots=True, kw_only=True)
class SSEEvent:
    """One dispatched event, exactly as a WHATWG EventSource would see it.

    ``id`` is the last event ID in force at dispatch (it persists across events), ``None``
    when no ``id`` field was ever accepted. ``retry`` is the valid ``retry`` value of this
    event's own block, else ``None``. ``start``/``end`` are byte offsets into the upstream
    stream: the first byte of the block and the byte after the blank line that dispatched it.
    A CR that ends a read dispatches at once, before anyone knows whether a LF follows, so
    ``end`` may stop short of that LF; it is therefore left out of equality, which must not
    depend on where reads were cut.
    """

    type: str
    data: str
    id: str | None
    retry: int | None
    index: int
    start: int
    end: int = field(compare=False)

    def as_json_dict(self) -> dict[str, object]:
        """The shape `sse-proxy check` prints, one JSON object per event."""
        return {"type": self.type, "data": self.data, "id": self.id, "retry": self.retry}
