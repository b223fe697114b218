"""The recording format: one SSE stream per file, JSON lines, stable and documented.

A recording keeps what is needed to reproduce a stream exactly, read boundaries and
timing included::

    {"format": "sse-proxy-recording", "version": 1, "stream_id": ..., "recorded_at": ...,
     "request": {"method", "path", "query", "headers"},      # secrets redacted
     "response": {"status", "reason", "headers"},
     "verdict": "broken",                                    # the stream's, when it ended
     "truncated": {"kept", "dropped", "max_stream_bytes"}}   # only if it was cut
    {"t": 0.0123, "data": "<base64 of one upstream read>"}   # one line per read
    ...
    {"gap": 123456}                                          # only if it was cut
    {"t": 9.87, "data": "..."}                               # the last reads
    {"end": "upstream_eof", "t": 1.5, "bytes": 12345}        # how the stream ended

``t`` is seconds since the request was forwarded. A stream larger than the recorder's
bound is kept as its first and last reads, with the bytes left out between them counted
by the ``gap`` line (cut at frame ends where it could be); ``bytes`` at the end is what the
stream had in all. ``verdict`` and ``truncated`` are optional (older recordings have
neither). This module is pure (no I/O beyond the file the caller names); the proxy's
recorder and ``replay``/``check`` share it.
"""

from __future__ import annotations

import base64
import json
import re
from binascii import b2a_base64
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Final

from sse_proxy.errors import UsageError
from sse_proxy.sniff import looks_like

__all__ = [
    "FORMAT",
    "READ_LINE",
    "Recording",
    "encode_end",
    "encode_gap",
    "encode_header",
    "encode_read",
    "is_recording",
    "load_capture",
    "load_recording",
]

FORMAT = "sse-proxy-recording"
VERSION = 1
_TOKEN = re.compile(r"[!#$%&'*+.^_`|~0-9A-Za-z-]+")
_CONTROL = re.compile(r"[\x00-\x08\x0a-\x1f\x7f]")  # what no header value or reason holds


@dataclass(frozen=True, slots=True)
class Recording:
    """A loaded recording: the response head and the reads with their timing."""

    request: dict[str, Any]
    response: dict[str, Any]
    reads: tuple[tuple[float, bytes], ...]
    end: str
    meta: dict[str, Any] = field(default_factory=dict)

    @property
    def body(self) -> bytes:
        return b"".join(data for _, data in self.reads)

    @property
    def truncated(self) -> dict[str, Any] | None:
        """How a recording cut short was cut (``kept``, ``dropped`` bytes...); None: whole."""
        cut = self.meta.get("truncated")
        return cut if isinstance(cut, dict) else None


def encode_header(meta: dict[str, Any]) -> bytes:
    return _line({"format": FORMAT, "version": VERSION, **meta})


READ_LINE: Final = b'{"t":%.6f,"data":"%s"}\n'
"""One read's line, filled with its time and the base64 of its bytes (a JSON object: the
time with six decimals, as ``round(t, 6)`` reads back)."""


def encode_read(t: float, data: bytes) -> bytes:
    return READ_LINE % (t, b2a_base64(data, newline=False))


def encode_gap(dropped: int) -> bytes:
    """Where a truncated recording left bytes out, and how many."""
    return _line({"gap": dropped})


def encode_end(ended_by: str, t: float, total: int) -> bytes:
    return _line({"end": ended_by, "t": round(t, 6), "bytes": total})


def _line(obj: dict[str, Any]) -> bytes:
    return (json.dumps(obj, ensure_ascii=False, separators=(",", ":")) + "\n").encode()


def is_recording(head: bytes) -> bool:
    """Whether a file starting with ``head`` is a recording (not a raw capture)."""
    return head.lstrip()[:64].startswith(b'{"format":"' + FORMAT.encode()) or (
        head.lstrip().startswith(b"{") and FORMAT.encode() in head[:200]
    )


def load_recording(path: str | Path) -> Recording:
    """Read a recording; a missing, unreadable or malformed file is a :class:`UsageError`."""
    name = str(path)
    try:
        lines = Path(path).read_bytes().splitlines()
    except OSError as exc:
        raise UsageError(f"cannot read {name!r}: {exc.strerror or exc}") from None
    try:
        head = json.loads(lines[0]) if lines else {}
        if head.get("format") != FORMAT:
            raise ValueError("not an sse-proxy recording")
        if head.get("version") != VERSION:
            raise ValueError(f"unsupported recording version {head.get('version')!r}")
        reads: list[tuple[float, bytes]] = []
        end = "unknown"
        for raw in lines[1:]:
            if not raw.strip():
                continue
            item = json.loads(raw)
            if "data" in item:
                reads.append((float(item["t"]), base64.b64decode(item["data"], validate=True)))
            elif "end" in item:
                end = str(item["end"])
        response = dict(head.get("response") or {})
        _check_response(response)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
        reason = type(exc).__name__ if isinstance(exc, RecursionError) else exc
        raise UsageError(f"{name!r} is not a valid sse-proxy recording: {reason}") from None
    return Recording(
        request=dict(head.get("request") or {}),
        response=response,
        reads=tuple(reads),
        end=end,
        meta={k: v for k, v in head.items() if k not in ("request", "response")},
    )


def _check_response(response: dict[str, Any]) -> None:
    """A response head that can be sent again as it is: refused here, when the recording is
    loaded, rather than failing every request it would answer."""
    status = response.get("status", 200)
    if type(status) is not int or not 100 <= status <= 599:
        raise ValueError(f"response status {status!r} is not 100..599")
    reason = response.get("reason")
    if reason is not None and (not isinstance(reason, str) or _CONTROL.search(reason)):
        raise ValueError("the response reason holds a line break or a control character")
    headers = response.get("headers") or {}
    if not isinstance(headers, dict):
        raise ValueError("response headers are not an object")
    for key, value in headers.items():
        if not _TOKEN.fullmatch(key):
            raise ValueError(f"response header name {key[:40]!r} is not a valid name")
        if not isinstance(value, str) or _CONTROL.search(value):
            raise ValueError(f"response header {key!r} holds a line break or a control character")


def load_capture(path: str | Path) -> Recording:
    """A recording, or a raw capture (``curl -N URL > file``) as a one-read recording.

    An empty file, or one that is not an event stream (a JSON or HTML body, binary), is a
    :class:`UsageError` that says what it looks like.
    """
    name = str(path)
    try:
        data = Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"cannot read {name!r}: {exc.strerror or exc}") from None
    if is_recording(data[:256]) or data.lstrip().startswith(b'{"format"'):
        return load_recording(path)  # a recording, or a broken one: its own error
    if not data.strip():
        raise UsageError(f"{name!r} is empty: there is no stream to serve")
    what = looks_like(data)
    if what is not None:
        raise UsageError(f"{name!r} is not an SSE stream: it looks like {what}")
    return Recording(
        request={},
        response={"status": 200, "headers": {"Content-Type": "text/event-stream"}},
        reads=((0.0, data),),
        end="upstream_eof",
        meta={"raw_capture": True},
    )
