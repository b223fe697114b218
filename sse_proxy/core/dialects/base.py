"""What every dialect accumulator shares: JSON decoding, alert helpers, tool-call checks."""

from __future__ import annotations

import json
import re
import reprlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from itertools import islice
from typing import Any

import msgspec

from sse_proxy.core.alerts import Alert, ErrorEvent, InvalidJson, ReplacementChar
from sse_proxy.core.dialects.toolcalls import ToolCall, check_call
from sse_proxy.core.framing import escape_preview
from sse_proxy.core.rpcrequest import RpcRequest
from sse_proxy.core.toolschema import ToolSchemas
from sse_proxy.core.utf8 import DETAIL_LIMIT

__all__ = ["INVALID", "Accumulator", "JsonAccumulator", "ToolCall", "json_loads", "text_of"]

_decode = msgspec.json.decode

_ESCAPED_FFFD = re.compile(r"\\u[fF][fF][fF][dD]")


def text_of(value: object) -> str:
    """``str(value)`` for a value out of upstream JSON, which may nest deeply: ``str`` of
    that raises RecursionError, so it gets a shortened repr."""
    if type(value) is str:
        return value
    try:
        return str(value)
    except RecursionError:
        return reprlib.repr(value)


def _no_constants(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def json_loads(data: str | bytes) -> Any:
    """msgspec, except that numbers beyond a double are still JSON.

    msgspec rather than orjson here: equally fast on valid payloads, and four times
    cheaper on an invalid one (orjson's exception costs more than its parse), which is
    what a stream of garbage payloads is made of. JSON numbers have no size limit; one
    out of a double's range is read again with the standard library (NaN and Infinity
    still refused), so such a payload is valid here as it is to every reader that skips
    or keeps big numbers. Raises ``ValueError`` if invalid.
    """
    try:
        return _decode(data)
    except RecursionError:
        raise ValueError("JSON nested too deeply to read") from None
    except msgspec.DecodeError as exc:
        if "out of range" not in str(exc):
            raise ValueError(str(exc)) from None
        try:
            return json.loads(data, parse_constant=_no_constants)
        except RecursionError:
            raise ValueError(str(exc)) from None


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

    The shared machinery of :class:`~sse_proxy.core.dialects.protocol.DialectAccumulator`
    (whose docstring lists what each hook does); a dialect adds ``accept`` and
    ``stream_meta``, and the batch paths where they pay. ``fffd_seen`` counts U+FFFD in the
    text this accumulator extracted, so the reassembler can attribute those that came from
    JSON escapes.
    """

    def __init__(self, alerts: list[Alert], *, keep_text: bool = True) -> None:
        self.alerts = alerts
        self.keep_text = keep_text
        self._tallies: list[TextTally] = []
        self.terminal_seen = False
        self.fffd_seen = 0
        self.pings = 0  # the API's own keep-alive events (Anthropic's ``ping``)
        self.tool_schemas: ToolSchemas | None = None  # the request's (the shell sets them)
        self._escapes = _NO_ESCAPES
        # where character i of an event's data is in the stream (the reassembler passes
        # the framer's exact one)
        self.locate: Callable[[str, int, int], int] = _simple_locate
        self.rpc_request: RpcRequest | None = None  # the JSON-RPC request (the shell's)
        self.frame_info: Callable[[], tuple[str | None, int | None]] = _no_frame_info

    def accept(self, etype: str, data: str, index: int, offset: int) -> None:
        """Take one dispatched event (``offset``: where its data starts in the stream)."""

    def accept_batch(self, payloads: list[bytes], index: int, pos: int, extra: int) -> int:
        """Take the first events of a run of single-line ``data:`` events whole; how many.

        See :data:`sse_proxy.core.framing.BatchCallback`: the framer has checked every payload
        (valid UTF-8, no U+FFFD). This default takes none, so the framer dispatches the
        events one by one.
        """
        return 0

    def accept_one(self, payload: bytes, index: int, pos: int) -> bool:
        """One such frame in a read of its own (:data:`sse_proxy.core.framing.OneCallback`):
        a batch of one, unless the dialect has a leaner way to take it."""
        return self.accept_batch([payload], index, pos, 8) == 1

    def finish(self) -> None:
        """End of stream: checks that need the whole stream."""

    def follow_cursor(self) -> None:
        """Read each event's cursor from here on (a resumed stream's): a dialect that
        numbers its events in their data (Responses' ``sequence_number``) reads the first
        one's; raw SSE's cursor is the ``id:`` the framer reads anyway."""

    @property
    def cursors(self) -> tuple[int, int] | None:
        """(first, last) cursor of the events so far, for a dialect that numbers them in
        their data; None: it does not, or no number was read."""
        return None

    @property
    def event_cursor(self) -> str | None:
        """The opaque cursor the last event carried in its data, for a dialect whose events
        carry one (Gemini Interactions' ``event_id``); None otherwise."""
        return None

    @property
    def text(self) -> str:
        return ""

    @property
    def reasoning(self) -> str:
        """Reasoning text streamed apart from the answer; none unless the dialect has it."""
        return ""

    @property
    def reasoning_length(self) -> int:
        return len(self.reasoning)

    @property
    def tool_progress(self) -> int:
        """How far the tool calls got: characters of arguments (a call that arrives whole
        counts one). Walks every call: for a timer, never per event."""
        return 0

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

    def summary_fields(self) -> dict[str, Any]:
        """The dialect's own ``stream.summary`` fields: none, unless it has some."""
        return {}

    def _fffd(self, piece: str, data: str, index: int, offset: int) -> None:
        """Report the U+FFFD of an extracted ``piece`` that JSON decoding made from
        ``\\ufffd`` escapes: upstream lost those characters before the stream.

        The framer already reported every U+FFFD that is in the decoded payload itself
        (invalid bytes, or an encoded U+FFFD). Which of a piece's U+FFFD came from escapes
        is known from :meth:`JsonAccumulator.parse`, which read such a payload a second time
        with each escape made a marker character. Past :data:`DETAIL_LIMIT` per payload the
        rest of a piece's escapes are one counted alert.
        """
        n = piece.count("\ufffd")
        if not n:
            return
        self.fffd_seen += n
        esc = self._escapes
        marked = esc.marked_copy(piece)
        if marked is None:
            return  # its U+FFFD were in the decoded payload: the framer reported them
        found = esc.distinct.findall(marked)
        total = len(found) + (marked.count(esc.shared) if esc.shared else 0)
        left = max(0, DETAIL_LIMIT - esc.detailed)
        first = [
            ord(m.group()) - esc.base for m in islice(esc.any_marker.finditer(marked), left + 1)
        ]
        detailed = min(total, left)
        esc.detailed += detailed
        for k in first[:detailed]:
            self.alerts.append(
                ReplacementChar(
                    cause=ReplacementChar.UPSTREAM_LITERAL,
                    byte_offset=esc.offset_of(k),
                    event_index=index,
                )
            )
        if total > detailed:
            self.alerts.append(
                ReplacementChar(
                    cause=ReplacementChar.UPSTREAM_LITERAL,
                    byte_offset=esc.offset_of(first[detailed]),
                    event_index=index,
                    count=total - detailed,
                )
            )


def _simple_locate(data: str, offset: int, i: int) -> int:
    return offset + len(data[:i].encode())


def _no_frame_info() -> tuple[str | None, int | None]:
    return None, None


# a "\ufffd" escape, not an escaped backslash followed by "ufffd"
_ESCAPE = re.compile(r"(?<!\\)((?:\\\\)*)(\\u[fF][fF][fF][dD])")
# the supplementary private use planes: markers come from here
_PLAIN_ESCAPE = re.compile(r"\\u[fF][fF][fF][dD]")
_PRIVATE = re.compile("[\U000f0000-\U0010ffff]")
_MARKERS_FROM = 0xF0000
_MARKERS_TO = 0x110000
# escapes of one payload that get a marker of their own; the rest share one (counted,
# located at the first of them)
_DISTINCT = 256
_NEVER = re.compile("(?!)")


@dataclass(slots=True)
class _Escapes:
    """One payload's ``\\ufffd`` escapes: escape k < :data:`_DISTINCT` was read as the
    private character ``base + k``, every later one as ``shared``."""

    data: str = ""
    offset: int = 0
    parts: list[str] = field(default_factory=list)  # data split around its first escapes
    base: int = _MARKERS_FROM
    shared: str = ""
    shared_at: int = 0  # where in data the first escape sharing a marker is
    distinct: re.Pattern[str] = _NEVER
    any_marker: re.Pattern[str] = _NEVER
    locate: Callable[[str, int, int], int] = _simple_locate
    by_id: dict[int, str] = field(default_factory=dict)  # id(real string) -> marked copy
    pairs: list[tuple[str, str]] = field(default_factory=list)
    detailed: int = 0

    def marked_copy(self, piece: str) -> str | None:
        """The marked copy of a string of the payload (found by identity: dialects take
        their pieces straight out of the parsed object; by value for any that do not)."""
        found = self.by_id.get(id(piece))
        if found is not None:
            return found
        for real, marked in self.pairs:
            if real == piece:
                return marked
        return None

    def offset_of(self, k: int) -> int:
        """The stream offset of escape ``k``: 3k + 2 parts before it, of which the k
        escapes are 1-character markers now, 6 characters in ``data``."""
        n = len(self.parts) // 3
        if k >= n:
            return self.locate(self.data, self.offset, self.shared_at)
        at = sum(map(len, self.parts[: 3 * k + 2])) + 5 * k
        return self.locate(self.data, self.offset, at)


_NO_ESCAPES = _Escapes()


def _free_range(used: set[str], size: int) -> int:
    """The first code point of ``size`` private ones that occur nowhere in ``used`` (0 if
    none: a payload that uses the whole private planes)."""
    lo = _MARKERS_FROM
    for c in sorted(map(ord, used)):
        if c - lo >= size:
            return lo
        lo = max(lo, c + 1)
    return lo if _MARKERS_TO - lo >= size else 0


def _find_escapes(
    data: str, obj: Any, offset: int, locate: Callable[[str, int, int], int]
) -> _Escapes | None:
    """Read ``data`` again with each escape made a marker; None if it holds no escape.

    C-level throughout (a bounded regex split, one regex substitution, a join), since a
    payload may hold a great many escapes; only escapes that get reported are located.
    """
    parts = _ESCAPE.split(data, maxsplit=_DISTINCT)  # [text, backslashes, escape, ..., rest]
    n = len(parts) // 3
    if not n:
        return None
    strings = list(_strings(obj))
    used = set(_PRIVATE.findall(data))
    for value in strings:
        if _PRIVATE.search(value):
            used.update(_PRIVATE.findall(value))
    base = _free_range(used, n + 2)
    if not base:
        return None
    esc = _Escapes(data, offset, parts, base, locate=locate)
    parts[2::3] = map(chr, range(base, base + n))  # a raw character is as valid in JSON
    rest = parts[-1]
    later = _ESCAPE.search(rest)
    if later is not None:
        esc.shared = chr(base + n)
        esc.shared_at = len(data) - len(rest) + later.start(2)
        # (no group in the replacement: re's C fast path, not a Python call per escape;
        # an escaped backslash is set aside first, so "\\\\ufffd" stays text)
        aside = chr(base + n + 1)
        rest = _PLAIN_ESCAPE.sub(esc.shared, rest.replace("\\\\", aside))
        parts[-1] = rest.replace(aside, "\\\\")
    last = base + n if esc.shared else base + n - 1
    esc.distinct = re.compile(f"[{chr(base)}-{chr(base + n - 1)}]")
    esc.any_marker = re.compile(f"[{chr(base)}-{chr(last)}]")
    try:
        marked_obj = json_loads("".join(parts))
    except ValueError:
        return None
    # the same tree with markers: its strings pair up with the real ones, in walk order
    for real, marked in zip(strings, _strings(marked_obj), strict=False):
        if real is not marked and real != marked:
            esc.by_id[id(real)] = marked
            esc.pairs.append((real, marked))
    return esc


def _strings(obj: Any) -> Iterator[str]:
    """Every string value in a JSON object tree (iteratively: it may be deep)."""
    stack = [obj]
    while stack:
        item = stack.pop()
        if type(item) is str:
            yield item
        elif type(item) is dict:
            stack.extend(item.values())
        elif type(item) is list:
            stack.extend(item)


INVALID: Any = object()
"""What :meth:`JsonAccumulator.parse_any` returns for a payload that is not JSON."""


class JsonAccumulator(Accumulator):
    """Base for dialects whose payloads are JSON objects."""

    def parse(self, data: str, index: int, offset: int) -> dict[str, Any] | None:
        """The payload as an object, or ``None`` (with an alert when it is not JSON)."""
        try:
            obj = json_loads(data)
        except ValueError as exc:
            self.invalid_json(str(exc), data, index, offset)
            return None
        if self._escapes is not _NO_ESCAPES:
            self._escapes = _NO_ESCAPES
        if "\\u" in data and _ESCAPED_FFFD.search(data):
            self._escapes = _find_escapes(data, obj, offset, self.locate) or _NO_ESCAPES
        return obj if type(obj) is dict else None

    def parse_any(self, data: str, index: int, offset: int) -> Any:
        """The payload as any JSON value, or :data:`INVALID` (with an alert: not JSON).
        :meth:`parse` in full, not a call of this: that is every JSON dialect's per-event
        path, and a call costs as much as several of its lines."""
        try:
            obj = json_loads(data)
        except ValueError as exc:
            self.invalid_json(str(exc), data, index, offset)
            return INVALID
        if self._escapes is not _NO_ESCAPES:
            self._escapes = _NO_ESCAPES
        if "\\u" in data and _ESCAPED_FFFD.search(data):
            self._escapes = _find_escapes(data, obj, offset, self.locate) or _NO_ESCAPES
        return obj

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

    def check_tool_call(self, call: ToolCall, offset: int, index: int) -> None:
        """A call has ended: its fragments must be JSON and meet its tool's schema (once)."""
        check_call(call, self.tool_schemas, self.alerts, offset, index, json_loads)

    def check_tool_calls(self, calls: list[ToolCall], offset: int, index: int) -> None:
        """End of stream: check every call that nothing ended."""
        for call in calls:
            check_call(call, self.tool_schemas, self.alerts, offset, index, json_loads)
