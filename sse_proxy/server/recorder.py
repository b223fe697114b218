"""`serve --record DIR`: write each SSE stream to its own recording file as it streams.

Recordings hold prompts and answers: each file is created 0600 and a folder the proxy
creates 0700, whatever the umask (a folder that exists is left as it is). A recording is an
observer: a write that fails (a full disk, a file-size limit) stops that recording with one
``recording.failed`` line, and the stream goes on untouched.
"""

from __future__ import annotations

import contextlib
import datetime as dt
import os
import time
from pathlib import Path
from typing import IO, Any

import aiohttp
from aiohttp import web

from sse_proxy.obs.redact import HELD, HeldBytes, redact_head, redact_url, scrub_held
from sse_proxy.recording import encode_end, encode_header, encode_read
from sse_proxy.server.tap_types import StreamEnd

__all__ = ["Recorder", "private_dir"]


def private_dir(path: Path) -> None:
    """``path`` as a folder: created 0700 (with its parents) when missing, else as it is."""
    try:
        path.mkdir(mode=0o700, parents=True)
    except FileExistsError:
        return
    os.chmod(path, 0o700)  # (mkdir's mode goes through the umask)


def _private_file(path: Path) -> IO[bytes]:
    """A new file only its owner can read: 0600 whatever the umask."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o600)
    try:
        os.fchmod(fd, 0o600)
        return os.fdopen(fd, "wb")
    except BaseException:
        os.close(fd)
        raise


class Recorder:
    """Appends one stream's reads to ``DIR/<time>-<stream_id>.ssrec``: a
    :class:`~sse_proxy.server.tap_types.ReadTap`.

    Writes are small and buffered; a recording is opt-in diagnostics, not the hot path.
    A value the proxy holds is masked in the reads too (same length: offsets stay true),
    so a read is written once no held value can still straddle into the next one.
    """

    def __init__(self, file: IO[bytes], started: float, path: Path, log: Any) -> None:
        self._file: IO[bytes] | None = file
        self._started = started
        self._total = 0
        self._scrub: HeldBytes | None = HELD.bytes_scrubber()
        self._path = path
        self._log = log

    @classmethod
    def for_config(
        cls,
        record_dir: str,
        stream_id: str,
        request: web.Request,
        upstream: aiohttp.ClientResponse,
        log: Any,
        started: float,
    ) -> Recorder | None:
        if not record_dir:
            return None
        stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%S.%fZ")
        path = Path(record_dir) / f"{stamp}-{stream_id}.ssrec"
        try:
            private_dir(path.parent)
            file = _private_file(path)
        except OSError as exc:
            log.warning("recording.failed", path=str(path), error=exc.strerror or str(exc))
            return None
        recorder = cls(file, started, path, log)
        recorder._write(
            encode_header(
                {
                    "stream_id": stream_id,
                    "recorded_at": stamp,
                    "request": {
                        "method": request.method,
                        "path": request.path,
                        "query": redact_url("?" + request.query_string)[1:]
                        if request.query_string
                        else "",
                        "headers": redact_head(request.headers),
                    },
                    "response": {
                        "status": upstream.status,
                        "reason": scrub_held(upstream.reason or "") or upstream.reason,
                        "headers": redact_head(upstream.headers),
                    },
                }
            )
        )
        if recorder._file is None:  # (the header could not be written: said so)
            return None
        log.info("recording.started", path=str(path))
        return recorder

    def _write(self, line: bytes) -> None:
        file = self._file
        if file is None:
            return
        try:
            file.write(line)
        except OSError as exc:
            self._stop(exc)

    def _stop(self, exc: OSError) -> None:
        """The recording cannot go on: say so once, let go of the file, record no more."""
        file, self._file = self._file, None
        if file is not None:
            with contextlib.suppress(OSError):  # (its buffer cannot be written either)
                file.close()
        self._log.warning(
            "recording.failed",
            path=str(self._path),
            error=exc.strerror or str(exc),
            notice="recording stopped; the stream goes on",
        )

    def read(self, data: bytes) -> None:
        self._total += len(data)
        if self._file is None:
            return
        t = time.monotonic() - self._started
        if self._scrub is None:
            self._write(encode_read(t, data))
            return
        for at, final in self._scrub.feed(data, t):
            self._write(encode_read(at, final))

    def finish(self, end: StreamEnd) -> None:
        if self._file is None:
            return
        if self._scrub is not None:
            for at, final in self._scrub.finish():
                self._write(encode_read(at, final))
        self._write(encode_end(end.ended_by, time.monotonic() - self._started, self._total))
        file, self._file = self._file, None
        if file is not None:
            try:
                file.close()
            except OSError as exc:
                self._file = file  # (closed now: _stop's close does nothing more)
                self._stop(exc)
