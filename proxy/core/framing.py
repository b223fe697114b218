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
from itertools import accumulate, repeat
from operator import add

from proxy.core.alerts import Alert, OversizedFrame, ReplacementChar, UnterminatedFrame
from proxy.core.events import SSEEvent
from proxy.core.utf8 import REPLACEMENT_BYTES, decode_replacing, literal_offsets

__all__ = [
    "DEFAULT_LIMIT",
    "BatchCallback",
    "DataCallback",
    "EventStreamParser",
    "batch_offsets",
    "escape_preview",
]

DEFAULT_LIMIT = 1 << 20
_BOM = b"\xef\xbb\xbf"
_LINE_END = re.compile(rb"\r\n|\r|\n")
_PREVIEW_BYTES = 48

# (event type, data, event index, stream offset of the data): what dialects consume
DataCallback = Callable[[str, str, int, int], None]
# (payloads, index of the first, stream offset of the first frame, bytes per frame besides
# its payload): a run of single-line `data: X` frames of type "message", each payload 6
# bytes into its frame (see batch_offsets). The dialect takes the whole run and returns
# True only if every payload is valid UTF-8 without U+FFFD; on False nothing may have
# changed, and the framer dispatches the frames one by one instead.
BatchCallback = Callable[[list[bytes], int, int, int], bool]


def batch_offsets(payloads: list[bytes], pos: int, extra: int) -> list[int]:
    """Frame start offsets of a batch (and the offset after it): only paid for when needed."""
    return list(accumulate(map(add, map(len, payloads), repeat(extra)), initial=pos))


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
        "_on_batch",
        "_on_data",
        "_pending",
        "_pending_len",
        "_retry",
        "_skip_lf",
        "_track_frames",
        "alerts",
        "event_count",
    )

    def __init__(
        self,
        on_data: DataCallback,
        alerts: list[Alert],
        *,
        on_batch: BatchCallback | None = None,
        events: list[SSEEvent] | None = None,
        frame_ends: bool = True,
        max_line: int = DEFAULT_LIMIT,
        max_frame: int = DEFAULT_LIMIT,
    ) -> None:
        self._on_data = on_data
        self._on_batch = on_batch
        self._events = events
        self._track_frames = frame_ends
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

    def set_callbacks(self, on_data: DataCallback, on_batch: BatchCallback | None) -> None:
        """Where dispatched events go from now on (the reassembler's dialect, once known)."""
        self._on_data = on_data
        self._on_batch = on_batch

    def take_frame_ends(self) -> list[int]:
        """Offsets just after each blank line seen since the last call (if tracked)."""
        ends = self._frame_ends
        if not self._track_frames:
            ends.clear()
            return ends
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

        # Membership tests are memchr scans; counting is left to the splits where it can be.
        has_cr = b"\r" in chunk
        if not has_cr and b"\n" not in chunk:
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
        counts = self._counts

        if not has_cr:
            lines = buf.split(b"\n")
            rest = lines.pop()
            counts[0] += len(lines)
            pos = self._run(lines, start, b"\n", start + len(buf) - len(rest))
        elif b"\n" not in buf:
            lines = buf.split(b"\r")
            rest = lines.pop()
            counts[2] += len(lines)
            pos = self._run(lines, start, b"\r", start + len(buf) - len(rest))
            self._skip_lf = not rest
        else:
            # bytes.splitlines ends lines at CR, LF and CRLF alike (one single-byte scan);
            # the lines are all CRLF-ended exactly when they account for 2 bytes each.
            lines = buf.splitlines()
            rest = b"" if buf[-1] == 0x0A else lines.pop()
            done = len(buf) - len(rest)
            if buf[-1] != 0x0D and sum(map(len, lines)) + 2 * len(lines) == done:
                counts[1] += len(lines)
                pos = self._run(lines, start, b"\r\n", start + done)
            else:
                n_cr = buf.count(b"\r")
                n_lf = buf.count(b"\n")
                n_crlf = buf.count(b"\r\n")
                counts[0] += n_lf - n_crlf
                counts[1] += n_crlf
                counts[2] += n_cr - n_crlf
                pos = start
                last = 0
                for m in _LINE_END.finditer(buf):
                    pos = self._lines([buf[last : m.start()]], pos, m.end() - m.start())
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

    def close(self, *, report: bool = True) -> None:
        """End of stream: a partial line or block is discarded, as the spec says, and
        reported (unless ``report`` is false: the stream was abandoned, not ended)."""
        if self._bom_buf:
            held, self._bom_buf = self._bom_buf, None
            self._top_up_head(held)
            self._hold(held)
        self._bom_buf = None
        end = self._offset + self._pending_len
        if report and (end > self._block_start or self._line_overflow):
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

    def _run(self, lines: list[bytes], pos: int, sep: bytes, done: int) -> int:
        """Process complete ``lines`` (all ended by ``sep``) from stream offset ``pos``.

        The common case, a run of single-line ``data: X`` frames, is recognised and
        dispatched with C-level operations over the whole run (:meth:`_batch`); the
        ``event: E`` + ``data: X`` shape dispatches frame by frame; anything else (other
        fields, comments, multi-line data, a block begun in an earlier read, invalid
        UTF-8, an encoded U+FFFD, a line over a limit) goes through :meth:`_lines`, the
        one implementation of the field rules. All paths give the same events. ``done`` is
        the stream offset just after the last of ``lines``.
        """
        seplen = len(sep)
        i = 0
        n = len(lines)
        if self._block_start != pos:
            # Finish the block begun in an earlier read, up to its blank line.
            try:
                i = lines.index(b"") + 1
            except ValueError:
                return self._lines(lines, pos, seplen)
            pos = self._lines(lines[:i], pos, seplen)
        pairs = (n - i) >> 1
        if pairs > 1 and self._on_batch is not None:
            # The batch ends where the lines end, or before one leftover line.
            end = done if (n - i) & 1 == 0 else done - len(lines[-1]) - seplen
            end = self._batch(lines, i, pairs, pos, end, seplen)
            if end >= 0:
                pos = end
                i += 2 * pairs
        if i < n:
            pos = self._frames(lines, i, pos, seplen)
        return pos

    def _batch(
        self, lines: list[bytes], i: int, pairs: int, pos: int, end: int, seplen: int
    ) -> int:
        """Dispatch the ``pairs`` frames from ``lines[i]`` (stream ``pos`` to ``end``) when
        each is one ``data:`` line followed by its blank line and the dialect takes the run
        whole; else -1 and nothing done."""
        stop = i + 2 * pairs
        if any(lines[i + 1 : stop : 2]):
            return -1  # not every other line is blank
        evens = lines[i:stop:2]
        if not all(map(bytes.startswith, evens, repeat(b"data: "))):
            return -1
        if end - pos > min(self._max_line, self._max_frame - 2 * seplen) and max(
            map(len, evens)
        ) > min(self._max_line, self._max_frame - 2 * seplen):
            return -1
        payloads = [line[6:] for line in evens]
        index = self.event_count
        extra = 6 + 2 * seplen
        assert self._on_batch is not None
        if not self._on_batch(payloads, index, pos, extra):
            return -1  # the dialect wants them one by one (invalid UTF-8, U+FFFD, odd shapes)
        self.event_count = index + pairs
        if self._events is not None or self._track_frames:
            starts = batch_offsets(payloads, pos, extra)
            if self._events is not None:
                self._events.extend(
                    map(
                        tuple.__new__,
                        repeat(SSEEvent, pairs),
                        zip(
                            repeat("message", pairs),
                            map(bytes.decode, payloads),
                            repeat(self._last_id, pairs),
                            repeat(None, pairs),
                            range(index, index + pairs),
                            starts,
                            strict=False,
                        ),
                    )
                )
            if self._track_frames:
                del starts[0]
                self._frame_ends.extend(starts)
        self._block_start = end
        return end

    def _frames(self, lines: list[bytes], i: int, pos: int, seplen: int) -> int:
        """Lines from ``lines[i]`` on, at a block start: the two common shapes dispatch
        straight from their lines, the rest goes through :meth:`_lines` frame by frame."""
        n = len(lines)
        events = self._events
        on_data = self._on_data
        frame_ends = self._frame_ends
        max_line = self._max_line
        max_frame = self._max_frame - 2 * seplen
        while i < n:
            line = lines[i]
            data = None
            if not line and self._block_start == pos:
                pos += seplen  # a blank line ending an empty block: a frame with no event
                frame_ends.append(pos)
                self._block_start = pos
                i += 1
                continue
            if self._block_start == pos and i + 1 < n:
                if not lines[i + 1] and line.startswith(b"data: "):
                    if len(line) <= max_line and len(line) <= max_frame:
                        try:
                            data = line[6:].decode()
                        except UnicodeDecodeError:
                            data = None
                        etype = "message"
                        data_off = pos + 6
                        size = len(line) + 2 * seplen
                        step = 2
                elif i + 2 < n and not lines[i + 2] and line.startswith(b"event: "):
                    second = lines[i + 1]
                    if (
                        second.startswith(b"data: ")
                        and len(line) <= max_line
                        and len(second) <= max_line
                        and len(line) + len(second) + seplen <= max_frame
                    ):
                        try:
                            etype = line[7:].decode() or "message"
                            data = second[6:].decode()
                        except UnicodeDecodeError:
                            data = None
                        data_off = pos + len(line) + seplen + 6
                        size = len(line) + len(second) + 3 * seplen
                        step = 3
            if data is not None and "\ufffd" not in data and "\ufffd" not in etype:
                index = self.event_count
                self.event_count = index + 1
                if events is not None:
                    events.append(SSEEvent(etype, data, self._last_id, None, index, pos))
                on_data(etype, data, index, data_off)
                pos += size
                frame_ends.append(pos)
                self._block_start = pos
                i += step
                continue
            try:
                j = lines.index(b"", i) + 1
            except ValueError:
                j = n
            pos = self._lines(lines[i:j], pos, seplen)
            i = j
        return pos

    def _lines(self, lines: list[bytes], pos: int, seplen: int) -> int:
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
            elif line.startswith(b"data: "):
                if not data:
                    self._data_off = pos + 6
                try:
                    value = line[6:].decode()
                except UnicodeDecodeError:
                    value = self._decode_slow(line[6:], pos + 6)
                else:
                    if "\ufffd" in value:  # valid UTF-8, so upstream sent it encoded
                        self._report_literals(line, pos)
                data.append(value)
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
        else:
            if "\ufffd" in text:
                self._report_literals(line, pos)
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
        """Decode a line that holds invalid UTF-8: each bad subpart, and each encoded
        U+FFFD beside them, reported in stream order."""
        text, bad = decode_replacing(raw)
        found = [(pos + rel, ReplacementChar.INVALID_UTF8) for rel in bad]
        if REPLACEMENT_BYTES in raw:
            found += [(pos + rel, ReplacementChar.UPSTREAM_LITERAL) for rel in literal_offsets(raw)]
            found.sort()
        index = self.event_count
        for offset, cause in found:
            self.alerts.append(ReplacementChar(cause=cause, byte_offset=offset, event_index=index))
        return text

    def _report_literals(self, line: bytes, pos: int) -> None:
        index = self.event_count
        for rel in literal_offsets(line):
            self.alerts.append(
                ReplacementChar(
                    cause=ReplacementChar.UPSTREAM_LITERAL, byte_offset=pos + rel, event_index=index
                )
            )
