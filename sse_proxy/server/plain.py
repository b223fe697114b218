"""The plain relay, and what both relays share.

A response that is not an event stream is passed through as it comes, unobserved; its
one line is ``proxy.request``. The idle watch and the cut-off are the SSE relay's too.
"""

from __future__ import annotations

import asyncio
import time

import aiohttp
from aiohttp import web

from sse_proxy.obs.redact import redact_url
from sse_proxy.server.client_writer import ClientGone
from sse_proxy.server.exchange import Exchange
from sse_proxy.server.watchdog import Watch, Watchdog

__all__ = ["IdleWatch", "cut_off", "relay_plain"]


class IdleWatch:
    """The idle timeout between upstream chunks, without a timer per chunk or per stream.

    A read only stamps the time (``last``); the loop's :class:`~.watchdog.Watchdog` looks
    at the stamp when the deadline it was set for comes, sets it again for the moved
    deadline, and once the gap passes the limit closes the upstream response, which wakes
    the pending read with an error that the relay then reports as ``timeout``.
    """

    __slots__ = ("_idle", "_upstream", "_watch", "expired", "last", "now")

    def __init__(
        self,
        upstream: aiohttp.ClientResponse,
        idle: float,
        take_over: Watch | None,
        loop: asyncio.AbstractEventLoop,
    ) -> None:
        """``take_over``: the deadline of the wait for the head, due no later than this
        one (it only ever checks early, never late), which becomes this watch. ``loop``:
        the running loop, given (looking it up is a system call on Python 3.11)."""
        self._upstream = upstream
        self._idle = idle
        self.now = loop.time
        self.last = self.now()
        self.expired = False
        self._watch: Watch | None = None
        if take_over is not None and idle:
            take_over.retarget(self._check)
            self._watch = take_over
        elif idle:
            self._watch = Watchdog.of(loop).watch(idle, self._check)

    def _check(self) -> float | None:
        # The deadline moves with every read; a deadline re-armed per read would cost more.
        left = self.last + self._idle - self.now()
        if left > 0:
            return left
        self._watch = None
        self.expired = True
        self._upstream.close()
        return None

    def stop(self) -> None:
        if self._watch is not None:
            self._watch.cancel()
            self._watch = None


async def relay_plain(
    ex: Exchange, resp: web.StreamResponse, upstream: aiohttp.ClientResponse
) -> web.StreamResponse:
    request = ex.request
    log = ex.stream_log(**ex.ctx.fields())
    await resp.prepare(request)
    sent = 0
    ended_by = "upstream_eof"
    loop = ex.parts.loop
    assert loop is not None  # (set while the app runs)
    watch = IdleWatch(upstream, ex.cfg.idle_timeout, ex.idle_watch, loop)
    try:
        async for chunk in upstream.content.iter_any():
            watch.last = watch.now()
            await _write(resp, chunk)
            sent += len(chunk)
    except ClientGone:
        ended_by = "client_disconnect"
    except (TimeoutError, aiohttp.ClientError) as exc:
        ended_by = "timeout" if watch.expired else "upstream_error"
        log.warning(
            "upstream.error",
            kind="body_read_failed",
            error=redact_url(str(exc)),
            upstream_url=redact_url(str(upstream.url)),
        )
    finally:
        watch.stop()
    log.info(
        "proxy.request",
        status=upstream.status,
        bytes=sent,
        ended_by=ended_by,
        duration_ms=round((time.monotonic() - ex.started) * 1000, 3),
    )
    if ended_by != "upstream_eof":
        cut_off(request)
        return resp
    await resp.write_eof()
    return resp


async def _write(resp: web.StreamResponse, data: bytes) -> None:
    try:
        await resp.write(data)
    except (ConnectionError, aiohttp.ClientConnectionError, RuntimeError) as exc:
        raise ClientGone from exc


def cut_off(request: web.Request) -> None:
    """End the client's response without its terminating chunk: never a fake completion."""
    transport = request.transport
    if transport is not None:
        transport.close()
