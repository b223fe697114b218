"""What every dialect accumulator shares: JSON decoding, alert helpers, tool-call checks."""

from __future__ import annotations

import json
import re
import reprlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any, ClassVar

import orjson

from proxy.core.alerts import Alert, ErrorEvent, InvalidJson, ReplacementChar
from proxy.core.framing import escape_preview
from proxy.core.utf8 import DETAIL_LIMIT

__all__ = ["Accumulator", "JsonAccumulator", "ToolCall", "json_loads", "loads", "text_of"]

loads = orjson.loads
_ESCAPED_FFFD = re.compile(r"\\u[fF][fF][fF][dD]")


def text_of(value: object) -> str:
    """``str(value)`` for a value out of upstream JSON, which may nest up to orjson's
    1024 levels: ``str`` of that raises RecursionError, so it gets a shortened repr."""
    if type(value) is str:
        return value
    try:
        return str(value)
    except RecursionError:
        return reprlib.repr(value)


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


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def json_loads(data: str | bytes) -> Any:
    """orjson, except that numbers beyond a double are still JSON.

    JSON numbers have no size limit; orjson refuses those it cannot hold as a double.
    Only then is the payload read again with the standard library (NaN and Infinity still
    refused), so such a payload is valid here as it is to every reader that skips or keeps
    big numbers (msgspec in the batch path skips them). Raises ``ValueError`` if invalid.
    """
    try:
        return loads(data)
    except orjson.JSONDecodeError as exc:
        if "number" not in str(exc):
            raise
        try:
            return json.loads(data, parse_constant=_no_constants)
        except RecursionError:
            raise exc from None


class TextTally(list[str]):
    """Stands in for a list of text parts when the text itself is not wanted.

    The proxy only logs the message's length unless told to log its text, so it keeps a
    count and lets the parts go: memory stays flat however long the answer is. Appends
    stay C-speed list appends; :meth:`fold` turns what piled up into a count.
    """

    __slots__ = ("chars",)

    def __init__(self) -> None:
        super().__init__()
        self.chars = 0

    def fold(self) -> None:
        if self:
            self.chars += sum(map(len, self))
            self.clear()


class Accumulator:
    """Turns dispatched events into message text; reports what breaks the dialect's rules.

    ``accept`` sees every dispatched event; ``finish`` runs once at end of stream. Alerts go
    to the shared list. ``fffd_seen`` counts U+FFFD in the text this accumulator extracted,
    so the reassembler can attribute those that came from JSON escapes.
    """

    name: ClassVar[str] = "none"
    terminal_marker: ClassVar[str | None] = None

    def __init__(self, alerts: list[Alert], *, keep_text: bool = True) -> None:
        self.alerts = alerts
        self.keep_text = keep_text
        self._tallies: list[TextTally] = []
        self.terminal_seen = False
        self.fffd_seen = 0
        self._fffd_index = -1
        self._fffd_known = 0
        self._fffd_escapes: Iterator[int] = iter(())
        self._fffd_detailed = 0

    def accept(self, etype: str, data: str, index: int, offset: int) -> None:
        """Take one dispatched event (``offset``: where its data starts in the stream)."""

    def accept_batch(self, payloads: list[bytes], index: int, pos: int, extra: int) -> bool:
        """Take a run of single-line ``data:`` events whole, or return False untouched.

        See :data:`proxy.core.framing.BatchCallback`: the framer has checked every payload
        (valid UTF-8, no U+FFFD). This default declines, so the framer dispatches the events
        one by one.
        """
        return False

    def finish(self) -> None:
        """End of stream: checks that need the whole stream."""

    @property
    def text(self) -> str:
        return ""

    @property
    def text_length(self) -> int:
        """Characters of message text (counted, when the text is not kept)."""
        if self.keep_text:
            return len(self.text)
        self.compact()
        return sum(t.chars for t in self._tallies)

    def compact(self) -> None:
        """Fold text tallies into counts (the reassembler calls this now and then)."""
        for tally in self._tallies:
            tally.fold()

    def text_parts(self) -> list[str]:
        """A new list for message-text parts: a real one, or a tally when text isn't kept."""
        if self.keep_text:
            return []
        tally = TextTally()
        self._tallies.append(tally)
        return tally

    def details(self) -> dict[str, Any]:
        """Everything reassembled beyond the main text (choices, reasoning, tool calls)."""
        return {}

    def _fffd(self, piece: str, data: str, index: int, offset: int) -> None:
        """Count U+FFFD in extracted text; those beyond the raw payload's came from escapes.

        The parser already reported every U+FFFD that is in the decoded payload (invalid
        bytes, or an encoded U+FFFD). One that appears only after JSON decoding was sent
        as a ``\\ufffd`` escape: upstream lost that character before the stream. The
        escapes' byte offsets come from one pass over the payload, taken as they are needed,
        and past :data:`DETAIL_LIMIT` per payload the rest are one counted alert.
        """
        n = piece.count("\ufffd")
        if not n:
            return
        self.fffd_seen += n
        if index != self._fffd_index:
            self._fffd_index = index
            self._fffd_known = data.count("\ufffd")
            self._fffd_escapes = _escape_offsets(data, offset)
            self._fffd_detailed = 0
        known = min(n, self._fffd_known)
        self._fffd_known -= known
        left = n - known
        while left:
            at = next(self._fffd_escapes, offset)
            many = left if self._fffd_detailed >= DETAIL_LIMIT else 1
            if many > 1:  # the rest of this payload's escapes, counted: skip their offsets
                self._fffd_escapes = islice(self._fffd_escapes, many - 1, None)
            self._fffd_detailed += 1
            left -= many
            self.alerts.append(
                ReplacementChar(
                    cause=ReplacementChar.UPSTREAM_LITERAL,
                    byte_offset=at,
                    event_index=index,
                    count=many,
                )
            )


def _escape_offsets(data: str, offset: int) -> Iterator[int]:
    """Stream byte offsets of each ``\\ufffd`` escape in ``data`` (which starts at
    ``offset``), computed with a running count: linear however many there are."""
    if data.isascii():
        for m in _ESCAPED_FFFD.finditer(data):
            yield offset + m.start()
        return
    last = 0
    for m in _ESCAPED_FFFD.finditer(data):
        offset += len(data[last : m.start()].encode())
        last = m.start()
        yield offset


class JsonAccumulator(Accumulator):
    """Base for dialects whose payloads are JSON objects."""

    def parse(self, data: str, index: int, offset: int) -> dict[str, Any] | None:
        """The payload as an object, or ``None`` (with an alert when it is not JSON)."""
        try:
            obj = json_loads(data)
        except ValueError as exc:
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
                error_type=text_of(err.get("type") or err.get("code") or "error"),
                message=text_of(err.get("message") or "")[:200],
            )
        )

    def check_tool_calls(self, calls: list[ToolCall], offset: int, index: int) -> None:
        """Arguments are partial JSON mid-stream; only the finished whole must parse."""
        for call in calls:
            args = call.arguments
            if not args.strip():
                continue
            try:
                json_loads(args)
            except ValueError as exc:
                label = call.name or call.id or call.key
                self.invalid_json(str(exc), args, index, offset, tool_call=label)
