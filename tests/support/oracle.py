"""The test suite's one reference parser: WHATWG event-stream interpretation, written plainly.

This is the *oracle* the core (:mod:`sse_proxy.core`) is compared with. It is deliberately
simple and slow, and shares no code with the core: it never sees reads, only the whole
stream, and follows the spec's order of work literally
(https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):

1. decode the whole byte stream as UTF-8 (one leading BOM stripped, each maximal invalid
   subpart replaced by one U+FFFD, as the Encoding standard's decoder does), keeping the
   stream byte offset of every character;
2. split the text into lines at CRLF, LF or CR (the text after the last line end is an
   incomplete line and is discarded at the end of the stream);
3. process each line: blank line -> dispatch; ``:`` -> comment; else field name and value
   (one leading space of the value removed), ``data``/``event``/``id``/``retry`` handled
   as the spec says, everything else ignored; an incomplete final block is discarded.

Where the spec says nothing (alerts, limits, offsets, what a dialect's text is), this file
follows the behaviour the core documents (``proxy/core/framing.py`` docstrings, the
README's alert table, ``proxy/core/dialects/*.py``), and says so in a comment. Alerts
are plain tuples, so a comparison shows exactly which field differs:

- ``("replacement_char", cause, byte_offset, event_index, count)``
- ``("unterminated_frame", pending_bytes, byte_offset)``
- ``("oversized_frame", kind, limit, byte_offset)``
- ``("crlf_framing", lf, crlf, cr, mixed)``
- ``("invalid_json", byte_offset, event_index)``
- ``("error_event", byte_offset, event_index)``
- ``("truncated", reason, dialect, byte_offset)``
"""

from __future__ import annotations

import codecs
import contextlib
import json
import re
import sys
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

__all__ = [
    "ALL_DIALECTS",
    "DEFAULT_LIMIT",
    "DIALECTS",
    "OracleAlert",
    "OracleEvent",
    "Parsed",
    "Reference",
    "decode",
    "frame_ends",
    "parse",
    "reference",
]

DEFAULT_LIMIT = 1 << 20  # the core's documented default for max_line and max_frame
DIALECTS = ("none", "text", "openai", "responses", "anthropic")
ALL_DIALECTS = (*DIALECTS, "gemini")
"""DIALECTS and Gemini (which the hypothesis suites leave out; the variant suites use it)."""
BOM_BYTES = b"\xef\xbb\xbf"
FFFD = "\ufffd"

OracleAlert = tuple[Any, ...]


@dataclass(frozen=True)
class OracleEvent:
    """One dispatched event; ``start`` is its block's first byte, ``ordinal`` counts from 0."""

    type: str
    data: str
    id: str | None
    retry: int | None
    ordinal: int
    start: int
    data_offset: int  # stream offset where the first data value starts (dialect alerts)
    data_positions: tuple[int, ...] = field(repr=False, default=())  # byte offset per char


@dataclass
class Parsed:
    """Everything the event-stream layer gives, before any dialect looks at it."""

    events: list[OracleEvent]
    alerts: list[OracleAlert]  # replacement chars and oversized lines/frames, stream order
    frame_ends: list[int]  # stream offset just after each blank line
    crlf_frame_ends: list[int]  # those of them whose blank line ended in CRLF
    unterminated: OracleAlert | None
    line_endings: dict[str, int]
    length: int


# -- 1. decode ------------------------------------------------------------------------------

_bad_spans: list[tuple[int, int]] = []


def _record_bad(exc: UnicodeError) -> tuple[str, int]:
    """Codec error handler: note where the invalid subpart is, replace it like "replace"."""
    assert isinstance(exc, UnicodeDecodeError)
    _bad_spans.append((exc.start, exc.end))
    return FFFD, exc.end


codecs.register_error("tests.support.oracle.record", _record_bad)


def decode(stream: bytes) -> tuple[str, list[int], set[int]]:
    """The stream as text, the byte offset of each character (plus one for the end), and
    the byte offsets where an invalid subpart began (each became one U+FFFD).

    CPython's UTF-8 decoder hands the error handler exactly the maximal subparts that
    ``errors="replace"`` replaces (the WHATWG decoder's rule); a test checks the text is
    the same. Not thread-safe (one module-level list), which the tests never need.
    """
    _bad_spans.clear()
    text = stream.decode("utf-8", "tests.support.oracle.record")
    spans = list(_bad_spans)
    _bad_spans.clear()
    bad_starts = {start for start, _ in spans}
    bad_len = dict(spans)
    positions: list[int] = []
    at = 0
    for ch in text:
        positions.append(at)
        if ch == FFFD and at in bad_len:
            at += bad_len[at] - at
        else:
            at += len(ch.encode("utf-8"))
    positions.append(at)
    assert at == len(stream)
    return text, positions, bad_starts


# -- 2. and 3. lines and fields ---------------------------------------------------------------

DETAIL_LIMIT = 16  # the core's sse_proxy.core.utf8.DETAIL_LIMIT


def _replacement_alerts(cause: str, offsets: list[int], event_index: int) -> list[OracleAlert]:
    """Not in the spec. Core (``ReplacementChar`` docstring): of one cause in one line (or
    one payload), the first DETAIL_LIMIT U+FFFD are an alert each, and the rest one alert
    at the first of them that carries their count."""
    out: list[OracleAlert] = [
        ("replacement_char", cause, at, event_index, 1) for at in offsets[:DETAIL_LIMIT]
    ]
    if len(offsets) > DETAIL_LIMIT:
        rest = len(offsets) - DETAIL_LIMIT
        out.append(("replacement_char", cause, offsets[DETAIL_LIMIT], event_index, rest))
    return out


_LINE_END = re.compile(r"\r\n|\r|\n")


def parse(
    stream: bytes, *, max_line: int = DEFAULT_LIMIT, max_frame: int = DEFAULT_LIMIT
) -> Parsed:
    """Interpret a whole event stream; see the module docstring for the order of work."""
    text, pos, bad_starts = decode(stream)
    first = 1 if text.startswith("\ufeff") else 0  # one leading BOM; offsets still count it

    events: list[OracleEvent] = []
    alerts: list[OracleAlert] = []
    ends: list[int] = []
    crlf_ends: list[int] = []
    counts = {"lf": 0, "crlf": 0, "cr": 0}

    data: list[str] = []
    data_pos: list[int] = []
    data_offset = 0
    event_type = ""
    retry: int | None = None
    last_id: str | None = None
    block_start = pos[first]
    dropped = False  # the current block outgrew a limit: ignore it up to its blank line

    line_start = first
    for m in _LINE_END.finditer(text, first):
        counts[{"\n": "lf", "\r\n": "crlf", "\r": "cr"}[m.group()]] += 1
        line = text[line_start : m.start()]
        lo, hi, after = pos[line_start], pos[m.start()], pos[m.end()]
        if line == "":
            # Dispatch. The spec sets the last event ID string first (ids of dataless
            # blocks persist too), then dispatches only if the data buffer is non-empty.
            if data:
                events.append(
                    OracleEvent(
                        event_type or "message",
                        "\n".join(data),
                        last_id,
                        retry,
                        len(events),
                        block_start,
                        data_offset,
                        tuple(data_pos),
                    )
                )
            data, data_pos, event_type, retry, dropped = [], [], "", None, False
            block_start = after
            ends.append(after)
            if m.group() == "\r\n":
                crlf_ends.append(after)
        elif dropped:
            pass  # core: the rest of a dropped block is not looked at (no alerts either)
        elif hi - lo > max_line:
            # Not in the spec. Core: a line longer than max_line bytes (terminator not
            # counted) drops its block, one alert at the line's start.
            alerts.append(("oversized_frame", "line", max_line, lo))
            dropped, data, data_pos = True, [], []
        elif hi - block_start > max_frame:
            # Not in the spec. Core: the block, from its first byte to the end of this line
            # (terminator not counted), outgrew max_frame: dropped, alert at block start.
            alerts.append(("oversized_frame", "frame", max_frame, block_start))
            dropped, data, data_pos = True, [], []
        else:
            # Not in the spec. Core: every U+FFFD in a line that is looked at is reported,
            # invalid bytes and encoded U+FFFD apart, with the count of events before it.
            fffd = [i for i in range(line_start, m.start()) if text[i] == FFFD]
            invalid = [pos[i] for i in fffd if pos[i] in bad_starts]
            literal = [pos[i] for i in fffd if pos[i] not in bad_starts]
            alerts += _replacement_alerts("invalid_utf8", invalid, len(events))
            alerts += _replacement_alerts("upstream_literal", literal, len(events))
            if line.startswith(":"):
                pass  # comment
            else:
                if ":" in line:
                    colon = line.index(":")
                    name, value_at = line[:colon], colon + 1
                    if line[value_at : value_at + 1] == " ":
                        value_at += 1
                else:
                    name, value_at = line, len(line)
                value = line[value_at:]
                if name == "data":
                    if not data:
                        data_offset = pos[line_start + value_at]
                    else:
                        data_pos.append(lo - 1)  # the joining LF stands for a line end
                    data.append(value)
                    data_pos.extend(pos[line_start + value_at : m.start()])
                elif name == "event":
                    event_type = value
                elif name == "id" and "\x00" not in value:
                    last_id = value  # (an id containing NUL is ignored)
                elif name == "retry" and value and all(c in "0123456789" for c in value):
                    # An empty value is ignored (the core and browsers agree). Core: a
                    # value beyond int()'s digit limit (4300 by default) is unusable and
                    # ignored like a non-numeric one.
                    with contextlib.suppress(ValueError):
                        retry = int(value)
        line_start = m.end()

    # The incomplete last line: discarded. Core: it still gets the line limit's alert
    # (the core drops a partial line as soon as it outgrows max_line).
    tail_lo, tail_hi = pos[line_start], pos[len(text)]
    if not dropped and tail_hi - tail_lo > max_line:
        alerts.append(("oversized_frame", "line", max_line, tail_lo))
    unterminated = None
    if len(stream) > block_start:
        unterminated = ("unterminated_frame", len(stream) - block_start, block_start)
    return Parsed(events, alerts, ends, crlf_ends, unterminated, counts, len(stream))


def frame_ends(stream: bytes) -> list[int]:
    """Stream offsets just after each blank line (where each frame ends)."""
    return parse(stream).frame_ends


# -- dialects ------------------------------------------------------------------------------


def _reject_constant(name: str) -> Any:
    raise ValueError(f"{name} is not JSON")


def _strings(value: Any) -> list[str]:
    """Every string in a JSON value, keys included (iteratively: values nest 1024 deep)."""
    found: list[str] = []
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, str):
            found.append(item)
        elif isinstance(item, list):
            stack.extend(item)
        elif isinstance(item, dict):
            stack.extend(item.keys())
            stack.extend(item.values())
    return found


def _has_surrogate(value: Any) -> bool:
    return any(0xD800 <= ord(c) <= 0xDFFF for s in _strings(value) for c in s)


MAX_DEPTH = 1024  # RFC 8259 lets a parser limit nesting; the core's (orjson's) limit


def _depth(data: str) -> int:
    """How deep arrays and objects nest (brackets inside strings do not count)."""
    depth = deepest = 0
    in_string = escaped = False
    for ch in data:
        if in_string:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_string = False
        elif ch == '"':
            in_string = True
        elif ch in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif ch in "]}":
            depth -= 1
    return deepest


def json_value(data: str) -> tuple[bool, Any]:
    """(valid, value) by RFC 8259. NaN/Infinity are not JSON. Where RFC 8259 leaves it to
    the parser, this follows the core (orjson): a lone surrogate escape is refused, and
    nesting deeper than 1024 levels."""
    if _depth(data) > MAX_DEPTH:
        return False, None
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(max(limit, 4 * MAX_DEPTH + 200))  # json's C scanner recurses
    try:
        value = json.loads(data, parse_constant=_reject_constant)
    except ValueError:
        return False, None
    finally:
        sys.setrecursionlimit(limit)
    if _has_surrogate(value):
        return False, None
    return True, value


_ESCAPE = re.compile(r"\\(?:u[fF][fF][fF][dD]|.)", re.DOTALL)


def _escape_markers(event: OracleEvent, obj: Any) -> tuple[str, dict[str, int]] | None:
    """The payload with every JSON ``\\ufffd`` escape made a distinct private character
    (one that occurs nowhere in the payload, raw or decoded), and where each of those
    escapes starts in the stream. ``None`` when there are none."""
    used = set(event.data).union(*_strings(obj))
    out: list[str] = []
    where: dict[str, int] = {}
    last = 0
    candidate = 0xE000
    for m in _ESCAPE.finditer(event.data):  # pairs, so "\\\\ufffd" is not an escape
        if len(m.group()) != 6:
            continue
        while chr(candidate) in used:
            candidate += 1
        marker = chr(candidate)
        candidate += 1
        out.append(event.data[last : m.start()])
        out.append(f"\\u{ord(marker):04x}")
        where[marker] = event.data_positions[m.start()]
        last = m.end()
    if not where:
        return None
    out.append(event.data[last:])
    return "".join(out), where


Extract = Callable[[Any, str], list[str]]


@dataclass
class _State:
    text: dict[Any, list[str]] = field(default_factory=dict)
    terminal: bool = False


@dataclass(frozen=True)
class Reference:
    """What the oracle says about a whole stream, for one dialect."""

    events: tuple[OracleEvent, ...]
    alerts: tuple[OracleAlert, ...]
    text: str
    frame_ends: tuple[int, ...]
    crlf_frame_ends: tuple[int, ...]
    line_endings: dict[str, int]


def _openai(obj: Any, etype: str, st: _State) -> tuple[list[str], bool]:
    """Chat chunks: each choice's ``delta.content`` by choice index; the text is the lowest
    index's. Returns the extracted strings (content, reasoning, tool arguments) and
    whether the chunk is an error object."""
    choices = obj.get("choices")
    if not choices:
        return [], "error" in obj
    pieces: list[str] = []
    if isinstance(choices, list):
        for ch in choices:
            if not isinstance(ch, dict):
                continue
            idx = ch.get("index", 0)
            idx = idx if type(idx) is int else 0
            parts = st.text.setdefault(idx, [])
            delta = ch.get("delta")
            if not isinstance(delta, dict):
                continue
            content = delta.get("content")
            if isinstance(content, str) and content:
                parts.append(content)
                pieces.append(content)
            for key in ("reasoning_content", "reasoning"):  # DeepSeek; OpenRouter, Ollama
                reasoning = delta.get(key)
                if isinstance(reasoning, str) and reasoning:
                    pieces.append(reasoning)
            calls = delta.get("tool_calls")
            if isinstance(calls, list):
                for tc in calls:
                    fn = tc.get("function") if isinstance(tc, dict) else None
                    args = fn.get("arguments") if isinstance(fn, dict) else None
                    if isinstance(args, str) and args:
                        pieces.append(args)
    return pieces, False


def _responses(obj: Any, etype: str, st: _State) -> tuple[list[str], bool]:
    """Responses: ``response.output_text.delta`` text by (output_index, content_index)."""
    kind = obj.get("type") or etype
    delta = obj.get("delta")
    if kind == "response.output_text.delta":
        if isinstance(delta, str):
            out_i, con_i = obj.get("output_index"), obj.get("content_index")
            key = (out_i if type(out_i) is int else 0, con_i if type(con_i) is int else 0)
            st.text.setdefault(key, []).append(delta)
            return [delta], False
    elif kind in (
        "response.function_call_arguments.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_text.delta",
    ):
        return ([delta] if isinstance(delta, str) else []), False
    elif kind in ("response.completed", "response.failed", "response.incomplete"):
        st.terminal = True  # the core takes failed/incomplete as an end too (documented)
    elif kind == "error":
        st.terminal = True
        return [], True
    return [], False


def _anthropic(obj: Any, etype: str, st: _State) -> tuple[list[str], bool]:
    """Anthropic: ``text_delta`` text per content block index (and a block's start text)."""
    kind = obj.get("type") or etype
    idx = obj.get("index", 0)
    idx = idx if type(idx) is int else 0
    if kind == "content_block_delta":
        delta = obj.get("delta")
        if not isinstance(delta, dict):
            return [], False
        dtype = delta.get("type")
        key = ""
        if dtype == "text_delta":
            key = "text"
        elif dtype == "input_json_delta":
            key = "partial_json"
        elif dtype == "thinking_delta":
            key = "thinking"
        value = delta.get(key) if key else None
        if isinstance(value, str):
            if key == "text":
                st.text.setdefault(idx, []).append(value)
            return [value], False
    elif kind == "content_block_start":
        block = obj.get("content_block")
        if isinstance(block, dict):
            text = block.get("text")
            if isinstance(text, str) and text:
                st.text.setdefault(idx, []).append(text)
                return [text], False
    elif kind == "message_stop":
        st.terminal = True
    elif kind == "error":
        st.terminal = True
        return [], True
    return [], False


def _gemini(obj: Any, etype: str, st: _State) -> tuple[list[str], bool]:
    """Gemini: each candidate's text parts by index, thought parts apart (reasoning, not the
    answer); a candidate's ``finishReason`` or a blocked prompt ends the stream, and so does
    an ``error`` object (the core takes it as the end, documented)."""
    cands = obj.get("candidates")
    pieces: list[str] = []
    if isinstance(cands, list):
        for cand in cands:
            if not isinstance(cand, dict):
                continue
            idx = cand.get("index", 0)
            idx = idx if type(idx) is int else 0
            answer = st.text.setdefault(idx, [])
            content = cand.get("content")
            parts = content.get("parts") if isinstance(content, dict) else None
            for part in parts if isinstance(parts, list) else []:
                text = part.get("text") if isinstance(part, dict) else None
                if isinstance(text, str) and text:
                    pieces.append(text)
                    if part.get("thought") is not True:
                        answer.append(text)
            if cand.get("finishReason"):
                st.terminal = True
    elif "error" in obj:
        st.terminal = True
        return pieces, True
    feedback = obj.get("promptFeedback")
    if isinstance(feedback, dict) and feedback.get("blockReason"):
        st.terminal = True
    return pieces, False


_JSON_DIALECTS: dict[str, tuple[Callable[[Any, str, _State], tuple[list[str], bool]], str]] = {
    "openai": (_openai, "[DONE]"),
    "responses": (_responses, "response.completed"),
    "anthropic": (_anthropic, "message_stop"),
    "gemini": (_gemini, "finishReason"),
}


def reference(
    stream: bytes,
    dialect: str,
    *,
    max_line: int = DEFAULT_LIMIT,
    max_frame: int = DEFAULT_LIMIT,
) -> Reference:
    """Events, alerts and message text of ``stream`` read as ``dialect`` (see DIALECTS)."""
    if dialect not in ALL_DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}")
    parsed = parse(stream, max_line=max_line, max_frame=max_frame)
    alerts = list(parsed.alerts)
    st = _State()
    text_parts: list[str] = []
    for ev in parsed.events:
        if dialect == "text":
            # The core's raw-text dialect: every event's data is a piece of the message,
            # joined with nothing; a "[DONE]" payload is the conventional end, not text.
            if ev.data == "[DONE]":
                st.terminal = True
            else:
                text_parts.append(ev.data)
            continue
        if dialect == "none":
            continue
        extract, _marker = _JSON_DIALECTS[dialect]
        if dialect == "openai" and ev.data == "[DONE]":
            st.terminal = True
            continue
        ok, obj = json_value(ev.data)
        if not ok:
            alerts.append(("invalid_json", ev.data_offset, ev.ordinal))
            continue
        if not isinstance(obj, dict):
            continue
        pieces, is_error = extract(obj, ev.type, st)
        if is_error:
            alerts.append(("error_event", ev.data_offset, ev.ordinal))
        # A U+FFFD that JSON decoding made from a "\ufffd" escape was sent so by upstream:
        # one upstream_literal alert at the escape, for each that lands in extracted text.
        # (Those already in the decoded payload were reported by the framing layer.)
        if pieces and any(FFFD in p for p in pieces):
            marked = _escape_markers(ev, obj)
            if marked is not None:
                payload, where = marked
                _, obj2 = json_value(payload)
                pieces2, _ = extract(obj2, ev.type, _State())
                # Core: the first DETAIL_LIMIT of a payload's escapes are an alert each;
                # past that, the rest of each extracted piece's are one counted alert.
                budget = DETAIL_LIMIT
                for piece in pieces2:
                    escapes = sorted(where[ch] for ch in piece if ch in where)
                    if not escapes:
                        continue
                    alerts += [
                        ("replacement_char", "upstream_literal", at, ev.ordinal, 1)
                        for at in escapes[:budget]
                    ]
                    if len(escapes) > budget:
                        rest = len(escapes) - budget
                        alerts.append(
                            (
                                "replacement_char",
                                "upstream_literal",
                                escapes[budget],
                                ev.ordinal,
                                rest,
                            )
                        )
                    budget = max(0, budget - len(escapes))
    if parsed.unterminated is not None:
        alerts.append(parsed.unterminated)
    if dialect in _JSON_DIALECTS and not st.terminal:
        alerts.append(("truncated", "no_terminal_marker", dialect, len(stream)))
    le = parsed.line_endings
    if le["crlf"] or le["cr"]:
        kinds = sum(1 for n in le.values() if n)
        alerts.append(("crlf_framing", le["lf"], le["crlf"], le["cr"], kinds > 1))
    if dialect == "text":
        text = "".join(text_parts)
    elif dialect in ("openai", "gemini"):
        text = "".join(st.text[min(st.text)]) if st.text else ""
    else:
        text = "".join("".join(st.text[k]) for k in sorted(st.text))
    return Reference(
        tuple(parsed.events),
        tuple(alerts),
        text,
        tuple(parsed.frame_ends),
        tuple(parsed.crlf_frame_ends),
        le,
    )
