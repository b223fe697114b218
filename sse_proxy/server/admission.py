"""Admission: the refusals made before anything is forwarded, and the JSON error reply."""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Any

from aiohttp import web

from sse_proxy.config import Config
from sse_proxy.errors import ChaosSpecError
from sse_proxy.names import CHAOS_HEADER, STREAM_ID_HEADER
from sse_proxy.obs.logs import new_stream_id
from sse_proxy.rechunk.spec import ChaosSpec, parse_chaos_header

__all__ = [
    "RequestTooLarge",
    "chaos_allowed",
    "chaos_spec",
    "json_error",
    "refuse_connect",
    "request_body",
    "too_large",
]


class RequestTooLarge(Exception):
    """The request body outgrew ``max_request_body_bytes``."""


def json_error(status: int, kind: str, message: str, stream_id: str | None) -> web.Response:
    """The one shape of every error the proxy answers itself: ``{"error": {type, message,
    stream_id}}``, the stream id in its header too (none for the reserved paths, which are
    not proxied requests)."""
    error = {"type": kind, "message": message}
    if stream_id is None:
        return web.json_response({"error": error}, status=status)
    error["stream_id"] = stream_id
    return web.json_response({"error": error}, status=status, headers={STREAM_ID_HEADER: stream_id})


def too_large(cfg: Config, stream_id: str) -> web.Response:
    """The 413: a declared length over the limit, or a streamed body that outgrew it."""
    return json_error(
        413,
        "request_too_large",
        f"request body over {cfg.max_request_body_bytes} bytes",
        stream_id,
    )


async def request_body(request: web.Request, limit: int) -> AsyncIterator[bytes]:
    """The request body streamed through, not read whole; stops past ``limit`` bytes."""
    seen = 0
    async for chunk in request.content.iter_any():
        seen += len(chunk)
        if seen > limit:
            raise RequestTooLarge
        yield chunk


def chaos_allowed(cfg: Config) -> bool:
    return cfg.allow_chaos_header or cfg.mode == "chaos"


def chaos_spec(request: web.Request, cfg: Config) -> ChaosSpec | None:
    """The chaos spec for this request: the per-request header if allowed, else the server's.

    The header is allowed on a server started in chaos mode (it only overrides the chaos
    settings) or with ``--allow-chaos-header`` (it then turns chaos on per request).
    """
    header = request.headers.get(CHAOS_HEADER)
    if header is not None:
        if not chaos_allowed(cfg):
            raise ChaosSpecError(
                f"{CHAOS_HEADER} is not allowed on this server "
                "(start it with --mode chaos or --allow-chaos-header)"
            )
        return parse_chaos_header(header, default_seed=cfg.seed)
    if cfg.mode != "chaos":
        return None
    return ChaosSpec.from_options(cfg.chaos, cfg.seed, k=cfg.chaos_k, delay_ms=cfg.delay_ms)


@web.middleware
async def refuse_connect(request: web.Request, handler: Any) -> web.StreamResponse:
    """CONNECT never matches a route (its target has no path), so refuse it before routing."""
    if request.method == "CONNECT":
        return json_error(
            405, "method_not_allowed", "CONNECT is refused: not an open proxy", new_stream_id()
        )
    response: web.StreamResponse = await handler(request)
    return response
