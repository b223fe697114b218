"""Raw text streams: every event's data is a piece of the message, spaces and all."""

from __future__ import annotations

from typing import ClassVar

from sse_proxy.core.alerts import Alert
from sse_proxy.core.dialects.base import Accumulator

__all__ = ["RawTextAccumulator"]


class RawTextAccumulator(Accumulator):
    """Appends each event's data exactly as dispatched (" quick" keeps its space).

    A ``[DONE]`` event is taken as the conventional end sentinel, not as text.
    """

    name: ClassVar[str] = "text"

    def __init__(self, alerts: list[Alert], *, keep_text: bool = True) -> None:
        super().__init__(alerts, keep_text=keep_text)
        self._parts = self.text_parts()

    def accept(self, etype: str, data: str, index: int, offset: int) -> None:
        if data == "[DONE]":
            self.terminal_seen = True
            return
        self._parts.append(data)
        self._fffd(data, data, index, offset)

    def accept_batch(self, payloads: list[bytes], index: int, pos: int, extra: int) -> bool:
        """Each payload is valid UTF-8 on its own (the framer checked), so the joined
        bytes decode to the joined texts."""
        if b"[DONE]" in payloads:
            return False
        self._parts.append(b"".join(payloads).decode())
        return True

    @property
    def text(self) -> str:
        return "".join(self._parts)
