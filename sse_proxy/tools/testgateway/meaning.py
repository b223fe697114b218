"""What a stream means, read after it ended: the answer, its tool calls, finish reasons,
usage, how it ended, its error events, the dialect's shape rules it broke, and when each
piece of output arrived.

Both sides of a gateway are read the same way: the body as it came, read by read with the
time of each read, fed to the core's :class:`~sse_proxy.core.StreamReassembler` in the
same pieces (an event completed by a read arrived when that read did). Nothing here runs
while a stream is open, so reading costs the stream nothing.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Final

from sse_proxy.core import ErrorEvent, InvalidJson, StreamReassembler, UnterminatedFrame
from sse_proxy.core.events import SSEEvent

__all__ = [
    "BROKEN_ENDS",
    "DIALECTS",
    "ENDS",
    "ErrorInfo",
    "Meaning",
    "Transport",
    "read_meaning",
]

ENDS: Final = ("whole", "error", "cut", "unterminated", "transport", "refused", "abandoned")
"""How a stream ended: ``whole`` (its terminal marker, no error), ``error`` (an error
event, or a failed response), ``cut`` (a clean end without the marker), ``unterminated``
(a clean end inside a frame), ``transport`` (the connection was reset or closed inside the
HTTP body), ``refused`` (an HTTP error status instead of a stream), ``abandoned`` (the
upstream's side only: the gateway stopped reading it before it ended)."""
BROKEN_ENDS: Final = frozenset(ENDS) - {"whole"}
_PREVIEW = 240


@dataclass(frozen=True, slots=True)
class Transport:
    """How the HTTP exchange went, as the side that read it saw it."""

    status: int | None
    content_type: str
    reads: Sequence[tuple[float, bytes]]
    """The body, read by read: (time, bytes)."""
    started: float
    """When the request was sent (client) or arrived (upstream)."""
    broken: str | None = None
    """Why the body did not end as HTTP says it does (a reset, a close inside the body)."""
    abandoned: bool = False
    """The reader hung up before the body ended (the gateway, on the upstream's side)."""


@dataclass(frozen=True, slots=True)
class ErrorInfo:
    """An error event: its type (or code) and message, and the event as sent."""

    kind: str
    message: str
    raw: str


@dataclass(frozen=True, slots=True)
class Meaning:
    """One side of a gateway, read."""

    dialect: str
    status: int | None
    content_type: str
    text: str
    reasoning: str
    calls: tuple[tuple[str, str], ...]
    choices: int
    """OpenAI Chat: how many choices streamed (1 elsewhere)."""
    finish: tuple[str, ...]
    usage: tuple[int | None, int | None] | None
    """(input tokens, output tokens), None when the stream reported no usage."""
    usage_raw: str | None
    end: str
    errors: tuple[ErrorInfo, ...]
    violations: tuple[tuple[str, str], ...]
    """(rule, the event that breaks it) for each shape rule of the dialect it breaks."""
    events: int
    unnamed: int
    """Events whose ``event:`` field is missing in a dialect that names every event."""
    sentinels: int
    """``data: [DONE]`` events."""
    model: str | None
    response_id: str | None
    bytes: int
    started: float
    """When the request was sent (client) or arrived (upstream): the origin of the times."""
    first_byte: float | None
    """Seconds from the request to the first body byte."""
    output: tuple[tuple[float, int], ...]
    """(seconds from the request, cumulative output characters) per event carrying output."""
    tail: tuple[str, ...]
    """The last few events, as sent (the evidence of an ending)."""
    body_preview: str

    @property
    def whole(self) -> bool:
        return self.end == "whole"

    @property
    def first_output(self) -> float | None:
        return self.output[0][0] if self.output else None

    @property
    def output_chars(self) -> int:
        return self.output[-1][1] if self.output else 0


def _loads(data: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None


def _chars(value: object) -> int:
    return len(value) if isinstance(value, str) else 0


def _openai_output(obj: dict[str, Any]) -> int:
    n = 0
    choices = obj.get("choices")
    for ch in choices if isinstance(choices, list) else ():
        delta = ch.get("delta") if isinstance(ch, dict) else None
        if not isinstance(delta, dict):
            continue
        n += _chars(delta.get("content"))
        n += _chars(delta.get("reasoning_content")) + _chars(delta.get("reasoning"))
        calls = delta.get("tool_calls")
        for tc in calls if isinstance(calls, list) else ():
            fn = tc.get("function") if isinstance(tc, dict) else None
            if isinstance(fn, dict):
                n += _chars(fn.get("name")) + _chars(fn.get("arguments"))
    return n


def _anthropic_output(obj: dict[str, Any]) -> int:
    kind = obj.get("type")
    if kind == "content_block_delta" and isinstance(obj.get("delta"), dict):
        d = obj["delta"]
        return _chars(d.get("text")) + _chars(d.get("thinking")) + _chars(d.get("partial_json"))
    if kind == "content_block_start" and isinstance(obj.get("content_block"), dict):
        block = obj["content_block"]
        return _chars(block.get("text")) + _chars(block.get("name"))
    return 0


def _responses_output(obj: dict[str, Any]) -> int:
    kind = obj.get("type")
    if isinstance(kind, str) and kind.endswith(".delta"):
        return _chars(obj.get("delta"))
    if kind == "response.output_item.added" and isinstance(obj.get("item"), dict):
        return _chars(obj["item"].get("name"))
    return 0


@dataclass(frozen=True, slots=True)
class _Reading:
    """How a dialect's events are read beyond what the reassembler says."""

    output: Callable[[dict[str, Any]], int]
    """The characters of generated output an event carries."""
    named: bool
    """Every event carries an ``event:`` field equal to its data's ``type``."""


READINGS: Final[dict[str, _Reading]] = {
    "openai": _Reading(_openai_output, named=False),
    "anthropic": _Reading(_anthropic_output, named=True),
    "responses": _Reading(_responses_output, named=True),
}
"""The dialects test-gateway reads, each with what it needs to read them."""
DIALECTS: Final = tuple(READINGS)


def _usage_chunk_choices(obj: dict[str, Any]) -> bool:
    """An OpenAI Chat chunk that carries usage and choices that carry nothing: the
    ``include_usage`` chunk, whose ``choices`` must be ``[]``."""
    usage, choices = obj.get("usage"), obj.get("choices")
    if not isinstance(usage, dict) or not usage or not isinstance(choices, list) or not choices:
        return False
    for ch in choices:
        if not isinstance(ch, dict) or ch.get("finish_reason"):
            return False
        delta = ch.get("delta")
        if isinstance(delta, dict) and any(v not in (None, "", [], {}) for v in delta.values()):
            return False
    return True


def _preview(text: str) -> str:
    return text if len(text) <= _PREVIEW else text[: _PREVIEW - 3] + "..."


def _frame(event: SSEEvent) -> str:
    named = "" if event.type == "message" else f"event: {event.type}\n"
    return _preview(f"{named}data: {event.data}")


class _Shapes:
    """The dialect's shape rules, checked event by event."""

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        self.violations: list[tuple[str, str]] = []
        self.unnamed = 0
        self.sentinels = 0
        self.usage_raw: str | None = None

    def check(self, event: SSEEvent, obj: Any) -> None:
        if event.data == "[DONE]":
            self.sentinels += 1
            if self.dialect != "openai":
                self.violations.append(("done_sentinel", _frame(event)))
            return
        if not isinstance(obj, dict):
            return
        if self.dialect == "openai":
            if isinstance(obj.get("usage"), dict) and obj.get("usage"):
                self.usage_raw = _frame(event)
            if _usage_chunk_choices(obj):
                self.violations.append(("usage_chunk_choices", _frame(event)))
        elif READINGS[self.dialect].named:
            kind = obj.get("type")
            if event.type == "message" and isinstance(kind, str):
                self.unnamed += 1
            elif isinstance(kind, str) and kind != event.type:
                self.violations.append(("event_name", _frame(event)))


def _calls(dialect: str, details: dict[str, Any]) -> tuple[tuple[str, str], ...]:
    out: list[tuple[str, str]] = []
    if dialect == "openai":
        choices = details.get("choices") or []
        if choices:
            out = [(str(c["name"]), str(c["arguments"])) for c in choices[0]["tool_calls"]]
    elif dialect == "anthropic":
        out = [
            (str(b["tool"]["name"]), str(b["tool"]["input_json"]))
            for b in details.get("blocks", [])
            if b.get("tool") is not None
        ]
    elif dialect == "responses":
        out = [(str(c["name"]), str(c["arguments"])) for c in details.get("function_calls", [])]
    return tuple(out)


def read_meaning(dialect: str, transport: Transport) -> Meaning:
    """Read one side's stream in ``dialect`` (openai, responses or anthropic)."""
    reassembler = StreamReassembler(dialect, frame_ends=False)
    shapes = _Shapes(dialect)
    measure = READINGS[dialect].output if dialect in READINGS else None
    output: list[tuple[float, int]] = []
    errors: list[ErrorInfo] = []
    raw_errors: dict[int, str] = {}
    tail: list[str] = []
    unterminated = False
    failed_event: tuple[str, Any] | None = None
    invalid = 0
    total = 0
    size = 0
    first_byte: float | None = None
    alerts: list[Any] = []
    events = 0
    for at, piece in transport.reads:
        if not piece:
            continue
        if first_byte is None:
            first_byte = at - transport.started
        size += len(piece)
        out = reassembler.feed(piece)
        alerts += out.alerts
        for event in out.events:
            events += 1
            obj = _loads(event.data) if event.data != "[DONE]" else None
            shapes.check(event, obj)
            tail = [*tail[-3:], _frame(event)]
            if isinstance(obj, dict) and ("error" in obj or obj.get("type") == "error"):
                raw_errors[event.ordinal] = _frame(event)
            if isinstance(obj, dict) and obj.get("type") == "response.failed":
                failed_event = (_frame(event), obj.get("response"))
            if measure is not None and isinstance(obj, dict):
                n = measure(obj)
                if n:
                    total += n
                    output.append((round(at - transport.started, 6), total))
    alerts += reassembler.close(
        upstream_error=transport.broken is not None, abandoned=transport.abandoned
    ).alerts
    for alert in alerts:
        if isinstance(alert, ErrorEvent):
            raw = raw_errors.get(alert.event_index, "")
            errors.append(ErrorInfo(alert.error_type, alert.message, raw))
        elif isinstance(alert, UnterminatedFrame):
            unterminated = True
        elif isinstance(alert, InvalidJson) and alert.preview.strip() != "[DONE]":
            invalid += 1
    if invalid:
        shapes.violations.append(("invalid_json", f"{invalid} events whose data is not JSON"))
    meta = reassembler.stream_meta()
    details = reassembler.details()
    failed = dialect == "responses" and details.get("status") == "failed"
    summary = reassembler.summary()
    if transport.status is not None and transport.status != 200:
        end = "refused"
    elif transport.abandoned:
        end = "abandoned"
    elif transport.broken is not None:
        end = "transport"
    elif errors or failed:
        end = "error"
    elif summary["terminal_seen"]:
        end = "whole"
    elif unterminated:
        end = "unterminated"
    else:
        end = "cut"
    if failed and not errors:
        raw, response = failed_event or ("", None)
        error = response.get("error") if isinstance(response, dict) else None
        error = error if isinstance(error, dict) else {}
        kind = str(error.get("code") or error.get("type") or "response.failed")
        errors.append(ErrorInfo(kind, str(error.get("message") or "")[:200], raw))
    usage = None
    if meta.input_tokens is not None or meta.output_tokens is not None:
        usage = (meta.input_tokens, meta.output_tokens)
    body = b"".join(p for _, p in transport.reads[:4])
    return Meaning(
        dialect=dialect,
        status=transport.status,
        content_type=transport.content_type,
        text=reassembler.text,
        reasoning=reassembler.reasoning[0],
        calls=_calls(dialect, details),
        choices=len(details.get("choices") or ()) if dialect == "openai" else 1,
        finish=tuple(meta.finish_reasons),
        usage=usage,
        usage_raw=shapes.usage_raw,
        end=end,
        errors=tuple(errors),
        violations=tuple(shapes.violations),
        events=events,
        unnamed=shapes.unnamed,
        sentinels=shapes.sentinels,
        model=meta.response_model,
        response_id=meta.response_id,
        bytes=size,
        started=transport.started,
        first_byte=None if first_byte is None else round(first_byte, 6),
        output=tuple(output),
        tail=tuple(tail),
        body_preview=_preview(body.decode("utf-8", "replace")),
    )
