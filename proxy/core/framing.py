"""The WHATWG event-stream parser over bytes: lines, fields, dispatch, with stream offsets.

Rules of this module (checked by the tests):

1. Frame on bytes, decode per complete line. A read may end anywhere (inside a character,
   inside ``data:``, between CR and LF); nothing is decided before the line is complete,
   so no cut point changes the result.
2. Lines end at CRLF, LF or a bare CR and nowhere else. A CR that ends a read is acted on
   at once (no event waits for the next read) and a LF that starts the next read is then
   swallowed: together they were one CRLF. This is httpx's ``LineDecoder`` and
   eventsource-parser's trailing-CR rule, done without delaying the dispatch.
3. Every position is a byte offset into the upstream stream (a stripped BOM counts).
4. Memory is bounded: a partial line is kept as a list of reads (no quadratic
   concatenation) and is dropped, with an alert, once it outgrows ``max_line``; a frame
   that outgrows ``max_frame`` is dropped the same way. The bytes are still forwarded by
   the shell; only this observer stops looking at them.
5. No exceptions for upstream bytes: anomalies become alerts in ``self.alerts``.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable

from proxy.core.alerts import Alert, OversizedFrame, ReplacementChar, UnterminatedFrame
from proxy.core.events import SSEEvent
from proxy.core.utf8 import REPLACEMENT_BYTES, decode_replacing, literal_offsets

__all__ = ["DEFAULT_LIMIT", "DataCallback", "EventStreamParser", "escape_preview"]

DEFAULT_LIMIT = 1 << 20
_BOM = b"\xef\xbb\xbf"
_LINE_END = re.compile(rb"\r\n|\r|\n")
_PREVIEW_BYTES = 48

# (event type, data, event index, stream offset of the data): what dialects consume
DataCallback = Callable[[str, str, int, int], None]


def escape_preview(raw: bytes, limit: int = _PREVIEW_BYTES) -> str:
    """A short, log-safe rendering of raw bytes: control characters and bad bytes escaped."""
    text = raw[:limit].decode("utf-8", "backslashreplace")
    shown = repr(text)[1:-1]
    return shown + ("…" if len(raw) > limit else "")


class EventStreamParser:
    """Incremental event-stream parser; ``feed`` bytes, get callbacks and ``alerts``.

    Alerts are appended to the list passed in (the reassembler drains it after each call);
    each dispatched event goes to ``on_data`` and, when an ``events`` list is given, is
    appended to it as an :class:`SSEEvent`. Only ``feed`` and ``close`` are meant to be called.
    """

    __slots__ = (
        "_block_dropped",
        "_block_start",
        "_bom_buf",
        "_counts",
        "_data",
        "_data_off",
        "_event_type",
        "_events",
        "_frame_ends",
        "_head",
        "_last_id",
        "_line_overflow",
        "_max_frame",
        "_max_line",
        "_offset",
        "_on_data",
        "_pending",
        "_pending_len",
        "_retry",
        "_skip_lf",
        "alerts",
        "event_count",
    )

    def __init__(
        self,
        on_data: DataCallback,
        alerts: list[Alert],
        *,
        events: list[SSEEvent] | None = None,
        max_line: int = DEFAULT_LIMIT,
        max_frame: int = DEFAULT_LIMIT,
    ) -> None:
        self._on_data = on_data
        self._events = events
        self.alerts = alerts
        self._max_line = max_line
        self._max_frame = max_frame
        self.event_count = 0
        # byte stream state
        self._offset = 0  # stream offset of the first byte not yet split into lines
        self._pending: list[bytes] = []  # reads making up the current partial line
        self._pending_len = 0
        self._skip_lf = False  # the last read ended in CR: a leading LF is its other half
        self._bom_buf: bytes | None = b""  # None once the stream start is past
        self._line_overflow = False  # discarding the rest of an oversized line
        self._counts = [0, 0, 0]  # LF, CRLF, bare CR
        self._head = b""  # the first bytes of the current block, for the unterminated preview
        # block (event being built) state
        self._data: list[str] = []
        self._data_off = 0
        self._event_type = ""
        self._retry: int | None = None
        self._last_id: str | None = None
        self._block_start = 0
        self._block_dropped = False
        self._frame_ends: list[int] = []

    # -- public -------------------------------------------------------------------------

    @property
    def offset(self) -> int:
        """Bytes consumed so far, including a partial line and a held-back BOM prefix."""
        held = len(self._bom_buf) if self._bom_buf else 0
        return self._offset + self._pending_len + held

    @property
    def line_endings(self) -> dict[str, int]:
        lf, crlf, cr = self._counts
        return {"lf": lf, "crlf": crlf, "cr": cr}

    def set_on_data(self, on_data: DataCallback) -> None:
        """Where dispatched events go from now on (the reassembler's dialect, once known)."""
        self._on_data = on_data

    def take_frame_ends(self) -> list[int]:
        """Offsets just after each blank line seen since the last call."""
        ends = self._frame_ends
        if ends:
            self._frame_ends = []
        return ends

    def feed(self, chunk: bytes) -> None:
        if self._bom_buf is not None:
            chunk = self._bom_buf + chunk
            if len(chunk) < 3 and _BOM.startswith(chunk):
                self._bom_buf = chunk  # could still be a BOM: decide on the next read
                return
            self._bom_buf = None
            if chunk.startswith(_BOM):
                chunk = chunk[3:]
                self._offset = self._block_start = 3
        if not chunk:
            return
        if self._skip_lf:
            self._skip_lf = False
            if chunk[0] == 0x0A:
                # The CR that ended the previous read was half of a CRLF. The line it ended
                # was handled then; the LF adds nothing but must not end a second line.
                self._counts[2] -= 1
                self._counts[1] += 1
                self._offset += 1
                if self._block_start == self._offset - 1:
                    self._block_start = self._offset
                    self._frame_ends.append(self._offset)
                else:
                    self._top_up_head(b"\n")  # the LF is part of the block's preview
                chunk = chunk[1:]
                if not chunk:
                    return
        if self._line_overflow:
            chunk = self._skip_overflowed_line(chunk)
            if not chunk:
                return

        n_lf = chunk.count(b"\n")
        n_cr = chunk.count(b"\r")
        if not n_lf and not n_cr:
            self._top_up_head(chunk)
            self._hold(chunk)
            return
        if self._pending:
            self._pending.append(chunk)
            buf = b"".join(self._pending)
            self._pending = []
            self._pending_len = 0
        else:
            buf = chunk
        start = self._offset
        careful = REPLACEMENT_BYTES in buf
        counts = self._counts

        if not n_cr:
            counts[0] += n_lf
            pos, rest = self._uniform(buf, start, b"\n", careful)
        elif not n_lf:
            counts[2] += n_cr
            pos, rest = self._uniform(buf, start, b"\r", careful)
            self._skip_lf = not rest
        else:
            n_crlf = buf.count(b"\r\n")
            if n_crlf == n_cr == n_lf:
                counts[1] += n_crlf
                pos, rest = self._uniform(buf, start, b"\r\n", careful)
            else:
                counts[0] += n_lf - n_crlf
                counts[1] += n_crlf
                counts[2] += n_cr - n_crlf
                pos = start
                last = 0
                for m in _LINE_END.finditer(buf):
                    pos = self._lines([buf[last : m.start()]], pos, m.end() - m.start(), careful)
                    last = m.end()
                rest = buf[last:]
                self._skip_lf = buf[-1] == 0x0D
        self._offset = pos
        rel = self._block_start - start
        if rel >= 0:
            self._head = buf[rel : rel + _PREVIEW_BYTES + 1]
        else:
            self._top_up_head(chunk)  # the held part of buf is in the head already
        if rest:
            self._hold(rest)

    def close(self) -> None:
        """End of stream: a partial line or block is discarded, as the spec says, and reported."""
        if self._bom_buf:
            held, self._bom_buf = self._bom_buf, None
            self._top_up_head(held)
            self._hold(held)
        self._bom_buf = None
        end = self._offset + self._pending_len
        if end > self._block_start or self._line_overflow:
            self.alerts.append(
                UnterminatedFrame(
                    pending_bytes=end - self._block_start,
                    preview=escape_preview(self._head),
                    byte_offset=self._block_start,
                )
            )
        self._pending = []
        self._pending_len = 0
        self._data = []

    # -- internals ----------------------------------------------------------------------

    def _top_up_head(self, piece: bytes) -> None:
        if len(self._head) <= _PREVIEW_BYTES:
            self._head += piece[: _PREVIEW_BYTES + 1 - len(self._head)]

    def _hold(self, piece: bytes) -> None:
        """Keep a partial line; past ``max_line`` drop it and skip to its end."""
        self._pending.append(piece)
        self._pending_len += len(piece)
        if self._pending_len > self._max_line:
            if not self._block_dropped:  # as in _lines: one alert per dropped block
                self.alerts.append(
                    OversizedFrame(kind="line", limit=self._max_line, byte_offset=self._offset)
                )
            self._offset += self._pending_len
            self._pending = []
            self._pending_len = 0
            self._line_overflow = True
            self._drop_block()

    def _skip_overflowed_line(self, chunk: bytes) -> bytes:
        """Discard the rest of an oversized line, up to and including its line ending."""
        lf = chunk.find(b"\n")
        cr = chunk.find(b"\r")
        if lf < 0 and cr < 0:
            self._top_up_head(chunk)  # the preview must not depend on where reads were cut
            self._offset += len(chunk)
            return b""
        self._line_overflow = False
        if cr < 0 or 0 <= lf < cr:
            self._counts[0] += 1
            cut = lf + 1
        elif chunk[cr + 1 : cr + 2] == b"\n":
            self._counts[1] += 1
            cut = cr + 2
        else:
            self._counts[2] += 1
            cut = cr + 1
            self._skip_lf = cut == len(chunk)
        self._top_up_head(chunk[:cut])
        self._offset += cut
        return chunk[cut:]

    def _drop_block(self) -> None:
        self._block_dropped = True
        self._data = []

    def _uniform(self, buf: bytes, pos: int, sep: bytes, careful: bool) -> tuple[int, bytes]:
        """Parse ``buf`` whose line endings are all ``sep``; return (offset after, rest).

        Frames are split off in C (``bytes.split`` on a blank line), and the two shapes
        that make up nearly every LLM stream, ``data: X`` and ``event: E`` + ``data: X``,
        dispatch straight from the frame. Anything else in a frame (more lines, other
        fields, a block begun in an earlier read, invalid UTF-8, a frame over a limit) goes
        through :meth:`_lines`, the one implementation of the field rules. ``rest`` is the
        partial line after the last line ending.
        """
        seplen = len(sep)
        if careful:
            lines = buf.split(sep)
            rest = lines.pop()
            return self._lines(lines, pos, seplen, True), rest
        frames = buf.split(sep + sep)
        tail = frames.pop().split(sep)
        rest = tail.pop()
        events = self._events
        on_data = self._on_data
        frame_ends = self._frame_ends
        max_line = self._max_line
        max_frame = self._max_frame - 2 * seplen
        for frame in frames:
            end = pos + len(frame) + 2 * seplen
            if self._block_start == pos and len(frame) <= max_frame:
                etype = "message"
                data = None
                if frame.startswith(b"data: "):
                    if frame.find(sep, 6) < 0 and len(frame) <= max_line:
                        try:
                            data = frame[6:].decode()
                        except UnicodeDecodeError:
                            data = None
                        data_off = pos + 6
                elif frame.startswith(b"event: "):
                    nl = frame.find(sep, 7)
                    at = nl + seplen
                    if (
                        nl > 0
                        and frame.startswith(b"data: ", at)
                        and frame.find(sep, at + 6) < 0
                        and nl <= max_line
                        and len(frame) - at <= max_line
                    ):
                        try:
                            etype = frame[7:nl].decode() or "message"
                            data = frame[at + 6 :].decode()
                        except UnicodeDecodeError:
                            data = None
                        data_off = pos + at + 6
                if data is not None:
                    index = self.event_count
                    self.event_count = index + 1
                    if events is not None:
                        events.append(SSEEvent(etype, data, self._last_id, None, index, pos))
                    on_data(etype, data, index, data_off)
                    frame_ends.append(end)
                    self._block_start = pos = end
                    continue
            lines = frame.split(sep)
            lines.append(b"")
            pos = self._lines(lines, pos, seplen, False)
        if tail:
            pos = self._lines(tail, pos, seplen, False)
        return pos, rest

    def _lines(self, lines: list[bytes], pos: int, seplen: int, careful: bool) -> int:
        """Process complete lines starting at stream offset ``pos``; return the offset after."""
        data = self._data
        max_frame = self._max_frame
        max_line = self._max_line
        for line in lines:
            end = pos + len(line) + seplen
            if not line:
                if data:
                    index = self.event_count
                    self.event_count = index + 1
                    etype = self._event_type or "message"
                    text = data[0] if len(data) == 1 else "\n".join(data)
                    if self._events is not None:
                        self._events.append(
                            SSEEvent(
                                etype, text, self._last_id, self._retry, index, self._block_start
                            )
                        )
                    self._on_data(etype, text, index, self._data_off)
                    data = self._data = []
                self._event_type = ""
                self._retry = None
                self._block_dropped = False
                self._block_start = end
                self._frame_ends.append(end)
            elif self._block_dropped:
                pass
            elif len(line) > max_line:
                # Arrived whole in one read; same verdict as if it had piled up in _hold,
                # which cannot know the frame size yet, so the line check comes first.
                self.alerts.append(OversizedFrame(kind="line", limit=max_line, byte_offset=pos))
                self._drop_block()
                data = self._data
            elif pos + len(line) - self._block_start > max_frame:
                # up to the line's end, not its terminator: a CRLF cut after the CR is a
                # 1-byte terminator now and a 2-byte one whole; the verdict must not differ
                self.alerts.append(
                    OversizedFrame(kind="frame", limit=max_frame, byte_offset=self._block_start)
                )
                self._drop_block()
                data = self._data
            else:
                if careful and REPLACEMENT_BYTES in line:
                    self._report_literals(line, pos)
                if line.startswith(b"data: "):
                    if not data:
                        self._data_off = pos + 6
                    try:
                        data.append(line[6:].decode())
                    except UnicodeDecodeError:
                        data.append(self._decode_slow(line[6:], pos + 6))
                else:
                    self._field(line, pos)
                    data = self._data
            pos = end
        return pos

    def _field(self, line: bytes, pos: int) -> None:
        try:
            text = line.decode()
        except UnicodeDecodeError:
            text = self._decode_slow(line, pos)
        if text[0] == ":":
            return  # comment
        colon = text.find(":")
        skip = 0
        if colon < 0:
            name, value = text, ""
        else:
            name = text[:colon]
            skip = 2 if text[colon + 1 : colon + 2] == " " else 1
            value = text[colon + skip :]
        if name == "data":
            if not self._data:
                # "data" is ASCII, so the str index of the value is its byte index too
                self._data_off = pos + (len(line) if colon < 0 else colon + skip)
            self._data.append(value)
        elif name == "event":
            self._event_type = value
        elif name == "id":
            if "\x00" not in value:
                self._last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            # beyond int-from-str's digit limit it is unusable anyway: ignore it
            with contextlib.suppress(ValueError):
                self._retry = int(value)

    def _decode_slow(self, raw: bytes, pos: int) -> str:
        text, bad = decode_replacing(raw)
        index = self.event_count
        for rel in bad:
            self.alerts.append(
                ReplacementChar(
                    cause=ReplacementChar.INVALID_UTF8, byte_offset=pos + rel, event_index=index
                )
            )
        return text

    def _report_literals(self, line: bytes, pos: int) -> None:
        index = self.event_count
        for rel in literal_offsets(line):
            self.alerts.append(
                ReplacementChar(
                    cause=ReplacementChar.UPSTREAM_LITERAL, byte_offset=pos + rel, event_index=index
                )
            )
