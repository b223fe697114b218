"""UTF-8 decoding that accounts for every U+FFFD it produces.

The framer only decodes complete lines. CR (0x0D) and LF (0x0A) never occur inside a
multi-byte sequence, so a character cut across reads is whole again by the time its line
is complete, and decoding line by line gives exactly the text a decode of the whole stream
would give. The strict decode is the fast path; only a line that fails it comes here.

:func:`make_stream_decoder` is the codec module's incremental decoder, for text that must
come out before its line ends; the tests use it to show the character-boundary technique
on its own, apart from framing.
"""

from __future__ import annotations

import codecs
from collections.abc import Callable

__all__ = [
    "REPLACEMENT",
    "REPLACEMENT_BYTES",
    "decode_replacing",
    "literal_offsets",
    "make_stream_decoder",
]

REPLACEMENT = "\ufffd"
REPLACEMENT_BYTES = REPLACEMENT.encode()


def decode_replacing(raw: bytes) -> tuple[str, list[int]]:
    """Decode ``raw`` like ``errors="replace"`` and return the offsets of each invalid subpart.

    One U+FFFD per maximal invalid subpart, as CPython's decoder and the WHATWG Encoding
    standard both do; each offset is relative to ``raw``. Walking the strict decoder's own
    ``UnicodeDecodeError`` positions keeps this free of global error-handler state.
    """
    out: list[str] = []
    bad: list[int] = []
    pos = 0
    end = len(raw)
    while pos < end:
        try:
            out.append(raw[pos:].decode("utf-8"))
            break
        except UnicodeDecodeError as exc:
            # exc offsets are relative to the slice we decoded, not to ``raw``.
            out.append(raw[pos : pos + exc.start].decode("utf-8"))
            out.append(REPLACEMENT)
            bad.append(pos + exc.start)
            pos += exc.end
    return "".join(out), bad


def literal_offsets(raw: bytes) -> list[int]:
    """Offsets of every encoded U+FFFD (EF BF BD) in ``raw``: upstream lost those itself."""
    found: list[int] = []
    i = raw.find(REPLACEMENT_BYTES)
    while i >= 0:
        found.append(i)
        i = raw.find(REPLACEMENT_BYTES, i + 3)
    return found


def make_stream_decoder() -> Callable[[bytes, bool], str]:
    """An incremental UTF-8 decoder: ``decode(piece, final)`` holds back a cut character."""
    return codecs.getincrementaldecoder("utf-8")(errors="replace").decode
