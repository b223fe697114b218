"""A stream's record in the live inspector's registry, opened as the relay opens one."""

from __future__ import annotations

from sse_proxy.inspect.registry import Registry, StreamRecord
from sse_proxy.obs.read_log import ReadLog


def open_record(
    registry: Registry,
    stream_id: str = "s",
    *,
    log: ReadLog | None = None,
    method: str = "POST",
    path: str = "/",
) -> StreamRecord:
    """A passthrough stream's record in ``registry``, over ``log`` (None: its own), with
    empty heads, started at 0 on the monotonic clock."""
    return registry.open(
        stream_id,
        method=method,
        path=path,
        status=200,
        mode="passthrough",
        hint=None,
        request={},
        response={},
        started=0.0,
        log=log,
    )
