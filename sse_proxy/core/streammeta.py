"""What a stream says about itself: model, response id, finish reasons, token usage.

Every dialect reports the same fields under the same names, so a log query, a metric label
or a trace attribute never depends on which API answered. Every accumulator implements
``stream_meta() -> StreamMeta`` (it is part of
:class:`~sse_proxy.core.dialects.protocol.DialectAccumulator`; raw text and framing only
return an empty one), and the reassembler passes it on. A new dialect fills the same fields
with the helpers below.

Cheap by design: accumulators keep only what they already parse (the first event's
model and id, the usage object when it arrives); the fields are assembled on demand, at an
alert or at the end of the stream, never per event.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Protocol

__all__ = [
    "META_FIELDS",
    "HasStreamMeta",
    "StreamMeta",
    "anthropic_usage",
    "gemini_counts",
    "gemini_head",
    "gemini_usage",
    "has_text",
    "meta_of",
    "openai_usage",
    "short_str",
]

# The canonical field names, in the order they are logged.
META_FIELDS = (
    "response_model",
    "response_id",
    "finish_reasons",
    "input_tokens",
    "output_tokens",
    "cached_tokens",
    "reasoning_tokens",
)
_MAX_STR = 200


def short_str(value: object) -> str | None:
    """A string field from upstream JSON, bounded; ``None`` when it is not a string."""
    if type(value) is not str or not value:
        return None
    return value if len(value) <= _MAX_STR else value[:_MAX_STR]


def _count(value: object) -> int | None:
    return value if type(value) is int and value >= 0 else None


@dataclass(slots=True)
class StreamMeta:
    """Metadata of one streamed response; ``None`` is "the stream did not say"."""

    response_model: str | None = None
    response_id: str | None = None
    finish_reasons: list[str] = field(default_factory=list)
    input_tokens: int | None = None
    output_tokens: int | None = None
    cached_tokens: int | None = None
    reasoning_tokens: int | None = None

    def fields(self) -> dict[str, Any]:
        """The log fields, every name always present (``None`` when unknown)."""
        return {
            "response_model": self.response_model,
            "response_id": self.response_id,
            "finish_reasons": list(self.finish_reasons),
            "input_tokens": self.input_tokens,
            "output_tokens": self.output_tokens,
            "cached_tokens": self.cached_tokens,
            "reasoning_tokens": self.reasoning_tokens,
        }

    def head(self, obj: dict[str, Any]) -> None:
        """Model and id from an object that carries them (a chunk, a response, a message)."""
        if self.response_model is None:
            self.response_model = short_str(obj.get("model"))
        if self.response_id is None:
            self.response_id = short_str(obj.get("id"))


class HasStreamMeta(Protocol):
    """What reports stream metadata: every accumulator, and the reassembler."""

    def stream_meta(self) -> StreamMeta: ...


class _HasText(Protocol):
    @property
    def has_text(self) -> bool: ...


def meta_of(reassembler: HasStreamMeta) -> StreamMeta:
    """The current metadata of a :class:`~sse_proxy.core.StreamReassembler`'s stream."""
    return reassembler.stream_meta()


def has_text(reassembler: _HasText) -> bool:
    """Whether the stream has produced message text yet (for time to first token).

    The shell asks only until the answer is yes, so a stream pays for this on its first
    text-carrying reads only.
    """
    return reassembler.has_text


def openai_usage(meta: StreamMeta, usage: object) -> None:
    """OpenAI's usage object, Chat Completions or Responses names."""
    if type(usage) is not dict:
        return
    inp = usage.get("prompt_tokens", usage.get("input_tokens"))
    out = usage.get("completion_tokens", usage.get("output_tokens"))
    meta.input_tokens = _count(inp)
    meta.output_tokens = _count(out)
    in_details = usage.get("prompt_tokens_details") or usage.get("input_tokens_details")
    if type(in_details) is dict:
        meta.cached_tokens = _count(in_details.get("cached_tokens"))
    out_details = usage.get("completion_tokens_details") or usage.get("output_tokens_details")
    if type(out_details) is dict:
        meta.reasoning_tokens = _count(out_details.get("reasoning_tokens"))


def anthropic_usage(meta: StreamMeta, usage: object) -> None:
    """Anthropic's usage: ``message_start`` has all of it, ``message_delta`` the final output.

    Counts are cumulative, so a later value replaces an earlier one.
    """
    if type(usage) is not dict:
        return
    for name, attr in (
        ("input_tokens", "input_tokens"),
        ("output_tokens", "output_tokens"),
        ("cache_read_input_tokens", "cached_tokens"),
    ):
        value = _count(usage.get(name))
        if value is not None:
            setattr(meta, attr, value)


def gemini_usage(meta: StreamMeta, obj: object) -> None:
    """Gemini / Vertex AI: ``modelVersion``, ``responseId`` and ``usageMetadata`` of a chunk.

    :func:`gemini_head` and :func:`gemini_counts` at once. The ``gemini`` dialect calls the
    first on chunks until it has model and id, the second on the last usage it kept, when
    asked; finish reasons are ``candidates[].finishReason`` by ``index``.
    """
    if type(obj) is not dict:
        return
    gemini_head(meta, obj)
    gemini_counts(meta, obj.get("usageMetadata"))


def gemini_head(meta: StreamMeta, obj: dict[str, Any]) -> None:
    """Model (``modelVersion``) and id (``responseId``), the first of each that is sent."""
    if meta.response_model is None:
        meta.response_model = short_str(obj.get("modelVersion"))
    if meta.response_id is None:
        meta.response_id = short_str(obj.get("responseId"))


def gemini_counts(meta: StreamMeta, usage: object) -> None:
    """Gemini's ``usageMetadata``: cumulative, so a later count replaces an earlier one.

    ``candidatesTokenCount`` (output tokens) counts the answer only: the thoughts are
    ``thoughtsTokenCount`` (reasoning tokens), whereas OpenAI and Anthropic count reasoning
    inside their output tokens.
    """
    if type(usage) is not dict:
        return
    for name, attr in (
        ("promptTokenCount", "input_tokens"),
        ("candidatesTokenCount", "output_tokens"),
        ("cachedContentTokenCount", "cached_tokens"),
        ("thoughtsTokenCount", "reasoning_tokens"),
    ):
        value = _count(usage.get(name))
        if value is not None:
            setattr(meta, attr, value)
