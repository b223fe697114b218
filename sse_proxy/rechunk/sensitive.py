"""Where a cut matters: the write boundaries a client must meet as read boundaries.

A re-chunking strategy moves write boundaries; only some of them test anything. A cut
between two letters of a JSON string tests nothing a cut inside a character, between CR
and LF, inside a field name (``data:``) or at a frame end does not test better. Those
positions are *sensitive*: a write that starts at one carries a cut, and the shell makes
the client read everything before it first (:mod:`sse_proxy.server.delivery`). The rest
go out as they come, so ``bytewise`` waits at about a thousand boundaries, not thirty.

Pure: bytes in, offsets out. The caller hands in the bytes already written before
``data`` (``context``) so a boundary at the start of ``data`` is judged with both sides.
"""

from __future__ import annotations

import re
from typing import Final

__all__ = ["CONTEXT", "sensitive_positions"]

CONTEXT: Final = 16
"""Bytes of what came before that are enough to judge a boundary at the start."""

# A multi-byte character (or a prefix of one): every position strictly inside it.
_CHAR = re.compile(rb"[\xc0-\xf7][\x80-\xbf]{1,3}")
_CRLF = re.compile(rb"\r\n")
_LINE_END = re.compile(rb"\r\n|\r|\n")
# A field name at the start of a line (or after the stream's BOM), with its colon.
_FIELD = re.compile(rb"(?:(?<![^\r\n])|(?<=\A\xef\xbb\xbf))(data|event|id|retry):")
_NAMES = (b"data:", b"event:", b"id:", b"retry:")


def sensitive_positions(context: bytes, data: bytes) -> set[int]:
    """Offsets ``p`` in ``0..len(data)-1`` of ``data`` where a boundary before ``data[p]``
    is a cut that matters: inside a character, between CR and LF, inside a field name or
    just after its colon, or around a blank line (just before it and at the frame end).

    ``context`` is what the client received just before ``data`` (at most
    :data:`CONTEXT` bytes are looked at), empty at the start of the stream.
    """
    tail = context[-CONTEXT:]
    buf = tail + data
    lo, hi = len(tail), len(buf)
    found: set[int] = set()
    for m in _CHAR.finditer(buf):
        found.update(range(m.start() + 1, m.end()))
    found.update(m.start() + 1 for m in _CRLF.finditer(buf))
    prev_end = -1
    for m in _LINE_END.finditer(buf):
        start, end = m.span()
        if start == prev_end:  # a line ending right after one: a blank line
            found.add(start)
            found.add(end)
        prev_end = end
    for m in _FIELD.finditer(buf):
        name_start, name_end = m.span(1)
        found.update(range(name_start + 1, name_end + 2))  # ... up to just after the colon
    # A line that is so far the start of a field name ("dat"): its colon is yet to come.
    line_start = max(buf.rfind(b"\n"), buf.rfind(b"\r")) + 1
    if line_start or len(tail) < CONTEXT:
        partial = buf[line_start:]
        if partial.startswith(b"\xef\xbb\xbf") and not line_start:
            line_start += 3
            partial = partial[3:]
        if partial and any(n.startswith(partial) and n != partial for n in _NAMES):
            found.update(range(line_start + 1, hi))
    return {p - lo for p in found if lo <= p < hi}
