"""Where to cut: each re-chunking strategy maps bytes to cut offsets, nothing more.

Offsets are relative to the bytes being cut (the planner feeds one upstream chunk, or one
group of held frames, at a time) and always lie strictly inside ``(0, len(data))``: a cut
at either end would be an empty write. Everything random comes from the ``rng`` passed in,
consumed in a fixed order, so the same bytes and seed give the same cuts.
"""

from __future__ import annotations

import random
import re
from collections.abc import Iterable, Sequence

from sse_proxy.errors import ChaosSpecError
from sse_proxy.rechunk.spec import STRATEGIES

__all__ = ["combined_cut_points", "cut_points", "split_at"]

# One UTF-8 character of two or more bytes, or a truncated prefix of at least two bytes.
# Matching by lead byte keeps a run of stray continuation bytes from merging characters.
_MULTIBYTE = re.compile(
    rb"[\xc0-\xdf][\x80-\xbf]|[\xe0-\xef][\x80-\xbf]{1,2}|[\xf0-\xf7][\x80-\xbf]{1,3}"
)
_LINE_END = re.compile(rb"\r\n|\r|\n")
# A field name at the start of a line (or after the stream's BOM) followed by its colon.
_FIELD = re.compile(rb"(?:(?<![^\r\n])|(?<=\A\xef\xbb\xbf))(data|event|id|retry):")


def _bytewise(data: bytes) -> list[int]:
    return list(range(1, len(data)))


def _utf8(data: bytes, rng: random.Random) -> list[int]:
    """One cut at a random interior position of every multi-byte character."""
    return [m.start() + rng.randrange(1, m.end() - m.start()) for m in _MULTIBYTE.finditer(data)]


def _boundaries(data: bytes, rng: random.Random, frame_ends: Sequence[int]) -> list[int]:
    """Cuts where naive parsers assume a read never ends: prefixes, CRLF, blank lines."""
    cuts: list[int] = []
    prev_end = -1
    for m in _LINE_END.finditer(data):
        start, end = m.span()
        if end - start == 2:
            cuts.append(start + 1)  # between CR and LF
        if start == prev_end:  # a line ending right after a line ending: a blank line
            cuts.extend((start, end))
        prev_end = end
    for end in frame_ends:
        if 0 < end <= len(data):
            blank = end - 2 if data[end - 2 : end] == b"\r\n" else end - 1
            cuts.extend((blank, end))
    for m in _FIELD.finditer(data):
        name_start, name_end = m.span(1)
        cuts.append(name_start + rng.randrange(1, name_end - name_start))
        cuts.extend((name_end, name_end + 1))  # just before and just after the colon
    return cuts


def _random(data: bytes, rng: random.Random, k: int) -> list[int]:
    if len(data) < 2 or k <= 0:
        return []
    return rng.sample(range(1, len(data)), min(k, len(data) - 1))


def cut_points(
    strategy: str,
    data: bytes,
    rng: random.Random,
    *,
    k: int,
    frame_ends: Sequence[int] = (),
) -> list[int]:
    """Sorted, unique cut offsets strictly inside ``data`` for one re-chunking strategy.

    ``frame_ends`` are offsets (relative to ``data``) just after blank lines that ended a
    frame, as the reassembler saw them; ``boundaries`` also finds blank lines by itself but
    cannot see one whose first line ending was in an earlier chunk.
    """
    if strategy == "bytewise":
        cuts = _bytewise(data)
    elif strategy == "utf8":
        cuts = _utf8(data, rng)
    elif strategy == "boundaries":
        cuts = _boundaries(data, rng, frame_ends)
    elif strategy == "random":
        cuts = _random(data, rng, k)
    elif strategy == "coalesce":
        cuts = []  # coalescing merges frames; the planner does it, nothing to cut
    else:
        raise ChaosSpecError(
            f"{strategy!r} is not a re-chunking strategy; valid: {', '.join(STRATEGIES)}"
        )
    n = len(data)
    return sorted({c for c in cuts if 0 < c < n})


def combined_cut_points(
    strategies: Iterable[str],
    data: bytes,
    rng: random.Random,
    *,
    k: int,
    frame_ends: Sequence[int] = (),
) -> list[int]:
    """The union of several strategies' cuts, drawn in the order given (keep it canonical)."""
    cuts: set[int] = set()
    for strategy in strategies:
        cuts.update(cut_points(strategy, data, rng, k=k, frame_ends=frame_ends))
    return sorted(cuts)


def split_at(data: bytes, cuts: Sequence[int]) -> list[bytes]:
    """Split ``data`` at sorted cut offsets; joining the pieces gives ``data`` back."""
    pieces: list[bytes] = []
    start = 0
    for cut in cuts:
        pieces.append(data[start:cut])
        start = cut
    pieces.append(data[start:])
    return pieces
