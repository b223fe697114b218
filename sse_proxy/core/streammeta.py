"""What a stream says about itself: model, response id, finish reasons, token usage.

Every dialect reports the same fields under the same names, so a log query, a metric label
or a trace attribute never depends on which API answered. The hook is duck-typed: a dialect
accumulator that has ``stream_meta() -> StreamMeta`` is read by :func:`meta_of`; one that
has not (raw text, framing only) gives an empty :class:`StreamMeta`. A new dialect fills
the same fields with the helpers below.

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
    """The hook a dialect accumulator implements to report its metadata."""

    def stream_meta(self) -> StreamMeta: ...


def meta_of(reassembler: object) -> StreamMeta:
    """The current metadata of a :class:`~sse_proxy.core.StreamReassembler`'s stream.

    The reassembler swaps its accumulator once the dialect is detected and exposes no
    accessor for it, so this reads its ``_acc`` (proposed: a public ``meta`` property on
    the reassembler and a default ``stream_meta`` on the accumulator base class).
    """
    acc = getattr(reassembler, "_acc", None)
    fn = getattr(acc, "stream_meta", None)
    if fn is None:
        return StreamMeta()
    meta: StreamMeta = fn()
    return meta


def has_text(reassembler: object) -> bool:
    """Whether the stream has produced message text yet (for time to first token).

    Reads the accumulator the same way as :func:`meta_of`; the shell asks only until the
    answer is yes, so a stream pays for this on its first text-carrying reads only.
    """
    acc = getattr(reassembler, "_acc", None)
    return bool(getattr(acc, "text_length", 0))


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

    For the ``gemini`` dialect (added separately): call it on each chunk that has
    ``usageMetadata`` (the counts are cumulative; the last one wins) and on the first chunk
    for the model and id; finish reasons are ``candidates[].finishReason`` by ``index``.
    """
    if type(obj) is not dict:
        return
    if meta.response_model is None:
        meta.response_model = short_str(obj.get("modelVersion"))
    if meta.response_id is None:
        meta.response_id = short_str(obj.get("responseId"))
    usage = obj.get("usageMetadata")
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
