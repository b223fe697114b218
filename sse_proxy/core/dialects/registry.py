"""Dialects: how a stream's events make up a message, and how to tell them apart.

Each dialect is a module: its accumulator (:class:`~.protocol.DialectAccumulator`) and its
descriptor (:class:`~.descriptor.Dialect`), registered in :data:`DIALECTS`; names, aliases,
path hints and every other table that lists dialects are read from there. Detection looks
at the first event that carries data (its JSON shape, or its event type when the data is a
JSON object that agrees with it); it can be overridden by name, and the proxy passes a
hint from the request path.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import Any, Final

from sse_proxy.core.alerts import Alert
from sse_proxy.core.dialects import (
    anthropic,
    framing_only,
    gemini,
    mcp,
    openai_chat,
    openai_responses,
    raw_text,
)
from sse_proxy.core.dialects.base import JsonAccumulator, json_loads
from sse_proxy.core.dialects.descriptor import Dialect, Provider
from sse_proxy.core.dialects.protocol import AccumulatorFactory, DialectAccumulator
from sse_proxy.core.streammeta import StreamMeta

__all__ = [
    "DIALECTS",
    "TEXT_DIALECTS",
    "AccumulatorFactory",
    "DetectingAccumulator",
    "Dialect",
    "DialectAccumulator",
    "Provider",
    "detect",
    "dialect_for_headers",
    "dialect_for_path",
    "dialect_named",
    "make_accumulator",
    "normalize_dialect",
    "reasoning_of",
]

DIALECTS: Final[Mapping[str, Dialect]] = MappingProxyType(
    {
        d.name: d
        for d in (
            openai_chat.DIALECT,
            openai_responses.DIALECT,
            anthropic.DIALECT,
            gemini.DIALECT,
            mcp.DIALECT,
            raw_text.DIALECT,
            framing_only.DIALECT,
        )
    }
)
"""Every dialect by name, in the order they are listed to users (``none`` last)."""

TEXT_DIALECTS: Final[tuple[str, ...]] = tuple(d.name for d in DIALECTS.values() if d.carries_text)
"""The dialects that carry message text: each has a fixture, a mock endpoint, an example."""

_ALIASES: Final[Mapping[str, str]] = MappingProxyType(
    {"auto": "auto"} | {alias: d.name for d in DIALECTS.values() for alias in (d.name, *d.aliases)}
)
_ANTHROPIC_TYPES = frozenset(
    {
        "message_start",
        "content_block_start",
        "content_block_delta",
        "content_block_stop",
        "message_delta",
        "message_stop",
        "ping",
    }
)


def normalize_dialect(name: str | None) -> str | None:
    """Canonical dialect name, ``None`` for auto-detection; ``ValueError`` if unknown."""
    if name is None:
        return None
    canon = _ALIASES.get(name.strip().lower())
    if canon is None:
        valid = ", ".join(["auto", *DIALECTS])
        raise ValueError(f"unknown dialect {name!r} (valid: {valid})")
    return None if canon == "auto" else canon


def dialect_named(name: str) -> Dialect:
    """The descriptor of a dialect given by name or alias; ``ValueError`` if unknown or auto."""
    canon = normalize_dialect(name)
    if canon is None:
        raise ValueError("auto is not a dialect: detection picks one")
    return DIALECTS[canon]


def dialect_for_path(path: str) -> str | None:
    """A hint from the request path of well-known streaming endpoints (the proxy remembers
    the answers, bounded in bytes: the paths are its clients')."""
    return next((d.name for d in DIALECTS.values() if d.hinted_by(path)), None)


_HINT_HEADERS: Final[tuple[tuple[str, str], ...]] = tuple(
    (header, d.name) for d in DIALECTS.values() for header in d.hint_headers
)


def dialect_for_headers(headers: Mapping[str, str]) -> str | None:
    """A hint from the request's headers (a case-insensitive mapping, as aiohttp's): an
    MCP client's ``Mcp-Session-Id`` or ``MCP-Protocol-Version``."""
    return next((name for header, name in _HINT_HEADERS if header in headers), None)


def _is_jsonrpc(obj: object) -> bool:
    """A JSON-RPC 2.0 message: a request, a notification or a response."""
    return (
        type(obj) is dict
        and obj.get("jsonrpc") == "2.0"
        and ("method" in obj or "result" in obj or "error" in obj)
    )


def _shape(obj: dict[str, Any]) -> str | None:
    if _is_jsonrpc(obj):
        return "mcp"
    kind = obj.get("type")
    if type(kind) is str:
        if kind.startswith("response."):
            return "responses"
        if kind in _ANTHROPIC_TYPES:
            return "anthropic"
    if "choices" in obj or obj.get("object") == "chat.completion.chunk":
        return "openai"
    if "candidates" in obj or "usageMetadata" in obj or "promptFeedback" in obj:
        return "gemini"
    event_type = obj.get("event_type")  # Gemini Interactions
    if type(event_type) is str and event_type.startswith(gemini.INTERACTION_EVENTS):
        return "gemini"
    return None


def detect(etype: str, data: str) -> str | None:
    """The dialect this first data event belongs to, or ``None`` if it cannot tell yet.

    A JSON dialect is chosen only on evidence that the data is that dialect's JSON: its
    shape (a JSON-RPC 2.0 message is MCP), or a JSON object whose ``type`` (if any) agrees
    with an event type of that dialect. An event type alone never decides: ``event: ping``
    with plain-text data is a generic stream (``text``), not Anthropic. Empty data (an MCP
    priming event) decides nothing; data of spaces only is text (a raw stream resumed
    after a word starts so).
    """
    if data == "[DONE]":
        return "openai"
    head = data.lstrip(" \t\n")[:1]
    if not head:  # empty data (an MCP priming event): the next event tells
        return "text" if data else None  # spaces only: no JSON dialect's, text's (a delta)
    if head == "[":  # a JSON-RPC batch (MCP 2025-03-26), else text
        try:
            items = json_loads(data)
        except ValueError:
            return "text"
        return "mcp" if type(items) is list and items and _is_jsonrpc(items[0]) else "text"
    if head != "{":
        return "text"
    try:
        obj = json_loads(data)
    except ValueError:
        return None
    if type(obj) is not dict:
        return None
    shape = _shape(obj)
    if shape is not None:
        return shape
    kind = obj.get("type")
    if kind is None or kind == etype:
        if etype in _ANTHROPIC_TYPES:
            return "anthropic"
        if etype.startswith("response."):
            return "responses"
    return None


def reasoning_of(acc: DialectAccumulator) -> tuple[str, int]:
    """(reasoning text, its length) of a dialect that streams reasoning apart from text.

    OpenAI-compatible ``reasoning_content``, Anthropic ``thinking_delta``, Responses
    reasoning summaries and Gemini thought parts; ("", 0) for the others.
    """
    return acc.reasoning, acc.reasoning_length


def make_accumulator(
    name: str, alerts: list[Alert], *, keep_text: bool = True
) -> DialectAccumulator:
    return DIALECTS[name].accumulator(alerts, keep_text=keep_text)


_EARLY_EMPTY = 16
"""Empty-data events kept for the dialect that detection picks later (a priming event)."""


class DetectingAccumulator(JsonAccumulator):
    """Stands in until the dialect is known; then the reassembler swaps in the real one.

    Until then it still reports what any JSON dialect would: payloads that look like JSON
    but do not parse, and error objects. Events with empty data (MCP's priming events) are
    kept, with their event id and retry, for the real one: they decide nothing.
    """

    def __init__(self, alerts: list[Alert], *, keep_text: bool = True) -> None:
        super().__init__(alerts, keep_text=keep_text)
        self.empty: list[tuple[str, int, int, tuple[str | None, int | None]]] = []

    def accept(self, etype: str, data: str, index: int, offset: int) -> None:
        if not data:
            if len(self.empty) < _EARLY_EMPTY:
                self.empty.append((etype, index, offset, self.frame_info()))
            return
        obj = self.parse(data, index, offset)
        if obj is not None and (etype == "error" or obj.get("type") == "error"):
            self.error_event(obj, index, offset)

    def stream_meta(self) -> StreamMeta:
        return StreamMeta()  # nothing is read for metadata before the dialect is known
