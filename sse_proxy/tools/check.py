"""`sse-proxy check`: validate a captured raw event stream offline.

Reads in fixed-size chunks, so a capture of any size runs in bounded memory, and prints
each dispatched event (or, with ``--text``, only the reassembled text) on stdout. A
recording made with ``serve --record`` is recognised by its header and fed in its original
read boundaries, with the dialect hint its request path gives and its own ``stream_id``.

Before parsing, the first 64 KiB are looked at: input that is not an event stream at all
(a JSON or HTML body, binary) is named as such (``check.not_sse``) instead of being parsed
into misleading alerts, and empty input is ``sse.empty_stream``; both exit 1.
"""

from __future__ import annotations

import json
import sys
import tempfile
import time
from collections.abc import Iterable, Iterator
from typing import IO, Any

from sse_proxy.core import Limits, StreamReassembler, dialect_for_path
from sse_proxy.core.alerts import Level
from sse_proxy.core.streammeta import meta_of
from sse_proxy.core.verdict import verdict
from sse_proxy.errors import UsageError
from sse_proxy.inspect.report import MAX_STRIP_BYTES, write_check_report
from sse_proxy.obs.logs import get_logger, new_stream_id
from sse_proxy.obs.sink import AlertSink
from sse_proxy.recording import Recording, is_recording, load_recording
from sse_proxy.sniff import HEAD_BYTES, looks_like

__all__ = ["READ_SIZE", "run_check"]

READ_SIZE = 64 * 1024


def _open(path: str | None) -> tuple[IO[bytes], str]:
    if path is None or path == "-":
        return sys.stdin.buffer, "-"
    try:
        return open(path, "rb"), path
    except OSError as exc:
        raise UsageError(f"cannot read {path!r}: {exc.strerror or exc}") from None


def _peek(stream: IO[bytes]) -> bytes:
    peek = getattr(stream, "peek", None)
    if peek is None:
        return b""
    try:
        return bytes(peek(256))[:256]
    except OSError:
        return b""


def _as_recording(
    stream: IO[bytes], path: str | None, name: str
) -> tuple[Recording | None, IO[bytes], str | None]:
    """(recording, stream to read, why it is not one) for ``stream``.

    A file whose header line says it is a recording is loaded as one. If it is broken, it
    is read as the raw capture it then is, with the reason, so that ``check`` on any
    readable input still reports (exit 0 or 1) rather than refusing it.
    """
    if not is_recording(_peek(stream)):
        return None, stream, None
    if path is not None and path != "-":
        try:
            return _load(path, name), stream, None
        except UsageError as exc:
            return None, stream, str(exc)
    # stdin: spool it so the one loader reads it the way it reads files
    tmp = tempfile.NamedTemporaryFile(prefix="sse-proxy-check-", suffix=".ssrec")  # noqa: SIM115
    try:
        while block := stream.read(READ_SIZE):
            tmp.write(block)
    except OSError as exc:
        tmp.close()
        raise UsageError(f"cannot read {name!r}: {exc.strerror or exc}") from None
    tmp.flush()
    try:
        recording = _load(tmp.name, name)
    except UsageError as exc:
        tmp.seek(0)
        return None, tmp, str(exc)
    tmp.close()
    return recording, stream, None


def _load(path: str, name: str) -> Recording:
    """:func:`load_recording`, with the malformed shapes it lets escape as exceptions
    (nesting past the recursion limit, a request that is not an object) made usage errors."""
    try:
        return load_recording(path)
    except (RecursionError, TypeError, ValueError) as exc:
        raise UsageError(
            f"{name!r} is not a valid sse-proxy recording: {type(exc).__name__}"
        ) from None


def _reads(stream: IO[bytes], name: str) -> Iterator[bytes]:
    read = getattr(stream, "read1", stream.read)
    while True:
        try:
            chunk = read(READ_SIZE)
        except OSError as exc:
            raise UsageError(f"cannot read {name!r}: {exc.strerror or exc}") from None
        if not chunk:
            return
        yield chunk


def _sniffed(chunks: Iterable[bytes]) -> tuple[bytes, Iterator[bytes]]:
    """(the first :data:`HEAD_BYTES` or so, every chunk again from the start)."""
    it = iter(chunks)
    head: list[bytes] = []
    size = 0
    for chunk in it:
        head.append(chunk)
        size += len(chunk)
        if size >= HEAD_BYTES:
            break

    def again() -> Iterator[bytes]:
        yield from head
        yield from it

    return b"".join(head), again()


STDIN_NOTE = (
    "sse-proxy check: reading an event stream from stdin (end it with Ctrl-D); "
    "to check a file: sse-proxy check FILE\n"
)


def _event_line(event: dict[str, Any]) -> bytes:
    return (json.dumps(event, ensure_ascii=False) + "\n").encode("utf-8", "surrogatepass")


def _reasoning_length(reassembler: StreamReassembler) -> dict[str, int]:
    """``reasoning_length`` for the summary, when the dialect streamed reasoning apart."""
    if not reassembler.closed:
        return {}
    reasoning = reassembler.details().get("reasoning")
    return {"reasoning_length": len(reasoning)} if isinstance(reasoning, str) and reasoning else {}


def run_check(
    path: str | None,
    *,
    text: bool = False,
    dialect: str | None = None,
    limits: Limits | None = None,
    out: IO[bytes] | None = None,
    html: str | None = None,
    quiet: bool = False,
) -> int:
    """Exit status: 0 clean, 1 when a warning-level alert fired (usage errors raise).

    ``quiet``: nothing on stdout (no events, no text); the log decides what stderr gets.
    """
    sink_out = out if out is not None else sys.stdout.buffer
    text = text and not quiet
    emit = not text and not quiet
    try:
        reassembler = StreamReassembler(dialect, limits=limits, emit_events=emit)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    stream, name = _open(path)
    if stream is sys.stdin.buffer and _isatty(sys.stdin):
        sys.stderr.write(STDIN_NOTE)
        sys.stderr.flush()
    recording, stream, not_recording = _as_recording(stream, path, name)
    if recording is not None:
        req_path = recording.request.get("path", "")
        hint = dialect_for_path(req_path) if isinstance(req_path, str) else None
        reassembler = StreamReassembler(dialect, hint=hint, limits=limits, emit_events=emit)
    recorded_id = recording.meta.get("stream_id") if recording is not None else None
    stream_id = recorded_id if isinstance(recorded_id, str) and recorded_id else new_stream_id()
    sink = AlertSink(get_logger(stream_id=stream_id, source=name))
    if not_recording is not None:
        sink.log.warning("check.recording_invalid", error=not_recording, read_as="raw capture")
        sink.max_level = Level.WARNING
    if recording is not None and recording.truncated is not None:
        sink.log.info(
            "check.recording_truncated",
            **recording.truncated,
            notice="the middle of the stream was not recorded: checked as the rest joined",
        )
    started = time.monotonic()
    kept = _Keeper() if html is not None else None
    try:
        with stream:
            head, chunks = _sniffed(
                (data for _, data in recording.reads)
                if recording is not None
                else _reads(stream, name)
            )
            if not head:
                sink.max_level = Level.WARNING
                sink.counts["sse.empty_stream"] += 1
                sink.log.warning("sse.empty_stream", bytes=0)
                return 1
            what = looks_like(head)
            if what is not None:
                sink.max_level = Level.WARNING
                sink.counts["check.not_sse"] += 1
                sink.log.warning(
                    "check.not_sse", looks_like=what, head=_preview(head), bytes_seen=len(head)
                )
                return 1
            for chunk in chunks:
                if kept is not None:
                    kept.add(chunk)
                output = reassembler.feed(chunk)
                sink.emit_all(output.alerts)
                if output.events:
                    sink_out.write(b"".join(_event_line(e.as_json_dict()) for e in output.events))
        broken = recording is not None and recording.end in ("upstream_error", "timeout")
        output = reassembler.close(upstream_error=broken)
        sink.emit_all(output.alerts)
        if output.events:
            sink_out.write(b"".join(_event_line(e.as_json_dict()) for e in output.events))
        if text:
            sink_out.write(reassembler.text.encode("utf-8", "surrogatepass"))
        sink_out.flush()
    finally:
        ended_by = recording.end if recording is not None else "eof"
        kind, reason = verdict(
            "upstream_eof" if ended_by == "eof" else ended_by, sink.counts, sink.first_warning
        )
        sink.summary(
            level="warning" if sink.warned else "info",
            verdict=kind,
            verdict_reason=reason,
            duration_ms=round((time.monotonic() - started) * 1000, 3),
            ended_by=ended_by,
            **{k: v for k, v in reassembler.summary().items() if k != "alerts"},
            **meta_of(reassembler).fields(),
            **_reasoning_length(reassembler),
        )
    status = 1 if sink.warned else 0
    if html is not None and kept is not None:
        write_check_report(
            html,
            name,
            kept.chunks,
            total=reassembler.bytes_fed,
            recording=recording,
            dialect=dialect,
            upstream_error=broken,
            warned=bool(status),
        )
    return status


def _isatty(stream: Any) -> bool:
    try:
        return bool(stream.isatty())
    except (AttributeError, ValueError):
        return False


def _preview(head: bytes, limit: int = 80) -> str:
    """The first bytes, escaped, so a log line shows what the input starts with."""
    return head[:limit].decode("utf-8", "backslashreplace").encode("unicode_escape").decode()


class _Keeper:
    """The first bytes of the stream, for the HTML report's byte strip (bounded memory)."""

    def __init__(self) -> None:
        self.room = MAX_STRIP_BYTES
        self.chunks: list[bytes] = []

    def add(self, chunk: bytes) -> None:
        if self.room > 0:
            piece = chunk[: self.room]
            self.chunks.append(piece)
            self.room -= len(piece)
