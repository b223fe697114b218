"""Dialects: how a stream's events make up a message, and how to tell them apart.

Detection looks at the first event that carries data (its JSON shape, or its event type
when the data is a JSON object that agrees with it); it can be overridden by name, and the
proxy passes a hint from the request path.
"""

from __future__ import annotations

from typing import Any

from sse_proxy.core.alerts import Alert
from sse_proxy.core.dialects.anthropic import AnthropicAccumulator
from sse_proxy.core.dialects.base import Accumulator, JsonAccumulator, json_loads
from sse_proxy.core.dialects.gemini import GeminiAccumulator
from sse_proxy.core.dialects.openai_chat import OpenAIChatAccumulator
from sse_proxy.core.dialects.openai_responses import OpenAIResponsesAccumulator
from sse_proxy.core.dialects.raw_text import RawTextAccumulator

__all__ = [
    "DIALECTS",
    "Accumulator",
    "DetectingAccumulator",
    "detect",
    "dialect_for_path",
    "make_accumulator",
    "normalize_dialect",
    "reasoning_of",
]


class FramingOnly(Accumulator):
    """Dialect ``none``: events only, no message text."""

    def accept_batch(self, payloads: list[bytes], index: int, pos: int, extra: int) -> bool:
        return True  # nothing to extract; the framer has validated the payloads


DIALECTS: dict[str, type[Accumulator]] = {
    "openai": OpenAIChatAccumulator,
    "responses": OpenAIResponsesAccumulator,
    "anthropic": AnthropicAccumulator,
    "gemini": GeminiAccumulator,
    "text": RawTextAccumulator,
    "none": FramingOnly,
}
_ALIASES = {
    "auto": "auto",
    "openai": "openai",
    "openai_chat": "openai",
    "openai-chat": "openai",
    "chat": "openai",
    "responses": "responses",
    "openai_responses": "responses",
    "openai-responses": "responses",
    "anthropic": "anthropic",
    "messages": "anthropic",
    "gemini": "gemini",
    "google": "gemini",
    "vertex": "gemini",
    "vertexai": "gemini",
    "text": "text",
    "raw": "text",
    "raw_text": "text",
    "none": "none",
}
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


def dialect_for_path(path: str) -> str | None:
    """A hint from the request path of well-known streaming endpoints."""
    if path.endswith("/chat/completions"):
        return "openai"
    if path.endswith("/responses"):
        return "responses"
    if path.endswith("/messages"):
        return "anthropic"
    if path.endswith((":streamGenerateContent", ":generateContent")):
        return "gemini"  # Generative Language API and Vertex AI alike
    return None


def _shape(obj: dict[str, Any]) -> str | None:
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
    return None


def detect(etype: str, data: str) -> str | None:
    """The dialect this first data event belongs to, or ``None`` if it cannot tell yet.

    A JSON dialect is chosen only on evidence that the data is that dialect's JSON: its
    shape, or a JSON object whose ``type`` (if any) agrees with an event type of that
    dialect. An event type alone never decides: ``event: ping`` with plain-text data is a
    generic stream (``text``), not Anthropic.
    """
    if data == "[DONE]":
        return "openai"
    if not data.lstrip(" \t\n").startswith("{"):
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


def reasoning_of(acc: Accumulator) -> tuple[str, int]:
    """(reasoning text, its length) of a dialect that streams reasoning apart from text.

    OpenAI-compatible ``reasoning_content``, Anthropic ``thinking_delta``, Responses
    reasoning summaries and Gemini thought parts; ("", 0) for the others.
    """
    text = getattr(acc, "reasoning", "")
    length = getattr(acc, "reasoning_length", len(text))
    return (text if isinstance(text, str) else ""), (length if isinstance(length, int) else 0)


def make_accumulator(name: str, alerts: list[Alert], *, keep_text: bool = True) -> Accumulator:
    return DIALECTS[name](alerts, keep_text=keep_text)


class DetectingAccumulator(JsonAccumulator):
    """Stands in until the dialect is known; then the reassembler swaps in the real one.

    Until then it still reports what any JSON dialect would: payloads that look like JSON
    but do not parse, and error objects.
    """

    name = "unknown"

    def accept(self, etype: str, data: str, index: int, offset: int) -> None:
        obj = self.parse(data, index, offset)
        if obj is not None and (etype == "error" or obj.get("type") == "error"):
            self.error_event(obj, index, offset)
