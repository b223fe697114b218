"""`serve --record DIR`: each SSE stream's reads kept in memory, and written to a recording
of its own by a thread when the stream ends, if its verdict is one asked for
(``--record-on``: ``ok`` every stream, ``degraded`` degraded or broken ones, ``broken``
broken ones only: a flight recorder).

On the event loop a stream only appends each read to a list (:meth:`StreamRecording.keep`)
and, at its end, hands its lists to the writer thread or lets them go. The writer thread
makes the file (the heads redacted, held values masked, the reads encoded), writes it
whole, and keeps the folder within ``record_max_files`` files and ``record_max_bytes``
bytes of recordings, deleting the oldest first (one ``recording.dropped`` line and
``sse_proxy_recordings_dropped_total`` for each).

A stream keeps at most ``record_max_stream_bytes`` of reads: past that its first reads (up
to half of it) and its last ones (the rest); the recording then says it was truncated and
holds one ``gap`` line where the middle was, cut at frame ends where it can be, so that a
replay parses whole frames on either side.

Recordings hold prompts and answers: each file is created 0600 and a folder the proxy
creates 0700, whatever the umask (a folder that exists is left as it is). A recording is an
observer: a write that fails (a full disk, a file-size limit) costs that recording, with
one ``recording.failed`` line, and never touches the stream.
"""

from __future__ import annotations

import asyncio
import contextlib
import datetime as dt
import os
import queue
import re
import threading
import time
from binascii import b2a_base64
from collections import OrderedDict, deque
from pathlib import Path
from typing import Any, Final, NamedTuple

from aiohttp import web

from sse_proxy.obs.logs import get_logger
from sse_proxy.obs.metrics import Metrics
from sse_proxy.obs.read_log import ReadLog
from sse_proxy.obs.redact import HELD, redact_head, redact_url, scrub_held
from sse_proxy.recording import READ_LINE, encode_end, encode_gap, encode_header
from sse_proxy.server.tap_types import StreamEnd
from sse_proxy.settings import RECORD_ON, Config

__all__ = ["Recorder", "StreamRecording", "head_room", "private_dir"]

_RANK: Final = {name: rank for rank, name in enumerate(RECORD_ON)}
"""How bad a verdict is: a recording is written for verdicts of ``record_on``'s or more."""
_RESCAN_S: Final = 1.0
"""Over a bound, the folder is listed again (other workers' files, files deleted by hand)
at most this often; between listings the writer counts what it wrote itself."""
_WAITING_STREAMS: Final = 16
"""Recordings waiting for the writer, in bytes, at most this many streams' bound."""
_BLANK: Final = re.compile(rb"(?>\r\n|\r|\n)(?>\r\n|\r|\n)")
"""A frame end: a line ending, then an empty line's (CRLF taken whole, never as CR + LF)."""
_LOOK: Final = 64 << 10
"""How far from the gap a frame end is looked for."""
_monotonic = time.monotonic
_NO_READS: Final = ReadLog(0, 0)
"""The log of a recording let go (never appended to)."""


def head_room(max_stream_bytes: int) -> int:
    """The bound of a recorded stream's log: its first reads take half its room."""
    return max_stream_bytes // 2


def private_dir(path: Path) -> None:
    """``path`` as a folder: created 0700 (with its parents) when missing, else as it is."""
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        return
    os.chmod(path, 0o700)  # (mkdir's mode goes through the umask)


class _Heads(NamedTuple):
    """What a recording's header says of the exchange, as the loop had it (the heads are
    immutable mappings; they are redacted by the writer)."""

    stream_id: str
    wall: float
    method: str
    path: str
    query: str
    request_headers: Any
    status: int
    reason: str | None
    response_headers: Any


class StreamRecording:
    """One stream's reads, kept for its recording: a :class:`~.tap_types.Tap` over the
    stream's :class:`~sse_proxy.obs.read_log.ReadLog`, whose bound is this recording's head
    (the relay appends every upstream read to it, from the first); the reads past it come
    to :meth:`past`, which keeps the last of them."""

    __slots__ = (
        "_head_open",
        "_recorder",
        "_room",
        "_tail_bytes",
        "dropped",
        "dropped_reads",
        "heads",
        "log",
        "past_bytes",
        "started",
        "tail",
    )

    def __init__(
        self, recorder: Recorder, heads: _Heads, started: float, room: int, log: ReadLog
    ) -> None:
        """``log``: the stream's, bounded at half of ``room`` (:func:`head_room`)."""
        self._recorder = recorder
        self.heads = heads
        self.started = started
        self._room = room
        self._head_open = True
        self.log = log
        self.tail: deque[tuple[float, bytes]] = deque()
        self._tail_bytes = 0
        self.past_bytes = 0
        self.dropped = 0
        self.dropped_reads = 0

    def keep(self, chunk: bytes, at: float | None = None) -> None:
        """One upstream read, as it came (compressed, if it was): what the relay does
        inline, for other callers."""
        at = _monotonic() if at is None else at
        if not self.log.add(chunk, at, self.received + len(chunk)):
            self.past(chunk, at)

    @property
    def head(self) -> list[tuple[float, bytes]]:
        """The first reads: (when, bytes)."""
        return list(zip(self.log.times, self.log.chunks, strict=True))

    @property
    def received(self) -> int:
        return self.log.logged_bytes() + self.past_bytes

    def past(self, chunk: bytes, at: float) -> None:
        """A read past the head: the last reads, as many as the room left takes."""
        n = len(chunk)
        self.past_bytes += n
        if self._head_open:  # the head is full: the tail has the rest of the room
            self._room -= self.log.logged_bytes()
            self._head_open = False
        tail = self.tail
        tail.append((at, chunk))
        self._tail_bytes += n
        room = self._room
        while self._tail_bytes > room:
            if len(tail) == 1:  # one read larger than the room: its end is kept
                at, only = tail[0]
                excess = self._tail_bytes - room
                tail[0] = (at, only[excess:])
                self._tail_bytes -= excess
                self.dropped += excess
                break
            _, old = tail.popleft()  # whole reads go, the oldest first
            self._tail_bytes -= len(old)
            self.dropped += len(old)
            self.dropped_reads += 1

    @property
    def kept(self) -> int:
        return self.received - self.dropped

    def finish(self, end: StreamEnd) -> None:
        recorder = self._recorder
        if _RANK.get(str(end.fields.get("verdict")), 0) < recorder.rank:
            self.log = _NO_READS  # not asked for: let the reads go now
            self.tail.clear()
            return
        recorder.submit(self, end)


class Recorder:
    """The app's recordings: per stream a :class:`StreamRecording` (:meth:`stream`), and
    one writer thread, started with the first recording to write."""

    def __init__(self, cfg: Config, metrics: Metrics) -> None:
        self.dir = Path(cfg.record_dir)
        self.rank = _RANK[cfg.record_on]
        self.max_stream_bytes = cfg.record_max_stream_bytes
        self.max_files = cfg.record_max_files
        self.max_bytes = cfg.record_max_bytes
        self._metrics = metrics
        self._queue: queue.SimpleQueue[tuple[StreamRecording, StreamEnd] | None] = (
            queue.SimpleQueue()
        )
        self._thread: threading.Thread | None = None
        self._closed = False
        self._lock = threading.Lock()
        self._waiting = 0  # bytes of reads handed to the writer, not yet written
        self._files: OrderedDict[str, int] = OrderedDict()  # name -> size, oldest first
        self._total = 0
        self._listed = -float("inf")

    @classmethod
    def for_config(cls, cfg: Config, metrics: Metrics) -> Recorder | None:
        return cls(cfg, metrics) if cfg.record_dir else None

    def stream(
        self,
        stream_id: str,
        request: web.Request,
        upstream: Any,
        started: float,
        log: ReadLog,
    ) -> StreamRecording:
        """A new stream's recording (``started``: when its request went upstream) over its
        ``log``, bounded at :func:`head_room`."""
        heads = _Heads(
            stream_id,
            time.time(),
            request.method,
            request.path,
            request.query_string,
            request.headers,
            upstream.status,
            upstream.reason,
            upstream.headers,
        )
        return StreamRecording(self, heads, started, self.max_stream_bytes, log)

    def submit(self, recording: StreamRecording, end: StreamEnd) -> None:
        """A finished stream's recording, to be written (on the loop: hands it over)."""
        size = recording.kept
        with self._lock:
            if self._waiting + size > _WAITING_STREAMS * self.max_stream_bytes:
                late = True
            else:
                late = False
                self._waiting += size
        if late:
            get_logger(stream_id=recording.heads.stream_id).warning(
                "recording.dropped",
                reason="writer_behind",
                notice="too many recordings waiting to be written: this one is not",
            )
            self._metrics.child(self._metrics.recordings_dropped, reason="writer_behind").inc()
            return
        if self._closed:  # (a stream summed up after the shutdown's close: written here)
            self._write_one(recording, end)
            return
        if self._thread is None:
            self._thread = threading.Thread(
                target=self._run, name="sse-proxy-recorder", daemon=True
            )
            self._thread.start()
        self._queue.put((recording, end))

    async def close(self, _app: web.Application | None = None) -> None:
        """Write what is waiting, then stop the thread (off the event loop)."""
        self._closed = True
        thread = self._thread
        if thread is not None:
            self._queue.put(None)
            await asyncio.to_thread(thread.join)

    # -- the writer thread -----------------------------------------------------------------

    def _run(self) -> None:
        while True:
            job = self._queue.get()
            if job is None:
                return
            self._write_one(*job)

    def _write_one(self, recording: StreamRecording, end: StreamEnd) -> None:
        try:
            self._write(recording, end)
        except Exception:  # noqa: BLE001 - one recording must not stop the others
            get_logger(stream_id=recording.heads.stream_id).exception("recording.failed")
        finally:
            with self._lock:
                self._waiting -= recording.kept

    def _write(self, recording: StreamRecording, end: StreamEnd) -> None:
        heads = recording.heads
        log = get_logger(stream_id=heads.stream_id)
        stamp = dt.datetime.fromtimestamp(heads.wall, dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        name = f"{stamp}-{heads.stream_id}.ssrec"
        path = self.dir / name
        data = _encode(recording, end, stamp, self.max_stream_bytes)
        if self._listed == -float("inf"):
            self._list()  # what the folder holds already counts against its bounds
        if len(data) > self.max_bytes:
            self._dropped(log, path, "max_bytes", len(data), written=False)
            return
        try:
            private_dir(self.dir)
            fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            log.warning("recording.failed", path=str(path), error=exc.strerror or str(exc))
            return
        try:
            os.fchmod(fd, 0o600)
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        except OSError as exc:
            log.warning(
                "recording.failed",
                path=str(path),
                error=exc.strerror or str(exc),
                notice="the recording is cut short; the stream was not touched",
            )
            with contextlib.suppress(OSError):
                self._add(name, os.fstat(fd).st_size)
            return
        finally:
            with contextlib.suppress(OSError):
                os.close(fd)
        self._add(name, len(data))
        self._bound(log)  # (before the line: once it is logged, the folder is as it stays)
        self._metrics.recordings_written.inc()
        log.info(
            "recording.written",
            path=str(path),
            bytes=len(data),
            verdict=end.fields.get("verdict"),
            truncated=bool(recording.dropped),
        )

    def _add(self, name: str, size: int) -> None:
        self._files[name] = size
        self._total += size

    def _list(self) -> None:
        """What the folder holds now: its recordings, oldest first."""
        self._listed = _monotonic()
        found = []
        with contextlib.suppress(OSError), os.scandir(self.dir) as entries:
            for entry in entries:
                with contextlib.suppress(OSError):
                    if entry.name.endswith(".ssrec") and entry.is_file(follow_symlinks=False):
                        st = entry.stat(follow_symlinks=False)
                        found.append((st.st_mtime_ns, entry.name, st.st_size))
        found.sort()
        self._files = OrderedDict((name, size) for _, name, size in found)
        self._total = sum(size for _, _, size in found)

    def _over(self) -> bool:
        return len(self._files) > self.max_files or self._total > self.max_bytes

    def _bound(self, log: Any) -> None:
        """The folder back within its bounds, the oldest recordings deleted first."""
        if not self._over():
            return
        if _monotonic() - self._listed >= _RESCAN_S:
            self._list()
        files = self._files
        while files and self._over():
            reason = "max_files" if len(files) > self.max_files else "max_bytes"
            name, size = files.popitem(last=False)
            self._total -= size
            try:
                os.unlink(self.dir / name)
            except FileNotFoundError:
                continue  # gone already (another worker, or by hand)
            except OSError as exc:
                log.warning("recording.failed", path=str(self.dir / name), error=exc.strerror)
                continue
            self._dropped(log, self.dir / name, reason, size, written=True)

    def _dropped(self, log: Any, path: Path, reason: str, size: int, *, written: bool) -> None:
        limit = self.max_files if reason == "max_files" else self.max_bytes
        log.info(
            "recording.dropped",
            path=str(path),
            reason=reason,
            bytes=size,
            **{reason: limit},
            notice="the oldest recording deleted" if written else "too large to keep: not written",
        )
        self._metrics.child(self._metrics.recordings_dropped, reason=reason).inc()


def _encode(recording: StreamRecording, end: StreamEnd, stamp: str, limit: int) -> bytes:
    """The recording file: the header, the reads kept (a gap line where the middle was
    left out), the end."""
    heads = recording.heads
    head = recording.head
    tail = list(recording.tail)
    truncated = recording.dropped > 0
    encoding = heads.response_headers.get("Content-Encoding", "identity")
    if truncated and encoding.strip().lower() == "identity":  # (compressed: no frames seen)
        head, tail = _at_frame_ends(head, tail)
    scrub = HELD.bytes_scrubber()
    if scrub is not None:  # a value the proxy holds, masked (same length: offsets stay true)
        head = [*(r for read in head for r in scrub.feed(read[1], read[0])), *scrub.finish()]
        if tail:
            scrub = HELD.bytes_scrubber()
            assert scrub is not None
            tail = [*(r for read in tail for r in scrub.feed(read[1], read[0])), *scrub.finish()]
            if head:
                head[-1], tail[0] = _mask_cut(head[-1], tail[0])
    kept = sum(len(data) for _, data in head) + sum(len(data) for _, data in tail)
    meta: dict[str, Any] = {
        "stream_id": heads.stream_id,
        "recorded_at": stamp,
        "request": {
            "method": heads.method,
            "path": heads.path,
            "query": redact_url("?" + heads.query)[1:] if heads.query else "",
            "headers": redact_head(heads.request_headers),
        },
        "response": {
            "status": heads.status,
            "reason": scrub_held(heads.reason or "") or heads.reason,
            "headers": redact_head(heads.response_headers),
        },
        "verdict": end.fields.get("verdict"),
    }
    if truncated:
        meta["truncated"] = {
            "kept": kept,
            "dropped": recording.received - kept,
            "max_stream_bytes": limit,
        }
    started = recording.started
    line = READ_LINE
    lines = [encode_header(meta)]
    lines += [line % (at - started, b2a_base64(d, newline=False)) for at, d in head]
    if truncated:
        lines.append(encode_gap(recording.received - kept))
        lines += [line % (at - started, b2a_base64(d, newline=False)) for at, d in tail]
    lines.append(encode_end(end.ended_by, end.duration, recording.received))
    return b"".join(lines)


def _at_frame_ends(
    head: list[tuple[float, bytes]], tail: list[tuple[float, bytes]]
) -> tuple[list[tuple[float, bytes]], list[tuple[float, bytes]]]:
    """The head up to its last frame end and the tail from its first, where one is near
    the gap: what is left out is whole frames, and a replay parses both sides."""
    if head:
        look = []
        size = 0
        for read in reversed(head):
            look.append(read)
            size += len(read[1])
            if size >= _LOOK:
                break
        window = b"".join(data for _, data in reversed(look))
        last = None
        for last in _BLANK.finditer(window):  # noqa: B007 - the last one is wanted
            pass
        if last is not None:
            cut = len(window) - last.end()  # bytes after the frame end
            while cut:
                at, data = head.pop()
                if len(data) > cut:
                    head.append((at, data[: len(data) - cut]))
                    break
                cut -= len(data)
    if tail:
        window = b""
        for _, data in tail:
            window += data
            if len(window) >= _LOOK:
                break
        first = _BLANK.search(window)
        if first is not None:
            cut = first.end()  # bytes before the frame start
            while cut:
                at, data = tail.pop(0)
                if len(data) > cut:
                    tail.insert(0, (at, data[cut:]))
                    break
                cut -= len(data)
    return head, tail


def _mask_cut(
    last: tuple[float, bytes], first: tuple[float, bytes]
) -> tuple[tuple[float, bytes], tuple[float, bytes]]:
    """A held value cut by the gap: its start at the head's end and its end at the tail's
    start masked too (four bytes or more of it: shorter is any word's)."""
    (at_last, end), (at_first, start) = last, first
    for value in (v.encode() for v in HELD.values()):
        for n in range(min(len(value) - 1, len(end)), 3, -1):
            if end.endswith(value[:n]):
                end = end[:-n] + b"*" * n
                break
        for n in range(min(len(value) - 1, len(start)), 3, -1):
            if start.startswith(value[-n:]):
                start = b"*" * n + start[n:]
                break
    return (at_last, end), (at_first, start)
