"""The one shape of every error the proxy answers itself.

The front door, admission and the upstream's failures all answer with :func:`json_error`,
so a client (and a log reader) meets one error body whoever refused.
"""

from __future__ import annotations

from aiohttp import web

from sse_proxy.names import STREAM_ID_HEADER
from sse_proxy.obs.redact import scrub_held
from sse_proxy.settings import Config

__all__ = ["json_error", "too_large"]


def json_error(
    status: int, kind: str, message: str, stream_id: str | None, *, setting: str | None = None
) -> web.Response:
    """The one shape of every error the proxy answers itself: ``{"error": {type, message,
    stream_id}}``, the stream id in its header too (none for the reserved paths and the
    front door's refusals, which are not proxied requests); ``setting``: the one that would
    have allowed the request. No value the proxy holds is ever in it."""
    error = {"type": kind, "message": scrub_held(message)}
    if setting is not None:
        error["setting"] = setting
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
