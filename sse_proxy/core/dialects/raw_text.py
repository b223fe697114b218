"""Raw text streams: every event's data is a piece of the message, spaces and all."""

from __future__ import annotations

from typing import Final

from sse_proxy.core.alerts import Alert
from sse_proxy.core.dialects.base import Accumulator
from sse_proxy.core.dialects.descriptor import Dialect
from sse_proxy.core.streammeta import StreamMeta

__all__ = ["DIALECT", "RawTextAccumulator"]


class RawTextAccumulator(Accumulator):
    """Appends each event's data exactly as dispatched (" quick" keeps its space).

    A ``[DONE]`` event is taken as the conventional end sentinel, not as text.
    """

    def __init__(self, alerts: list[Alert], *, keep_text: bool = True) -> None:
        super().__init__(alerts, keep_text=keep_text)
        self._parts = self.text_parts()

    def accept(self, etype: str, data: str, index: int, offset: int) -> None:
        if data == "[DONE]":
            self.terminal_seen = True
            return
        self._parts.append(data)
        self._fffd(data, data, index, offset)

    def accept_batch(self, payloads: list[bytes], index: int, pos: int, extra: int) -> int:
        """Each payload is valid UTF-8 on its own (the framer checked), so the joined
        bytes decode to the joined texts; those up to a ``[DONE]`` (which ends no text)."""
        taken = payloads.index(b"[DONE]") if b"[DONE]" in payloads else len(payloads)
        if taken:
            self._parts.append(b"".join(payloads[:taken]).decode())
        return taken

    def stream_meta(self) -> StreamMeta:
        """Raw text says nothing about itself."""
        return StreamMeta()

    @property
    def text(self) -> str:
        return "".join(self._parts)


DIALECT: Final = Dialect(
    name="text",
    title="raw text",
    accumulator=RawTextAccumulator,
    aliases=("raw", "raw_text"),
    example_path="/v1/text",
    example_method="GET",  # the mock answers GET too, as EventSource sends
    example_body={"stream": True},
    json=False,
    resumes_by="last_event_id",
)
"""Any SSE stream whose data lines are the text: no JSON, no terminal marker, no errors."""
