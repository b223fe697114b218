"""`serve --record DIR`: write each SSE stream to its own recording file as it streams."""

from __future__ import annotations

import datetime as dt
import time
from pathlib import Path
from typing import IO, Any

import aiohttp
from aiohttp import web

from sse_proxy.obs.redact import HELD, HeldBytes, redact_head, redact_url, scrub_held
from sse_proxy.recording import encode_end, encode_header, encode_read
from sse_proxy.server.tap_types import StreamEnd

__all__ = ["Recorder"]


class Recorder:
    """Appends one stream's reads to ``DIR/<time>-<stream_id>.ssrec``: a
    :class:`~sse_proxy.server.tap_types.ReadTap`.

    Writes are small and buffered; a recording is opt-in diagnostics, not the hot path.
    A value the proxy holds is masked in the reads too (same length: offsets stay true),
    so a read is written once no held value can still straddle into the next one.
    """

    def __init__(self, file: IO[bytes], started: float) -> None:
        self._file = file
        self._started = started
        self._total = 0
        self._scrub: HeldBytes | None = HELD.bytes_scrubber()

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
            path.parent.mkdir(parents=True, exist_ok=True)
            file = path.open("wb")
        except OSError as exc:
            log.warning("record.failed", path=str(path), error=exc.strerror or str(exc))
            return None
        file.write(
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
        log.info("record.started", path=str(path))
        return cls(file, started)

    def read(self, data: bytes) -> None:
        self._total += len(data)
        t = time.monotonic() - self._started
        if self._scrub is None:
            self._file.write(encode_read(t, data))
            return
        for at, final in self._scrub.feed(data, t):
            self._file.write(encode_read(at, final))

    def finish(self, end: StreamEnd) -> None:
        if self._scrub is not None:
            for at, final in self._scrub.finish():
                self._file.write(encode_read(at, final))
        self._file.write(encode_end(end.ended_by, time.monotonic() - self._started, self._total))
        self._file.close()
