"""The byte-strip model: where each read ended, each frame ended, each line ended, each
alert fired, and which multi-byte characters a read cut, as exact byte offsets.

Pure: bytes and read sizes in, a frozen model out. The inspector and the HTML reports
render from it, and the tests check it, so a marker on the page is where the model says.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from sse_proxy.core import StreamReassembler
from sse_proxy.core.alerts import Alert
from sse_proxy.core.events import SSEEvent
from sse_proxy.obs.redact import scrub_held

__all__ = [
    "AlertMark",
    "Analysis",
    "CutChar",
    "LineEnding",
    "StripModel",
    "alert_marks",
    "analyse",
    "build_strip",
    "cut_chars",
    "line_endings",
]

_EOL = re.compile(rb"\r\n|\r|\n")


@dataclass(frozen=True, slots=True)
class LineEnding:
    """A line ending starting at ``offset``: ``LF``, ``CRLF`` or ``CR``."""

    offset: int
    kind: str

    @property
    def end(self) -> int:
        return self.offset + (2 if self.kind == "CRLF" else 1)


@dataclass(frozen=True, slots=True)
class CutChar:
    """A multi-byte character at ``start`` (``length`` bytes) that a read ended inside.

    ``boundary`` is the offset where the read ended; ``char`` is the character when its
    bytes are valid UTF-8, else ``None``.
    """

    start: int
    length: int
    boundary: int
    char: str | None


@dataclass(frozen=True, slots=True)
class AlertMark:
    """An alert placed at a byte offset (stream-level alerts sit at the end)."""

    offset: int
    name: str
    detail: str


@dataclass(frozen=True, slots=True)
class StripModel:
    """Everything the byte strip shows, for ``size`` bytes (``total`` in the stream)."""

    size: int
    total: int
    read_ends: tuple[int, ...]
    frame_ends: tuple[int, ...]
    line_endings: tuple[LineEnding, ...]
    cut_chars: tuple[CutChar, ...]
    alerts: tuple[AlertMark, ...]

    @property
    def boundaries(self) -> tuple[int, ...]:
        """Read boundaries strictly inside the bytes shown (where one read met the next)."""
        return tuple(e for e in self.read_ends if 0 < e < self.size)


def line_endings(data: bytes) -> tuple[LineEnding, ...]:
    """Every line ending in ``data``; a CR followed by LF is one CRLF."""
    out = []
    for m in _EOL.finditer(data):
        token = m.group()
        out.append(
            LineEnding(
                m.start(),
                "CRLF"
                if token == b"\r\n"
                else token.decode().replace("\r", "CR").replace("\n", "LF"),
            )
        )
    return tuple(out)


def _char_length(lead: int) -> int:
    if lead >= 0xF0:
        return 4
    if lead >= 0xE0:
        return 3
    if lead >= 0xC0:
        return 2
    return 1


def cut_chars(data: bytes, boundaries: Iterable[int]) -> tuple[CutChar, ...]:
    """The multi-byte characters that a boundary falls inside (lead byte before it)."""
    out = []
    for b in boundaries:
        if not 0 < b < len(data) or data[b] & 0xC0 != 0x80:
            continue
        start = b - 1
        while start > 0 and b - start < 4 and data[start] & 0xC0 == 0x80:
            start -= 1
        lead = data[start]
        if lead < 0xC0 or lead >= 0xF8:
            continue  # a stray continuation byte, not a character the read cut
        length = _char_length(lead)
        if start + length <= b:
            continue
        raw = data[start : start + length]
        try:
            char: str | None = raw.decode("utf-8")
        except UnicodeDecodeError:
            char = None
        out.append(CutChar(start, length, b, char))
    return tuple(out)


def _detail(alert: Alert) -> str:
    skip = {"byte_offset", "preview", "message"}
    parts = [f"{k}={v}" for k, v in alert.fields().items() if k not in skip]
    return scrub_held(", ".join(parts))


def alert_marks(alerts: Iterable[Alert], end: int) -> tuple[AlertMark, ...]:
    """Alerts as marks; one without a byte offset (CRLF framing) sits at ``end``.

    Previews and error messages can quote message text, so they are left out.
    """
    out = []
    for alert in alerts:
        offset = getattr(alert, "byte_offset", None)
        out.append(AlertMark(end if offset is None else int(offset), alert.name, _detail(alert)))
    return tuple(out)


def build_strip(
    data: bytes,
    read_sizes: Sequence[int],
    frame_ends: Iterable[int],
    alerts: Iterable[AlertMark],
    *,
    total: int | None = None,
) -> StripModel:
    """The model for ``data`` received in reads of ``read_sizes`` bytes (capped to ``data``)."""
    size = len(data)
    ends = []
    pos = 0
    for n in read_sizes:
        pos += n
        if pos > size:
            break
        ends.append(pos)
    inside = [e for e in ends if 0 < e < size]
    return StripModel(
        size=size,
        total=size if total is None else total,
        read_ends=tuple(ends),
        frame_ends=tuple(sorted(e for e in set(frame_ends) if 0 < e <= size)),
        line_endings=line_endings(data),
        cut_chars=cut_chars(data, inside),
        alerts=tuple(sorted(alerts, key=lambda a: a.offset)),
    )


@dataclass(frozen=True, slots=True)
class Analysis:
    """A stream re-read by the core: its strip, events, text and alerts."""

    strip: StripModel
    events: tuple[SSEEvent, ...]
    text: str
    dialect: str
    alerts: tuple[Alert, ...]


def analyse(
    reads: Sequence[bytes],
    *,
    dialect: str | None = None,
    hint: str | None = None,
    upstream_error: bool = False,
    complete: bool = True,
    alerts: Iterable[AlertMark] | None = None,
    total: int | None = None,
    keep_text: bool = True,
) -> Analysis:
    """Feed ``reads`` (in their original boundaries) through a fresh reassembler.

    ``complete=False``: the bytes are a prefix (a capped copy), so no end-of-stream
    verdicts are made. ``alerts`` replaces the re-run's own alert marks (the proxy's live
    alerts, which saw the whole stream).
    """
    r = StreamReassembler(dialect, hint=hint, keep_text=keep_text)
    events: list[SSEEvent] = []
    found: list[Alert] = []
    ends: list[int] = []
    for chunk in reads:
        out = r.feed(chunk)
        events.extend(out.events)
        found.extend(out.alerts)
        ends.extend(out.frame_ends)
    out = r.close(upstream_error=upstream_error and complete, abandoned=not complete)
    events.extend(out.events)
    found.extend(out.alerts)
    ends.extend(out.frame_ends)
    data = b"".join(reads)
    marks = alert_marks(found, len(data)) if alerts is None else tuple(alerts)
    strip = build_strip(data, [len(c) for c in reads], ends, marks, total=total)
    return Analysis(strip, tuple(events), r.text, r.dialect, tuple(found))
