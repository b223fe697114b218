"""`sse-proxy check`: validate a captured raw event stream offline.

Reads in fixed-size chunks, so a capture of any size runs in bounded memory, and prints
each dispatched event (or, with ``--text``, only the reassembled text) on stdout.
"""

from __future__ import annotations

import json
import sys
import time
from typing import IO, Any

from proxy.core import Limits, StreamReassembler
from proxy.errors import UsageError
from proxy.logsink import AlertSink, get_logger, new_stream_id

__all__ = ["READ_SIZE", "run_check"]

READ_SIZE = 64 * 1024


def _open(path: str | None) -> tuple[IO[bytes], str]:
    if path is None or path == "-":
        return sys.stdin.buffer, "-"
    try:
        return open(path, "rb"), path
    except OSError as exc:
        raise UsageError(f"cannot read {path!r}: {exc.strerror or exc}") from None


def _event_line(event: dict[str, Any]) -> bytes:
    return (json.dumps(event, ensure_ascii=False) + "\n").encode("utf-8", "surrogatepass")


def run_check(
    path: str | None,
    *,
    text: bool = False,
    dialect: str | None = None,
    limits: Limits | None = None,
    out: IO[bytes] | None = None,
) -> int:
    """Exit status: 0 clean, 1 when a warning-level alert fired (usage errors raise)."""
    sink_out = out if out is not None else sys.stdout.buffer
    try:
        reassembler = StreamReassembler(dialect, limits=limits, emit_events=not text)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    stream, name = _open(path)
    stream_id = new_stream_id()
    sink = AlertSink(get_logger(stream_id=stream_id, source=name))
    started = time.monotonic()
    try:
        with stream:
            read = getattr(stream, "read1", stream.read)
            while True:
                try:
                    chunk = read(READ_SIZE)
                except OSError as exc:
                    raise UsageError(f"cannot read {name!r}: {exc.strerror or exc}") from None
                if not chunk:
                    break
                output = reassembler.feed(chunk)
                sink.emit_all(output.alerts)
                if output.events:
                    sink_out.write(b"".join(_event_line(e.as_json_dict()) for e in output.events))
        output = reassembler.close()
        sink.emit_all(output.alerts)
        if output.events:
            sink_out.write(b"".join(_event_line(e.as_json_dict()) for e in output.events))
        if text:
            sink_out.write(reassembler.text.encode("utf-8", "surrogatepass"))
        sink_out.flush()
    finally:
        sink.summary(
            duration_ms=round((time.monotonic() - started) * 1000, 3),
            ended_by="eof",
            **{k: v for k, v in reassembler.summary().items() if k != "alerts"},
        )
    return 1 if sink.warned else 0
