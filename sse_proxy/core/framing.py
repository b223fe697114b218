"""The WHATWG event-stream parser over bytes: lines, fields, dispatch, with stream offsets.

One state machine, stated once. Its state is in two parts.

*Stream state* (where the bytes are):

- ``START``: before the first three bytes are known. A stream may begin with one UTF-8
  BOM, which is stripped (its bytes still count in every offset). Up to two bytes that
  could still begin a BOM are held until the next read decides: a BOM split across reads
  is a BOM.
- ``LINE``: inside a line. Bytes up to the next CR or LF are held (as a list of reads, so
  a long line costs linear time) and nothing is decided before the line is complete.
- ``AFTER_CR``: the last read ended with a CR. The CR ended a line at once (no event waits
  for the next read), but a LF that starts the next read is that CR's other half: together
  they were one CRLF, so the LF ends no second line. If the CR ended a blank line, where
  the frame ends is not known yet either: after the CR, or after a LF still to come. That
  end is *tentative* (:attr:`EventStreamParser.tentative_end`) until the next byte (or the
  end of the stream) settles it, and only then is it reported among the frame ends. This
  is the one place that knows it: the write planners never re-derive it.
- ``SKIP``: the rest of an oversized line is being discarded, up to its line ending.

*Block state* (the event being built, WHATWG's buffers): data lines, event type, retry,
the last event ID (which persists across events), where the block began, and whether it
was dropped for being oversized. Lines are processed by the field rules in
:meth:`EventStreamParser._lines`, the one statement of them: a comment, a field with or
without a colon, one leading space stripped, ``data`` appended, ``event``, ``id`` unless it
holds NUL, ``retry`` only of ASCII digits, unknown fields ignored, and a blank line
dispatches (only if some data was seen).

Fast paths may only *skip* work, never decide differently: a run of blank lines, of
comments, of ``data:`` lines, or of ``data: X`` + blank frames is recognised with C-level
operations over the whole run, validated by the framer itself (every byte valid UTF-8, no
U+FFFD, within the limits) and then has exactly the effect the field rules would have;
anything else in the run sends it through :meth:`EventStreamParser._lines`. A dialect
never vouches for framing or for UTF-8.

Every position is a byte offset into the upstream stream. Memory is bounded: a partial
line past ``max_line`` is dropped with an alert, so is a frame past ``max_frame``; the
shell still forwards those bytes. No exceptions for upstream bytes: anomalies are alerts.
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Callable, Sequence
from itertools import accumulate, chain, count, islice, repeat
from operator import add

from sse_proxy.core.alerts import Alert, OversizedFrame, ReplacementChar, UnterminatedFrame
from sse_proxy.core.events import SSEEvent
from sse_proxy.core.utf8 import REPLACEMENT, replacement_runs

__all__ = [
    "DEFAULT_LIMIT",
    "BatchCallback",
    "DataCallback",
    "EventStreamParser",
    "OneCallback",
    "batch_offsets",
    "escape_preview",
]

DEFAULT_LIMIT = 1 << 20
_BOM = b"\xef\xbb\xbf"
_PREVIEW_BYTES = 48
_CR = 0x0D
_LF = 0x0A

# (event type, data, event index, stream offset of the data): what dialects consume
DataCallback = Callable[[str, str, int, int], None]
# (payloads, index of the first, stream offset of the first frame, bytes per frame besides
# its payload): a run of single-line `data: X` frames of type "message", each payload 6
# bytes into its frame (see batch_offsets). The framer has checked that every payload is
# valid UTF-8 without U+FFFD. The dialect takes as many of the run's first events as it
# can whole and returns how many (0: none, the run untouched; an int, never a bool), and
# the framer hands it the others one by one.
BatchCallback = Callable[[list[bytes], int, int, int], int]
# (payload, event index, stream offset of the frame): one such frame in a read of its own,
# how tokens arrive. The contract of a batch of one (extra 8), without building the batch.
OneCallback = Callable[[bytes, int, int], bool]


def batch_offsets(payloads: list[bytes], pos: int, extra: int) -> list[int]:
    """Frame start offsets of a batch (and the offset after it): only paid for when needed."""
    return list(accumulate(map(add, map(len, payloads), repeat(extra)), initial=pos))


def escape_preview(raw: bytes, limit: int = _PREVIEW_BYTES) -> str:
    """A short, log-safe rendering of raw bytes: control characters and bad bytes escaped."""
    text = raw[:limit].decode("utf-8", "backslashreplace")
    shown = repr(text)[1:-1]
    return shown + ("…" if len(raw) > limit else "")


class _Runs:
    """Regular expressions that find where a run of look-alike lines ends, for lines that
    all end with ``sep``; ``[^\\r\\n]`` cannot overrun a line, so no backtracking."""

    __slots__ = (
        "blanks",
        "comments",
        "data_lines",
        "data_prefix",
        "frames",
        "sep",
        "sep_str",
        "seplen",
        "typed_frames",
    )

    def __init__(self, sep: bytes) -> None:
        self.sep = sep
        self.sep_str = sep.decode()
        self.seplen = len(sep)
        line = rb"[^\r\n]*" + sep
        self.blanks = re.compile(b"(?:" + sep + b")+")
        self.comments = re.compile(b"(?::" + line + b")+")
        self.data_lines = re.compile(b"(?:data:" + line + b")+")
        self.frames = re.compile(b"(?:data: " + line + sep + b")+")
        self.typed_frames = re.compile(b"(?:event: " + line + b"data: " + line + sep + b")+")
        last = self.sep_str[-1]
        self.data_prefix = re.compile(f"(?:^|(?<={last}))data: ?")


_LF_RUNS = _Runs(b"\n")
_CR_RUNS = _Runs(b"\r")
_CRLF_RUNS = _Runs(b"\r\n")


def _byte_index(raw: bytes, text: str, j: int) -> int:
    """Where character ``j`` of ``text`` (``raw`` decoded with replacement) starts in ``raw``."""
    if REPLACEMENT not in text[:j]:
        return len(text[:j].encode())
    lo, hi = 0, len(raw)  # the largest b whose decoded prefix is j characters long
    while lo < hi:
        mid = (lo + hi + 1) >> 1
        if len(raw[:mid].decode("utf-8", "replace")) <= j:
            lo = mid
        else:
            hi = mid - 1
    return lo


class EventStreamParser:
    """Incremental event-stream parser; ``feed`` bytes, get callbacks and ``alerts``.

    Alerts are appended to the list passed in (the reassembler drains it after each call);
    each dispatched event goes to ``on_data`` and, when an ``events`` list is given, is
    appended to it as an :class:`SSEEvent`. Only ``feed`` and ``close`` are meant to be called.
    """

    __slots__ = (
        "_after_cr",
        "_at_rest",
        "_block_dropped",
        "_block_start",
        "_bom_buf",
        "_comment_epoch",
        "_comments_since",
        "_counts",
        "_data",
        "_data_map",
        "_data_off",
        "_event_type",
        "_events",
        "_frame_ends",
        "_general_events",
        "_head",
        "_last_id",
        "_limit",
        "_max_frame",
        "_max_line",
        "_offset",
        "_on_batch",
        "_on_data",
        "_on_one",
        "_pending",
        "_pending_len",
        "_retry",
        "_skipping",
        "_track_frames",
        "alerts",
        "comments",
        "event_count",
        "last_data",
        "tentative_end",
    )

    def __init__(
        self,
        on_data: DataCallback,
        alerts: list[Alert],
        *,
        on_batch: BatchCallback | None = None,
        on_one: OneCallback | None = None,
        events: list[SSEEvent] | None = None,
        frame_ends: bool = True,
        max_line: int = DEFAULT_LIMIT,
        max_frame: int = DEFAULT_LIMIT,
    ) -> None:
        self._on_data = on_data
        self._on_batch = on_batch
        self._on_one = on_one
        self._events = events
        self._track_frames = frame_ends
        self.alerts = alerts
        self._max_line = max_line
        self._max_frame = max_frame
        self._limit = min(max_line, max_frame)  # a line under both needs neither check
        self.event_count = 0
        self.comments = 0
        """Comment lines seen (``: keep-alive``): counted where they are skipped anyway."""
        # the comments since the last dispatched event, and that event's count (read
        # lazily: no event path resets anything)
        self._comment_epoch = -1
        self._comments_since = 0
        # stream state
        self._bom_buf: bytes | None = b""  # START: bytes that may begin a BOM; None after
        self._offset = 0  # stream offset of the first byte not yet split into lines
        self._pending: list[bytes] = []  # LINE: the reads making up the partial line
        self._pending_len = 0
        self._after_cr = False  # AFTER_CR: the last read ended with a line-ending CR
        self.tentative_end: int | None = None  # AFTER_CR at a blank line: frame end, unless LF
        self._skipping = False  # SKIP: discarding the rest of an oversized line
        self._counts = [0, 0, 0]  # LF, CRLF, bare CR (the general path's lines)
        # events the general path dispatched: the others are the fast path's, two LF-ended
        # lines each (counted from event_count when asked, not at every token)
        self._general_events = 0
        self._head = b""  # the first bytes of the current block, for the unterminated preview
        self._frame_ends: list[int] = []
        # block state
        self._data: list[str] = []
        self._data_off = 0
        # where each data value came from: (stream offset, raw bytes, run separator or b"")
        self._data_map: list[tuple[int, bytes, bytes]] = []
        # the last dispatched event's values and their origins, when the general path
        # dispatched it (see data_offset); None after a fast path's clean one-line data
        self.last_data: tuple[list[str], list[tuple[int, bytes, bytes]]] | None = None
        self._event_type = ""
        self._retry: int | None = None
        self._last_id: str | None = None
        self._block_start = 0
        self._block_dropped = False
        # between frames with nothing held (no partial line, no CR to settle, no BOM to
        # decide): where a read holding exactly one frame can be taken whole. Not at the
        # start: the first read settles START (and its BOM) on the general path
        self._at_rest = False

    # -- public -------------------------------------------------------------------------

    @property
    def offset(self) -> int:
        """Bytes consumed so far, including a partial line and a held-back BOM prefix."""
        held = len(self._bom_buf) if self._bom_buf else 0
        return self._offset + self._pending_len + held

    @property
    def line_endings(self) -> dict[str, int]:
        lf, crlf, cr = self._counts
        lf += 2 * (self.event_count - self._general_events)
        return {"lf": lf, "crlf": crlf, "cr": cr}

    @property
    def comments_since_event(self) -> int:
        """Comment lines since the last dispatched event (all of them, before the first)."""
        return self._comments_since if self._comment_epoch == self.event_count else 0

    def _comment(self, n: int) -> None:
        if self._comment_epoch != self.event_count:
            self._comment_epoch = self.event_count
            self._comments_since = 0
        self._comments_since += n
        self.comments += n

    def set_callbacks(
        self,
        on_data: DataCallback,
        on_batch: BatchCallback | None,
        on_one: OneCallback | None = None,
    ) -> None:
        """Where dispatched events go from now on (the reassembler's dialect, once known)."""
        self._on_data = on_data
        self._on_batch = on_batch
        self._on_one = on_one

    def frame_info(self) -> tuple[str | None, int | None]:
        """During a dispatch: the last event ID in force and the block's own ``retry`` (for
        a dialect whose rules are about them: MCP's priming events and resumption)."""
        return self._last_id, self._retry

    def take_frame_ends(self) -> list[int]:
        """Settled frame ends (offsets just after each blank line) since the last call."""
        ends = self._frame_ends
        if not self._track_frames:
            ends.clear()
            return ends
        if ends:
            self._frame_ends = []
        return ends

    def data_offset(self, data: str, offset: int, i: int) -> int:
        """The stream offset of character ``i`` of the last dispatched event's ``data``
        (which starts at ``offset``): across the LF that joins data lines (it stands for a
        line ending and a ``data:`` prefix) and U+FFFD that stand for invalid bytes.

        For a dialect that must point at something inside a payload (a JSON escape). Not
        on the hot path: it walks the event's values, and decodes raw bytes only where a
        U+FFFD makes characters and bytes disagree.
        """
        last = self.last_data
        if last is None:
            return offset + len(data[:i].encode())
        start = 0
        for value, (at, raw, sep) in zip(*last, strict=True):
            if i <= start + len(value):
                j = i - start
                if not sep:
                    return at + _byte_index(raw, value, j)
                pos = at  # a run of data lines taken whole: find the line
                for line in raw.split(sep)[:-1]:
                    skip = 6 if line[5:6] == b" " else 5
                    text = line[skip:].decode()  # the run is clean UTF-8
                    if j <= len(text):
                        return pos + skip + len(text[:j].encode())
                    j -= len(text) + 1
                    pos += len(line) + len(sep)
                return pos
            start += len(value) + 1
        return offset + len(data[:i].encode())

    def feed(self, chunk: bytes) -> bool:
        """Split ``chunk`` into lines and frames; True if it was taken whole: clean frames
        the field rules would take as they are, and nothing else.

        A read that is one `data: X` frame, LF-ended, with nothing held from earlier reads
        is how tokens arrive; a read of several such frames is how they arrive to a reader
        that fell behind (:meth:`_whole_frames`). Everything else goes through the state
        machine, after which ``_at_rest`` says whether the next read may take a shortcut.
        """
        n = len(chunk)
        # (Slices, indexing and `in`, not find() or startswith(): those parse their
        # arguments as a tuple on every call, at every token. An int operand of `in` is a
        # memchr, cheaper than a 1-byte substring search.)
        if (
            self._at_rest
            and n > 7
            and chunk[-1] == _LF
            and chunk[-2] == _LF
            and chunk[:6] == b"data: "
            and n - 2 <= self._limit
            and _CR not in (payload := chunk[6:-2])
        ):
            if _LF in payload:  # several frames (a read that fell behind), or not frames
                if self._whole_frames(chunk, payload):
                    return True
                return self._general(chunk)
            text = None  # ASCII is valid UTF-8 without U+FFFD
            if not payload.isascii():
                try:
                    text = payload.decode()
                except UnicodeDecodeError:
                    text = REPLACEMENT
            if text is None or REPLACEMENT not in text:  # else the field rules locate it
                pos = self._offset
                index = self.event_count
                self.event_count = index + 1
                self.last_data = None
                end = pos + n
                self._offset = self._block_start = end
                if self._events is not None:
                    if text is None:
                        text = payload.decode()
                    self._events.append(SSEEvent("message", text, self._last_id, None, index, pos))
                if self._track_frames:
                    self._frame_ends.append(end)
                on_one = self._on_one
                if on_one is None or not on_one(payload, index, pos):
                    self._on_data("message", text or payload.decode(), index, pos + 6)
                return True
        return self._general(chunk)

    def _general(self, chunk: bytes) -> bool:
        """The state machine, for a read no shortcut took; it says whether the next may."""
        before = self.event_count
        self._feed(chunk)
        self._general_events += self.event_count - before
        self._at_rest = self._block_start == self._offset and not (
            self._pending or self._after_cr or self._skipping or self._bom_buf is not None
        )
        return False

    def _whole_frames(self, chunk: bytes, body: bytes) -> bool:
        """A read at rest that is nothing but LF-ended ``data: X`` frames, taken whole:
        how a stream arrives once its reader falls behind (tens of tokens per read).

        :meth:`feed` saw that ``chunk`` starts with ``data: ``, ends with a blank line and
        holds no CR; here its LFs are counted. Each of the ``k`` occurrences of
        ``LF LF data: `` (they cannot overlap) and the final blank line hold two LFs, so
        when that is every LF, the read is exactly ``k + 1`` frames of one ``data: `` line
        each, with ``body`` their payloads joined by ``LF LF data: ``: two C-level counts
        and one split, instead of a list of lines and a list of payloads. The field rules
        would take it as it is if it is valid UTF-8 without U+FFFD and within the limits
        (:meth:`feed` checked the whole read against the smaller one). False: not such a
        read, nothing done.
        """
        k = body.count(b"\n\ndata: ")
        if 2 * k + 2 != chunk.count(_LF):
            return False
        text = None  # ASCII is valid UTF-8 without U+FFFD
        if not chunk.isascii():
            try:
                text = chunk.decode()
            except UnicodeDecodeError:
                return False
            if REPLACEMENT in text:
                return False
        payloads = body.split(b"\n\ndata: ")
        pos = self._offset
        self.last_data = None
        self._offset = self._block_start = pos + len(chunk)
        self._dispatch_run(
            payloads, lambda: (text or chunk.decode())[6:-2].split("\n\ndata: "), pos, 8
        )
        return True

    def _dispatch_run(
        self, payloads: list[bytes], datas: Callable[[], list[str]], pos: int, extra: int
    ) -> None:
        """Dispatch a run of single-line ``data: X`` frames from stream offset ``pos``, their
        payloads checked clean (``datas``: the same decoded, asked for only if needed;
        ``extra``: each frame's bytes besides its payload). The dialect takes as many of
        them as it can whole (:data:`BatchCallback`); the rest go one by one, except that
        what follows the first of them (a role chunk that opens a stream), and what follows
        the one that decided the stream's dialect, is offered to it whole again."""
        n = len(payloads)
        index = self.event_count
        on_batch = self._on_batch
        taken = on_batch(payloads, index, pos, extra) if on_batch is not None else 0
        self.event_count = index + taken
        events = self._events
        if taken == n and events is None and not self._track_frames:
            return
        starts = batch_offsets(payloads, pos, extra)
        if self._track_frames:
            self._frame_ends.extend(islice(starts, 1, None))
        texts = datas() if events is not None or taken < n else []
        if events is not None and taken:
            self._run_events(texts[:taken] if taken < n else texts, starts, index)
        if taken == n:
            return
        k = taken
        again = True  # offer what follows the first odd event whole (once: linear)
        while k < n:
            data = texts[k]
            self.event_count = index + k + 1
            if events is not None:
                events.append(SSEEvent("message", data, self._last_id, None, index + k, starts[k]))
            self._on_data("message", data, index + k, starts[k] + 6)  # may decide the dialect
            k += 1
            if k < n and (again or self._on_batch is not on_batch):  # the rest, whole
                again = False
                on_batch = self._on_batch
                more = on_batch(payloads[k:], index + k, starts[k], extra) if on_batch else 0
                if more:
                    self.event_count = index + k + more
                    if events is not None:
                        self._run_events(texts[k : k + more], starts[k:], index + k)
                    k += more

    def _run_events(self, texts: list[str], starts: list[int], index: int) -> None:
        """The events of ``texts`` (event ``index`` on, starting at ``starts``, which may
        run on past them), built at C speed: as many as there are texts."""
        assert self._events is not None
        self._events.extend(
            map(
                tuple.__new__,
                repeat(SSEEvent),
                zip(
                    repeat("message"),
                    texts,
                    repeat(self._last_id),
                    repeat(None),
                    count(index),
                    starts,
                    strict=False,
                ),
            )
        )

    def _feed(self, chunk: bytes) -> None:
        if self._bom_buf is not None:  # START
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
        if self._after_cr:  # AFTER_CR: settle the CR's line ending and frame end
            self._after_cr = False
            tentative, self.tentative_end = self.tentative_end, None
            if chunk[0] == _LF:
                self._counts[2] -= 1
                self._counts[1] += 1
                self._offset += 1
                if tentative is not None:
                    self._block_start = self._offset
                    self._frame_ends.append(self._offset)
                else:
                    self._top_up_head(b"\n")  # the LF is part of the block's bytes
                chunk = chunk[1:]
                if not chunk:
                    return
            elif tentative is not None:
                self._frame_ends.append(tentative)
        if self._skipping:  # SKIP
            chunk = self._skip_line(chunk)
            if not chunk:
                return
        # LINE. Membership tests are memchr scans; counting is left to the splits. (Int
        # operands: `bytes in bytes` first tries its operand as an int, and the TypeError
        # it formats and clears costs more than the scan.)
        has_cr = _CR in chunk
        if not has_cr and _LF not in chunk:
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
            pos = self._run(lines, start, buf, _LF_RUNS)
        elif _LF not in buf:
            lines = buf.split(b"\r")
            rest = lines.pop()
            counts[2] += len(lines)
            pos = self._run(lines, start, buf, _CR_RUNS)
        else:
            # bytes.splitlines ends lines at CR, LF and CRLF alike (one single-byte scan);
            # the lines are all CRLF-ended exactly when they account for 2 bytes each.
            lines = buf.splitlines()
            rest = b"" if buf[-1] == _LF else lines.pop()
            done = len(buf) - len(rest)
            if buf[-1] != _CR and sum(map(len, lines)) + 2 * len(lines) == done:
                counts[1] += len(lines)
                pos = self._run(lines, start, buf, _CRLF_RUNS)
            else:
                pos, rest = self._mixed(buf, start)
        self._offset = pos
        rel = self._block_start - start
        if rel >= 0:
            self._head = buf[rel : rel + _PREVIEW_BYTES + 1]
        else:
            self._top_up_head(chunk)  # the held part of buf is in the head already
        if rest:
            self._hold(rest)
        elif buf[-1] == _CR:  # AFTER_CR
            self._after_cr = True
            if self._block_start == pos:  # the CR ended a blank line: where is the frame end?
                self.tentative_end = pos
                ends = self._frame_ends
                if ends and ends[-1] == pos:
                    ends.pop()

    def close(self, *, report: bool = True) -> None:
        """End of stream: a tentative frame end is settled where it is; a partial line or
        block is discarded, as the spec says, and reported (unless ``report`` is false:
        the stream was abandoned, not ended)."""
        self._at_rest = False
        if self.tentative_end is not None:
            self._frame_ends.append(self.tentative_end)
            self.tentative_end = None
        self._after_cr = False
        if self._bom_buf:
            held, self._bom_buf = self._bom_buf, None
            self._top_up_head(held)
            self._hold(held)
        self._bom_buf = None
        end = self._offset + self._pending_len
        if report and (end > self._block_start or self._skipping):
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

    # -- stream state -------------------------------------------------------------------

    def _top_up_head(self, piece: bytes) -> None:
        if len(self._head) <= _PREVIEW_BYTES:
            self._head += piece[: _PREVIEW_BYTES + 1 - len(self._head)]

    def _hold(self, piece: bytes) -> None:
        """Keep a partial line; past ``max_line`` drop it and skip to its end (SKIP)."""
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
            self._skipping = True
            self._drop_block()

    def _skip_line(self, chunk: bytes) -> bytes:
        """Discard the rest of an oversized line, up to and including its line ending."""
        lf = chunk.find(b"\n")
        cr = chunk.find(b"\r")
        if lf < 0 and cr < 0:
            self._top_up_head(chunk)  # the preview must not depend on where reads were cut
            self._offset += len(chunk)
            return b""
        self._skipping = False
        if cr < 0 or 0 <= lf < cr:
            self._counts[0] += 1
            cut = lf + 1
        elif chunk[cr + 1 : cr + 2] == b"\n":
            self._counts[1] += 1
            cut = cr + 2
        else:
            self._counts[2] += 1
            cut = cr + 1
            self._after_cr = cut == len(chunk)  # not a blank line: no frame end to settle
        self._top_up_head(chunk[:cut])
        self._offset += cut
        return chunk[cut:]

    def _mixed(self, buf: bytes, pos: int) -> tuple[int, bytes]:
        """Lines with mixed endings, one at a time through the field rules; returns the
        offset after them and the partial line left over."""
        lines = buf.splitlines(keepends=True)
        rest = b"" if buf[-1] in b"\r\n" else lines.pop()
        crlf = buf.count(b"\r\n")
        counts = self._counts
        counts[0] += buf.count(b"\n") - crlf
        counts[1] += crlf
        counts[2] += buf.count(b"\r") - crlf
        field_rules = self._lines
        for raw in lines:
            content = raw.rstrip(b"\r\n")  # a line holds no CR or LF: exactly its ending
            pos = field_rules((content,), pos, len(raw) - len(content))
        return pos, rest

    # -- block state: the field rules ---------------------------------------------------

    def _drop_block(self) -> None:
        self._block_dropped = True
        self._data = []
        self._data_map = []

    def _run(self, lines: list[bytes], pos: int, buf: bytes, runs: _Runs) -> int:
        """Complete ``lines`` of ``buf`` (which starts at the stream offset ``pos``), each
        ended by ``runs.sep``.

        Runs that the fast paths recognise skip the per-line work; every other line goes
        through :meth:`_lines`. A run's extent is found with a regular expression over the
        bytes (C speed, and it stops where the run stops). Returns the offset after the lines.
        """
        base = pos
        seplen = runs.seplen
        i = 0
        n = len(lines)
        whole = True  # try a run to the end of the read once: more would cost O(n) each
        while i < n:
            line = lines[i]
            if self._block_start == pos:
                if not line:  # blank lines with nothing before them: frame ends, no events
                    m = runs.blanks.match(buf, pos - base)
                    assert m is not None
                    k = (m.end() - m.start()) // seplen
                    if self._track_frames:
                        self._frame_ends.extend(range(pos + seplen, pos + k * seplen + 1, seplen))
                    pos += k * seplen
                    self._block_start = pos
                    self._reset_block()
                    i += k
                    continue
                if i + 1 < n and not lines[i + 1] and line.startswith(b"data: "):
                    pos, i = self._frames(lines, i, pos, buf, base, runs, whole)
                    whole = False
                    continue
                if (
                    i + 2 < n
                    and not lines[i + 2]
                    and line.startswith(b"event: ")
                    and lines[i + 1].startswith(b"data: ")
                ):
                    pos, i = self._typed_frames(lines, i, pos, buf, base, runs, whole)
                    whole = False
                    continue
            if i + 1 < n and line[:1] == lines[i + 1][:1]:  # a run of look-alike lines?
                if line.startswith(b"data:") and lines[i + 1].startswith(b"data:"):
                    pos, i = self._data_run(lines, i, pos, buf, base, runs)
                    continue
                if line[:1] == b":":
                    pos, i = self._comment_run(lines, i, pos, buf, base, runs)
                    continue
            # Anything else: the field rules, up to and including the blank line that ends
            # this block (one call per block keeps the per-line cost in one tight loop).
            try:
                j = lines.index(b"", i) + 1
            except ValueError:
                j = n
            pos = self._lines(lines[i:j], pos, seplen)
            i = j
        return pos

    def _clean_region(self, region: bytes, pos: int) -> str | None:
        """``region`` (whole lines from stream offset ``pos``) decoded, if the field rules
        would take each of its lines as it is: valid UTF-8, no U+FFFD, no line or frame over
        its limit (checked conservatively: the region as a whole); else None."""
        if (
            self._block_dropped
            or len(region) > self._max_line
            or pos + len(region) - self._block_start > self._max_frame
        ):
            return None
        try:
            text = region.decode()
        except UnicodeDecodeError:
            return None
        # (a str search for one character is memchr-fast; the bytes search for EF BF BD
        # is several times slower on text full of multi-byte characters)
        return None if REPLACEMENT in text else text

    def _comment_run(
        self, lines: list[bytes], i: int, pos: int, buf: bytes, base: int, runs: _Runs
    ) -> tuple[int, int]:
        """Comment lines from ``lines[i]``: nothing to do when they are clean."""
        m = runs.comments.match(buf, pos - base)
        assert m is not None
        start, end = m.span()
        j = i + buf.count(runs.sep, start, end)
        if self._clean_region(buf[start:end], pos) is None:
            return self._lines(lines[i:j], pos, runs.seplen), j
        self._comment(j - i)
        return pos + end - start, j

    def _data_run(
        self, lines: list[bytes], i: int, pos: int, buf: bytes, base: int, runs: _Runs
    ) -> tuple[int, int]:
        """``data:`` lines from ``lines[i]`` within one block: their values join the data
        buffer, as one string (values joined by LF, as the dispatch will join them)."""
        m = runs.data_lines.match(buf, pos - base)
        assert m is not None
        start, end = m.span()
        j = i + buf.count(runs.sep, start, end)
        text = self._clean_region(buf[start:end], pos)
        if text is None:
            return self._lines(lines[i:j], pos, runs.seplen), j
        if not self._data:
            self._data_off = pos + (6 if buf[start + 5 : start + 6] == b" " else 5)
        values = runs.data_prefix.sub("", text)[: -runs.seplen]
        self._data.append(values if runs.sep == b"\n" else values.replace(runs.sep_str, "\n"))
        self._data_map.append((pos, buf[start:end], runs.sep))
        return pos + end - start, j

    def _frames(
        self,
        lines: list[bytes],
        i: int,
        pos: int,
        buf: bytes,
        base: int,
        runs: _Runs,
        whole: bool,
    ) -> tuple[int, int]:
        """A run of ``data: X`` + blank frames from ``lines[i]`` at a block start (at least
        one), dispatched whole; returns the offset and the index after the run.

        With ``whole`` (once per read) it first tries the rest of the read as one run;
        else, or if that fails, the scans stop at the run's end, so the cost is the run's.
        """
        seplen = runs.seplen
        n = len(lines)
        pairs = (n - i) >> 1
        evens: list[bytes] | None = None
        if pairs == 1:
            evens = [lines[i]]  # the caller saw it: one event per read, as tokens arrive
        elif whole:  # the usual read: nothing but such frames (one C-level pass each)
            evens = lines[i : i + 2 * pairs : 2]
            # every even line starts with `data: ` (the first one does): the lines hold no
            # LF, so in their LF-join each separator is followed by it (a count, not a
            # startswith call per line, whose argument parsing costs more than the scan)
            if any(lines[i + 1 :: 2]) or b"\n".join(evens).count(b"\ndata: ") != pairs - 1:
                evens = None
        if evens is None:  # a scan that stops where the run stops
            m = runs.frames.match(buf, pos - base)
            assert m is not None
            pairs = buf.count(runs.sep, *m.span()) >> 1
            evens = lines[i : i + 2 * pairs : 2]
        payloads = [line[6:] for line in evens]
        joined = b"\n".join(payloads)
        if len(joined) + 6 > self._limit and max(map(len, evens)) > self._limit:
            return self._lines_frames(lines, i, pairs, pos, seplen)
        try:
            text = joined.decode()
        except UnicodeDecodeError:
            return self._lines_frames(lines, i, pairs, pos, seplen)
        if REPLACEMENT in text:
            return self._lines_frames(lines, i, pairs, pos, seplen)
        self.last_data = None
        extra = 6 + 2 * seplen
        self._dispatch_run(payloads, lambda: text.split("\n"), pos, extra)
        pos += len(joined) - (pairs - 1) + pairs * extra
        self._block_start = pos
        return pos, i + 2 * pairs

    def _typed_frames(
        self,
        lines: list[bytes],
        i: int,
        pos: int,
        buf: bytes,
        base: int,
        runs: _Runs,
        whole: bool,
    ) -> tuple[int, int]:
        """A run of ``event: E`` + ``data: X`` + blank frames from ``lines[i]`` at a block
        start (Anthropic's and Responses' shape), dispatched one by one without the per-line
        field work; returns the offset and index after the run."""
        seplen = runs.seplen
        n = len(lines)
        k = (n - i) // 3
        if (
            k > 1
            and not (
                whole
                and not any(lines[i + 2 :: 3])
                # (each line of the run starts as it should: counted in the LF-joins, as in
                # _frames; the caller saw the first frame's two)
                and b"\n".join(lines[i + 1 : i + 3 * k : 3]).count(b"\ndata: ") == k - 1
                and b"\n".join(lines[i : i + 3 * k : 3]).count(b"\nevent: ") == k - 1
            )
        ):
            m = runs.typed_frames.match(buf, pos - base)
            assert m is not None
            k = buf.count(runs.sep, *m.span()) // 3
        heads = lines[i : i + 3 * k : 3]
        bodies = lines[i + 1 : i + 3 * k : 3]
        j = i + 3 * k
        types_raw = b"\n".join([h[7:] for h in heads])
        data_raw = b"\n".join([b[6:] for b in bodies])
        if len(types_raw) + len(data_raw) + 13 + seplen > self._limit:
            longest = max(map(len, chain(heads, bodies)))
            if longest > self._max_line or 2 * longest + seplen > self._max_frame:
                return self._lines(lines[i:j], pos, seplen), j
        try:
            types_text = types_raw.decode()
            data_text = data_raw.decode()
        except UnicodeDecodeError:
            return self._lines(lines[i:j], pos, seplen), j
        if REPLACEMENT in types_text or REPLACEMENT in data_text:
            return self._lines(lines[i:j], pos, seplen), j
        types = types_text.split("\n")
        datas = data_text.split("\n")
        if "" in types:
            types = [t or "message" for t in types]
        starts = list(
            accumulate(
                map(add, map(add, map(len, heads), map(len, bodies)), repeat(3 * seplen)),
                initial=pos,
            )
        )
        index = self.event_count
        if self._events is not None:
            self._events.extend(
                map(
                    tuple.__new__,
                    repeat(SSEEvent, k),
                    zip(types, datas, repeat(self._last_id), repeat(None), count(index), starts),
                )
            )
        # (a dialect detected on the first event swaps the callbacks; the old one forwards)
        self.last_data = None
        on_data = self._on_data
        skip = seplen + 6
        for start, head, etype, data in zip(starts, heads, types, datas, strict=False):
            on_data(etype, data, index, start + len(head) + skip)
            index += 1
        self.event_count = index
        pos = starts[-1]
        self._block_start = pos
        if self._track_frames:
            self._frame_ends.extend(islice(starts, 1, None))
        return pos, j

    def _lines_frames(
        self, lines: list[bytes], i: int, pairs: int, pos: int, seplen: int
    ) -> tuple[int, int]:
        """A run of frames the fast path cannot vouch for: the field rules take it all."""
        return self._lines(lines[i : i + 2 * pairs], pos, seplen), i + 2 * pairs

    def _reset_block(self) -> None:
        self._event_type = ""
        self._retry = None
        self._block_dropped = False

    def _lines(self, lines: Sequence[bytes], pos: int, seplen: int) -> int:
        """The field rules, line by line, from stream offset ``pos``; returns the offset after."""
        max_frame = self._max_frame
        max_line = self._max_line
        for line in lines:
            end = pos + len(line) + seplen
            if not line:
                data = self._data
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
                    self.last_data = (data, self._data_map)
                    self._data = []
                    self._data_map = []
                    self._on_data(etype, text, index, self._data_off)
                self._reset_block()
                self._block_start = end
                self._frame_ends.append(end)
            elif self._block_dropped:
                pass
            elif len(line) > max_line:
                # Arrived whole in one read; same verdict as if it had piled up in _hold,
                # which cannot know the frame size yet, so the line check comes first.
                self.alerts.append(OversizedFrame(kind="line", limit=max_line, byte_offset=pos))
                self._drop_block()
            elif pos + len(line) - self._block_start > max_frame:
                # up to the line's end, not its terminator: a CRLF cut after the CR is a
                # 1-byte terminator now and a 2-byte one whole; the verdict must not differ
                self.alerts.append(
                    OversizedFrame(kind="frame", limit=max_frame, byte_offset=self._block_start)
                )
                self._drop_block()
            else:
                self._field(line, pos)
            pos = end
        return pos

    def _field(self, line: bytes, pos: int) -> None:
        try:
            text = line.decode()
        except UnicodeDecodeError:
            text = line.decode("utf-8", "replace")
            self._report_fffd(line, text, pos)
        else:
            if REPLACEMENT in text:  # valid UTF-8, so upstream sent it encoded
                self._report_fffd(line, text, pos)
        if text[0] == ":":
            self._comment(1)
            return
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
            start = len(line) if colon < 0 else colon + skip
            self._data_map.append((pos + start, line[start:], b""))
        elif name == "event":
            self._event_type = value
        elif name == "id":
            if "\x00" not in value:
                self._last_id = value
        elif name == "retry" and value.isascii() and value.isdigit():
            # beyond int-from-str's digit limit it is unusable anyway: ignore it
            with contextlib.suppress(ValueError):
                self._retry = int(value)

    def _report_fffd(self, raw: bytes, text: str, pos: int) -> None:
        """Every U+FFFD of a decoded line, by cause, in stream order (a flood counted)."""
        index = self.event_count
        for rel, literal, n in replacement_runs(raw, text):
            self.alerts.append(
                ReplacementChar(
                    cause=ReplacementChar.UPSTREAM_LITERAL
                    if literal
                    else ReplacementChar.INVALID_UTF8,
                    byte_offset=pos + rel,
                    event_index=index,
                    count=n,
                )
            )
