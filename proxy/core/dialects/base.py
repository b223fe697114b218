"""What every dialect accumulator shares: JSON decoding, alert helpers, tool-call checks."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson

from proxy.core.alerts import Alert, ErrorEvent, InvalidJson
from proxy.core.framing import escape_preview

__all__ = ["Accumulator", "JsonAccumulator", "ToolCall", "loads"]

loads = orjson.loads


@dataclass(slots=True)
class ToolCall:
    """A tool/function call whose arguments arrive as partial-JSON fragments."""

    key: str
    name: str | None = None
    id: str | None = None
    parts: list[str] = field(default_factory=list)

    @property
    def arguments(self) -> str:
        return "".join(self.parts)


class Accumulator:
    """Turns dispatched events into message text; reports what breaks the dialect's rules.

    ``accept`` sees every dispatched event; ``finish`` runs once at end of stream. Alerts go
    to the shared list. ``fffd_seen`` counts U+FFFD in the text this accumulator extracted,
    so the reassembler can attribute those that came from JSON escapes.
    """

    name: ClassVar[str] = "none"
    terminal_marker: ClassVar[str | None] = None

    def __init__(self, alerts: list[Alert]) -> None:
        self.alerts = alerts
        self.terminal_seen = False
        self.fffd_seen = 0

    def accept(self, etype: str, data: str, index: int, offset: int) -> None:
        """Take one dispatched event (``offset``: where its data starts in the stream)."""

    def finish(self) -> None:
        """End of stream: checks that need the whole stream."""

    @property
    def text(self) -> str:
        return ""

    def details(self) -> dict[str, Any]:
        """Everything reassembled beyond the main text (choices, reasoning, tool calls)."""
        return {}

    def _count_fffd(self, piece: str) -> None:
        if "\ufffd" in piece:
            self.fffd_seen += piece.count("\ufffd")


class JsonAccumulator(Accumulator):
    """Base for dialects whose payloads are JSON objects."""

    def parse(self, data: str, index: int, offset: int) -> dict[str, Any] | None:
        """The payload as an object, or ``None`` (with an alert when it is not JSON)."""
        try:
            obj = loads(data)
        except orjson.JSONDecodeError as exc:
            self.invalid_json(str(exc), data, index, offset)
            return None
        return obj if type(obj) is dict else None

    def invalid_json(
        self, error: str, data: str, index: int, offset: int, tool_call: str | None = None
    ) -> None:
        self.alerts.append(
            InvalidJson(
                byte_offset=offset,
                event_index=index,
                error=error,
                preview=escape_preview(data.encode()),
                tool_call=tool_call,
            )
        )

    def error_event(self, obj: dict[str, Any], index: int, offset: int) -> None:
        err = obj.get("error")
        if not isinstance(err, dict):
            err = obj
        self.alerts.append(
            ErrorEvent(
                byte_offset=offset,
                event_index=index,
                error_type=str(err.get("type") or err.get("code") or "error"),
                message=str(err.get("message") or "")[:200],
            )
        )

    def check_tool_calls(self, calls: list[ToolCall], offset: int, index: int) -> None:
        """Arguments are partial JSON mid-stream; only the finished whole must parse."""
        for call in calls:
            args = call.arguments
            if not args.strip():
                continue
            try:
                loads(args)
            except orjson.JSONDecodeError as exc:
                label = call.name or call.id or call.key
                self.invalid_json(str(exc), args, index, offset, tool_call=label)
