"""The plain relay: a response that is not an event stream.

It is passed through as it comes, unobserved; its one line is ``proxy.request``.
"""

from __future__ import annotations

import time

import aiohttp
from aiohttp import web

from sse_proxy.obs.redact import redact_url
from sse_proxy.server.aiohttp_internals import lean_body
from sse_proxy.server.client_writer import ClientGone, cut_off
from sse_proxy.server.deadlines import IdleWatch
from sse_proxy.server.exchange import Exchange

__all__ = ["relay_plain"]


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
    lean_body(upstream.content)  # what came before a broken body is passed on first
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
