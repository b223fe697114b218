"""Dialect ``none``: the events only, no message text (framing checks still run)."""

from __future__ import annotations

from typing import Final

from sse_proxy.core.dialects.base import Accumulator
from sse_proxy.core.dialects.descriptor import Dialect
from sse_proxy.core.streammeta import StreamMeta

__all__ = ["DIALECT", "FramingOnly"]


class FramingOnly(Accumulator):
    """Takes every event and keeps nothing."""

    def accept_batch(self, payloads: list[bytes], index: int, pos: int, extra: int) -> int:
        return len(payloads)  # nothing to extract; the framer has validated the payloads

    def stream_meta(self) -> StreamMeta:
        return StreamMeta()


DIALECT: Final = Dialect(
    name="none", title="framing only", accumulator=FramingOnly, json=False, carries_text=False
)
