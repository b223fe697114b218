"""UTF-8 decoding that accounts for every U+FFFD it produces, in time linear in the input.

The framer only decodes complete lines. CR (0x0D) and LF (0x0A) never occur inside a
multi-byte sequence, so a character cut across reads is whole again by the time its line
is complete, and decoding line by line gives exactly the text a decode of the whole stream
would give. The strict decode is the fast path; only a line that fails it comes here.

Why the slow path is shaped as it is: a line may hold a million bad bytes. Decoding it is
one C-level ``errors="replace"`` pass; *counting* its U+FFFD is two C-level counts (every
U+FFFD in the text is either an invalid subpart or an encoded U+FFFD that upstream sent,
and an encoded EF BF BD always decodes as itself, since EF is never a continuation byte).
Only the first few of each kind are *located* one by one (a Python call each); the rest are
reported as one counted alert. Nothing here restarts a decode on the rest of the line,
which is what made the old path quadratic (every ``UnicodeDecodeError`` copies its input).

:func:`make_stream_decoder` is the codec module's incremental decoder, for text that must
come out before its line ends; the tests use it to show the character-boundary technique
on its own, apart from framing.
"""

from __future__ import annotations

import codecs
import threading
from collections.abc import Callable

__all__ = [
    "DETAIL_LIMIT",
    "REPLACEMENT",
    "REPLACEMENT_BYTES",
    "decode_replacing",
    "invalid_offsets",
    "literal_offsets",
    "make_stream_decoder",
    "replacement_runs",
]

REPLACEMENT = "\ufffd"
REPLACEMENT_BYTES = REPLACEMENT.encode()
# How many U+FFFD of one cause in one line (or one JSON payload) are located one by one;
# the rest become one alert that carries their count.
DETAIL_LIMIT = 16

_LOCATE = "sse-proxy.locate"
_state = threading.local()


class _Enough(Exception):
    """Raised inside the error handler to stop a locating decode early."""


def _locate(exc: UnicodeError) -> tuple[str, int]:
    assert isinstance(exc, UnicodeDecodeError)
    found: list[int] = _state.found
    found.append(exc.start)
    if len(found) >= _state.limit:
        raise _Enough
    return ("", exc.end)


codecs.register_error(_LOCATE, _locate)


def invalid_offsets(raw: bytes, limit: int) -> list[int]:
    """Offsets in ``raw`` of its first ``limit`` invalid subparts (one U+FFFD each).

    One decode with an error handler that records and skips: the decoder builds its
    exception object once and moves it along, so this is linear in ``raw``.
    """
    found: list[int] = []
    if limit < 1:
        return found
    _state.found = found
    _state.limit = limit
    try:
        raw.decode("utf-8", _LOCATE)
    except _Enough:
        pass
    finally:
        _state.found = None
    return found


def literal_offsets(raw: bytes, limit: int | None = None) -> list[int]:
    """Offsets of the first ``limit`` encoded U+FFFD (EF BF BD) in ``raw`` (all if None)."""
    found: list[int] = []
    i = raw.find(REPLACEMENT_BYTES)
    while i >= 0 and (limit is None or len(found) < limit):
        found.append(i)
        i = raw.find(REPLACEMENT_BYTES, i + 3)
    return found


def replacement_runs(raw: bytes, text: str) -> list[tuple[int, bool, int]]:
    """Where the U+FFFD of ``text`` (``raw`` decoded with ``replace``) come from.

    Returns ``(offset, literal, count)`` triples in stream order per cause: the first
    :data:`DETAIL_LIMIT` U+FFFD of each cause with count 1, then, if there are more, one
    triple at the next one's offset counting all the rest. ``literal`` is true for an
    encoded U+FFFD (upstream sent it), false for invalid bytes (lost on the wire).
    """
    total = text.count(REPLACEMENT)
    if not total:
        return []
    n_lit = raw.count(REPLACEMENT_BYTES) if total else 0
    found: list[tuple[int, bool, int]] = []
    for literal, n, locate in (
        (False, total - n_lit, invalid_offsets),
        (True, n_lit, literal_offsets),
    ):
        if not n:
            continue
        offsets = locate(raw, min(n, DETAIL_LIMIT + 1))
        found += [(o, literal, 1) for o in offsets[:DETAIL_LIMIT]]
        if n > DETAIL_LIMIT:
            found.append((offsets[DETAIL_LIMIT], literal, n - DETAIL_LIMIT))
    found.sort()
    return found


def decode_replacing(raw: bytes) -> tuple[str, list[int]]:
    """Decode ``raw`` like ``errors="replace"`` and return the offsets of each invalid subpart.

    One U+FFFD per maximal invalid subpart, as CPython's decoder and the WHATWG Encoding
    standard both do; each offset is relative to ``raw``. Every offset is located, so this
    is for small inputs (tests, reports); the framer uses :func:`replacement_runs`.
    """
    text = raw.decode("utf-8", "replace")
    n_bad = text.count(REPLACEMENT) - raw.count(REPLACEMENT_BYTES)
    return text, invalid_offsets(raw, n_bad)


def make_stream_decoder() -> Callable[[bytes, bool], str]:
    """An incremental UTF-8 decoder: ``decode(piece, final)`` holds back a cut character."""
    return codecs.getincrementaldecoder("utf-8")(errors="replace").decode
