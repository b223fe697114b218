"""The sans-IO core: bytes in; events, message text and alerts out.

Rules of this package (a test enforces the first):

1. No I/O and no logging: nothing here imports asyncio, aiohttp, structlog or logging.
2. Anomalies in upstream bytes are data (:mod:`sse_proxy.core.alerts`), never exceptions.
3. Every position is a byte offset into the upstream stream.
4. The result never depends on where the reads were cut.
"""

from __future__ import annotations

from sse_proxy.core.alerts import (
    Alert,
    CrlfFraming,
    ErrorEvent,
    InvalidJson,
    Level,
    OversizedFrame,
    ReplacementChar,
    ToolCallInvalid,
    Truncated,
    UnterminatedFrame,
)
from sse_proxy.core.dialects.registry import DIALECTS, dialect_for_path, normalize_dialect
from sse_proxy.core.events import SSEEvent
from sse_proxy.core.reassembler import Limits, Output, StreamReassembler
from sse_proxy.core.toolschema import ToolSchemas

__all__ = [
    "DIALECTS",
    "Alert",
    "CrlfFraming",
    "ErrorEvent",
    "InvalidJson",
    "Level",
    "Limits",
    "Output",
    "OversizedFrame",
    "ReplacementChar",
    "SSEEvent",
    "StreamReassembler",
    "ToolCallInvalid",
    "ToolSchemas",
    "Truncated",
    "UnterminatedFrame",
    "dialect_for_path",
    "normalize_dialect",
]
