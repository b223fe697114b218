"""Spec-equivalent rewrites: change the bytes of whole frames, never the events they carry.

Each rewrite takes a run of complete frames (bytes up to and including the blank line that
ends the last one) and returns bytes that a WHATWG event-stream parser turns into the same
dispatched events: same type, data, last event ID and per-event retry. They exist because
real clients get these wrong even though the spec allows every one of them.

Three facts make this safe, and the code leans on each:

* A frame starts with empty buffers, so blank lines at its start are no-ops and are dropped.
  (One of them may be the LF of a CRLF whose CR ended the previous frame.) Hence no output
  starts with LF, and a CR that ends the previous output can never swallow a line ending.
  The stream's first frame keeps them: nothing precedes it, and its output must never be
  empty, or a later U+FEFF would become the stream's first bytes and be read as a BOM.
* Inserted blocks are complete and carry no ``data``, so they dispatch nothing; an inserted
  ``id`` block repeats the last event ID already in force, so ``lastEventId`` is unchanged
  (and only a clean UTF-8 one, so no replacement-character alert is duplicated).
* A CR followed by an empty line ending in LF would read as one CRLF, so ``mixed_newlines``
  never gives an empty line an LF ending after a CR.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable

from sse_proxy.errors import ChaosSpecError
from sse_proxy.rechunk.spec import REWRITES

__all__ = ["BOM", "apply_rewrites", "is_complete_frame", "rewrite_frame"]

BOM = b"\xef\xbb\xbf"
CR, LF, CRLF = b"\r", b"\n", b"\r\n"

_LINE_SPLIT = re.compile(rb"(\r\n|\r|\n)")
# Structural rewrites first (they add or edit lines), then line endings, then the BOM.
_APPLY_ORDER = ("nospace", "dataless", "keepalive", "blank_lines", "crlf", "cr", "mixed_newlines")
_DATALESS_BLOCKS = (b"retry: 3000", b"event: ping", b": no data here")

Line = tuple[bytes, bytes]  # (content, line ending)


def _split(frame: bytes) -> tuple[list[Line], bytes]:
    """Lines with their own endings, plus the unterminated tail (empty for a whole frame)."""
    parts = _LINE_SPLIT.split(frame)
    lines = [(parts[i], parts[i + 1]) for i in range(0, len(parts) - 1, 2)]
    return lines, parts[-1]


def is_complete_frame(frame: bytes) -> bool:
    """True when ``frame`` ends with a blank line, so rewriting it cannot split a block."""
    lines, tail = _split(frame)
    return not tail and bool(lines) and lines[-1][0] == b""


def _field_value(content: bytes, name: bytes) -> bytes | None:
    """The value of field ``name`` on this line (one leading space stripped), else None."""
    field, sep, value = content.partition(b":")
    if field != name:
        return None
    if not sep:
        return b""
    return value[1:] if value.startswith(b" ") else value


def _last_event_id(lines: list[Line]) -> bytes | None:
    """The last accepted ``id`` value in these lines (one containing NUL is ignored)."""
    last: bytes | None = None
    for content, _ in lines:
        value = _field_value(content, b"id")
        if value is not None and b"\x00" not in value:
            last = value
    return last


def _clean_utf8(value: bytes) -> bool:
    """Valid UTF-8 without U+FFFD: repeating it cannot add a replacement-character alert."""
    try:
        return "\ufffd" not in value.decode("utf-8")
    except UnicodeDecodeError:
        return False


def _nospace(lines: list[Line]) -> list[Line]:
    """``data: x`` -> ``data:x`` where the value itself does not start with a space."""
    return [
        (b"data:" + c[6:] if c.startswith(b"data: ") and c[6:7] != b" " else c, end)
        for c, end in lines
    ]


def _dataless(lines: list[Line], rng: random.Random) -> list[Line]:
    """Data-less blocks around the frame: ``retry``, ``event`` and comment before it, and
    after it an ``id`` block that repeats the ID the frame set (lastEventId is unchanged)."""
    end = lines[-1][1]
    blocks = list(_DATALESS_BLOCKS)
    rng.shuffle(blocks)
    before: list[Line] = []
    for block in blocks:
        before += [(block, end), (b"", end)]
    after: list[Line] = []
    last_id = _last_event_id(lines)
    if last_id is not None and _clean_utf8(last_id):
        after = [(b"id: " + last_id, end), (b"", end)]
    return before + lines + after


def _keepalive(lines: list[Line]) -> list[Line]:
    """A comment-only block before the frame, as servers send to keep idle connections."""
    end = lines[-1][1]
    return [(b": keep-alive", end), (b"", end), *lines]


def _blank_lines(lines: list[Line], rng: random.Random) -> list[Line]:
    """One or two extra blank lines after the frame (same ending, so no CR+LF merge)."""
    end = lines[-1][1]
    return lines + [(b"", end)] * rng.randint(1, 2)


def _endings(lines: list[Line], name: str, rng: random.Random) -> list[Line]:
    """Every line ending to CRLF, to CR, or a random mix that never forms a stray CRLF."""
    if name == "crlf":
        return [(c, CRLF) for c, _ in lines]
    if name == "cr":
        return [(c, CR) for c, _ in lines]
    out: list[Line] = []
    prev = CR  # unknown what came before this frame: assume the worst case
    for content, _ in lines:
        choices = (CR, CRLF) if prev == CR and not content else (LF, CR, CRLF)
        prev = rng.choice(choices)
        out.append((content, prev))
    return out


def apply_rewrites(names: Iterable[str], frame: bytes, rng: random.Random, *, first: bool) -> bytes:
    """Apply several rewrites to complete frames, in a fixed order whatever order is given.

    ``first`` marks the very start of the stream: a BOM there belongs to the stream, not to
    the first field name, so it is kept in front (and ``bom`` adds one only there).
    """
    wanted = set(names)
    unknown = wanted.difference(REWRITES)
    if unknown:
        raise ChaosSpecError(
            f"unknown rewrite {sorted(unknown)[0]!r}; valid: {', '.join(REWRITES)}"
        )
    had_bom = first and frame.startswith(BOM)
    body = frame[len(BOM) :] if had_bom else frame
    lines, tail = _split(body)
    if tail or not lines or lines[-1][0] != b"":
        raise ValueError("rewrites need complete frames ending with a blank line")
    if not first or had_bom:
        # At the very start they stay: dropping them could bring a BOM that is part of a
        # field name to the front of the stream, where it would be stripped instead.
        skip = next((i for i, (content, _) in enumerate(lines) if content), len(lines))
        lines = lines[skip:]
    if lines:
        for name in _APPLY_ORDER:
            if name not in wanted:
                continue
            if name == "nospace":
                lines = _nospace(lines)
            elif name == "dataless":
                lines = _dataless(lines, rng)
            elif name == "keepalive":
                lines = _keepalive(lines)
            elif name == "blank_lines":
                lines = _blank_lines(lines, rng)
            else:
                lines = _endings(lines, name, rng)
    out = b"".join(content + end for content, end in lines)
    if had_bom or (first and "bom" in wanted):
        out = BOM + out
    return out


def rewrite_frame(name: str, frame: bytes, rng: random.Random, *, first: bool) -> bytes:
    """Apply one named rewrite to complete frames; see :func:`apply_rewrites`."""
    return apply_rewrites((name,), frame, rng, first=first)
