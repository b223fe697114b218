"""Anomalies as data: one frozen dataclass per alert, named as the contract names it.

The core returns these from ``feed``/``close``; only the shell turns them into log lines.
Every offset is a byte offset into the upstream stream (after a stripped BOM counts too).
"""

from __future__ import annotations

import enum
from dataclasses import dataclass, fields
from typing import ClassVar

__all__ = [
    "Alert",
    "CrlfFraming",
    "ErrorEvent",
    "InvalidJson",
    "Level",
    "Linger",
    "McpInvalidMessage",
    "McpNotificationInvalid",
    "McpUnexpectedMessage",
    "OversizedFrame",
    "ReplacementChar",
    "Stall",
    "StallEnd",
    "ToolCallInvalid",
    "Truncated",
    "UnterminatedFrame",
]


class Level(enum.StrEnum):
    INFO = "info"
    WARNING = "warning"


@dataclass(frozen=True, slots=True, kw_only=True)
class Alert:
    """Base of all alerts; ``name`` is the log event name fixed by the contract."""

    name: ClassVar[str] = "sse.alert"

    @property
    def level(self) -> Level:
        return Level.WARNING

    def fields(self) -> dict[str, object]:
        """The alert's own fields, as they go into the log line."""
        return {f.name: getattr(self, f.name) for f in fields(self)}


@dataclass(frozen=True, slots=True, kw_only=True)
class ReplacementChar(Alert):
    """U+FFFD in decoded text: ``invalid_utf8`` (lost here) or ``upstream_literal`` (sent so).

    ``count`` is how many U+FFFD of this cause the alert stands for: 1, except for the one
    alert that sums up a line's (or a payload's) U+FFFD beyond the first few located one by
    one (:data:`sse_proxy.core.utf8.DETAIL_LIMIT`), so a flood costs linear time, not an alert
    per byte. ``byte_offset`` is then where the first of them is.
    """

    name: ClassVar[str] = "sse.replacement_char"
    cause: str
    byte_offset: int
    event_index: int
    count: int = 1

    INVALID_UTF8: ClassVar[str] = "invalid_utf8"
    UPSTREAM_LITERAL: ClassVar[str] = "upstream_literal"


@dataclass(frozen=True, slots=True, kw_only=True)
class UnterminatedFrame(Alert):
    """The stream ended after a partial frame, which a client must discard."""

    name: ClassVar[str] = "sse.unterminated_frame"
    pending_bytes: int
    preview: str
    byte_offset: int


@dataclass(frozen=True, slots=True, kw_only=True)
class CrlfFraming(Alert):
    """CR or CRLF line endings were seen; clients splitting on ``\\n\\n`` break on them."""

    name: ClassVar[str] = "sse.crlf_framing"
    counts: dict[str, int]
    mixed: bool

    @property
    def level(self) -> Level:
        return Level.WARNING if self.mixed else Level.INFO


@dataclass(frozen=True, slots=True, kw_only=True)
class InvalidJson(Alert):
    """A JSON-dialect payload did not parse (a tool call's arguments are
    :class:`ToolCallInvalid`; ``tool_call`` stays for readers of older logs)."""

    name: ClassVar[str] = "sse.invalid_json"
    byte_offset: int
    event_index: int
    error: str
    preview: str
    tool_call: str | None = None


@dataclass(frozen=True, slots=True, kw_only=True)
class ToolCallInvalid(Alert):
    """A streamed tool call that a client cannot run as it arrived.

    ``reason``: ``invalid_json`` (its fragments did not join into JSON), ``schema`` (the
    arguments break the JSON Schema the request declared for the tool) or ``inconsistent``
    (its index, id or name contradict the stream: parallel calls sharing one index, a
    fragment for a call never announced). ``index`` is the call's index as the dialect
    numbers calls (OpenAI ``tool_calls[].index``, the Anthropic block, the Responses
    output item, the Gemini part); ``error`` says what is wrong without quoting the
    arguments, which stay out of the logs like the message text.
    """

    name: ClassVar[str] = "sse.tool_call_invalid"
    index: int
    tool: str | None
    reason: str
    error: str
    byte_offset: int
    event_index: int

    INVALID_JSON: ClassVar[str] = "invalid_json"
    SCHEMA: ClassVar[str] = "schema"
    INCONSISTENT: ClassVar[str] = "inconsistent"


@dataclass(frozen=True, slots=True, kw_only=True)
class Truncated(Alert):
    """The stream ended without its dialect's terminal marker, or upstream closed mid-stream."""

    name: ClassVar[str] = "sse.truncated"
    reason: str
    dialect: str
    byte_offset: int

    NO_TERMINAL_MARKER: ClassVar[str] = "no_terminal_marker"
    UPSTREAM_CLOSED: ClassVar[str] = "upstream_closed"
    # The proxy cut the stream itself (set by the shell, which knows why it stopped).
    IDLE_TIMEOUT: ClassVar[str] = "idle_timeout"
    TOTAL_TIMEOUT: ClassVar[str] = "total_timeout"


@dataclass(frozen=True, slots=True, kw_only=True)
class OversizedFrame(Alert):
    """A line or frame outgrew its limit; it was dropped, never buffered without bound."""

    name: ClassVar[str] = "sse.oversized_frame"
    kind: str
    limit: int
    byte_offset: int
    action: str = "dropped"


@dataclass(frozen=True, slots=True, kw_only=True)
class ErrorEvent(Alert):
    """Upstream reported an error inside the stream (Anthropic ``error``, Responses ``error``)."""

    name: ClassVar[str] = "sse.error_event"
    byte_offset: int
    event_index: int
    error_type: str
    message: str


@dataclass(frozen=True, slots=True, kw_only=True)
class Stall(Alert):
    """No progress (text, reasoning or tool-call arguments) for ``stall_threshold`` while
    the stream is open, whatever else arrived: the user sees nothing new.

    Raised by the shell's timer (the core has no clock), while the stall is going on;
    ``gap_ms`` is the time without progress so far, ``after_event`` how many events came
    before it. What arrived meanwhile: ``comments`` (comment lines), ``pings`` (the API's
    keep-alive events), ``events`` (every event, pings and empty deltas included).
    ``kept_alive_by_comments``: something arrived and it was all comments and pings, so a
    client whose only deadline is a read timeout waits on.
    """

    name: ClassVar[str] = "sse.stall"
    gap_ms: float
    threshold_ms: float
    after_event: int
    comments: int = 0
    pings: int = 0
    events: int = 0
    kept_alive_by_comments: bool = False


@dataclass(frozen=True, slots=True, kw_only=True)
class StallEnd(Alert):
    """Progress resumed after a stall; ``gap_ms`` is the whole time without it, with the
    comments and pings that arrived meanwhile."""

    name: ClassVar[str] = "sse.stall_end"
    gap_ms: float
    after_event: int
    comments: int = 0
    pings: int = 0

    @property
    def level(self) -> Level:
        return Level.INFO


@dataclass(frozen=True, slots=True, kw_only=True)
class McpInvalidMessage(Alert):
    """An MCP stream's ``data`` that is not one JSON-RPC message (``not_object``, ``not_jsonrpc``,
    ``batch`` where the revision has none, ``bad_id``: an id that is no string or number,
    ``no_kind``: neither a request, a notification nor one response). Invalid JSON is
    :class:`InvalidJson`, as in every JSON dialect."""

    name: ClassVar[str] = "mcp.invalid_message"
    reason: str
    byte_offset: int
    event_index: int

    NOT_OBJECT: ClassVar[str] = "not_object"
    NOT_JSONRPC: ClassVar[str] = "not_jsonrpc"
    BATCH: ClassVar[str] = "batch"
    BAD_ID: ClassVar[str] = "bad_id"
    NO_KIND: ClassVar[str] = "no_kind"


@dataclass(frozen=True, slots=True, kw_only=True)
class McpUnexpectedMessage(Alert):
    """A well-formed JSON-RPC message the stream must not carry there.

    ``unknown_id``: a response to an id no request on this stream asked (``id`` shows it);
    ``duplicate_response``: a second response to one request; ``after_response``: a
    message after the response that ended the stream; ``response_on_get``: a response on a
    GET stream that resumes nothing; ``priming_unsupported``: a priming event (empty data)
    to a client of a revision older than 2025-11-25, which parses it as JSON;
    ``server_request``: a request from the server on a 2026-07-28 stream, which has none.
    """

    name: ClassVar[str] = "mcp.unexpected_message"
    reason: str
    byte_offset: int
    event_index: int
    id: str | None = None

    UNKNOWN_ID: ClassVar[str] = "unknown_id"
    DUPLICATE_RESPONSE: ClassVar[str] = "duplicate_response"
    AFTER_RESPONSE: ClassVar[str] = "after_response"
    RESPONSE_ON_GET: ClassVar[str] = "response_on_get"
    PRIMING_UNSUPPORTED: ClassVar[str] = "priming_unsupported"
    SERVER_REQUEST: ClassVar[str] = "server_request"


@dataclass(frozen=True, slots=True, kw_only=True)
class McpNotificationInvalid(Alert):
    """A notification that breaks its rule: ``progress_token`` (a progress notification
    for a token the request did not send), ``progress_order`` (progress that does not
    increase), ``progress_value`` (no number as its ``progress``), ``log_level`` (a log
    message whose level is none of the eight)."""

    name: ClassVar[str] = "mcp.notification_invalid"
    reason: str
    byte_offset: int
    event_index: int

    PROGRESS_TOKEN: ClassVar[str] = "progress_token"  # noqa: S105 - a reason, no secret
    PROGRESS_ORDER: ClassVar[str] = "progress_order"
    PROGRESS_VALUE: ClassVar[str] = "progress_value"
    LOG_LEVEL: ClassVar[str] = "log_level"


@dataclass(frozen=True, slots=True, kw_only=True)
class Linger(Alert):
    """The terminal marker arrived and the body stayed open past ``linger_threshold``:
    a client that waits for the connection to close, not for the marker, hangs here.

    Raised once per stream by the shell's timer; ``open_ms`` is how long the body has
    stayed open after the last event.
    """

    name: ClassVar[str] = "sse.linger"
    open_ms: float
    threshold_ms: float
    after_event: int
