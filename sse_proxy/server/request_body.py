"""The client's request body, on its way to the upstream.

A small body with a declared length is read whole and sent with that length; any other is
streamed through, bounded by ``max_request_body_bytes``. ``Expect: 100-continue`` is met
only once the upstream request asks for the body, so a refusal reaches a client that has
sent nothing.
"""

from __future__ import annotations

from collections.abc import AsyncIterator
from typing import Final

from aiohttp import HttpVersion10, web

from sse_proxy.hosts import shown

__all__ = [
    "ANSWERED",
    "WHOLE_BODY_BYTES",
    "RequestTooLarge",
    "defer_continue",
    "request_body",
    "whole_body",
]

EXPECTS_CONTINUE: Final = web.RequestKey("expects_continue", bool)
"""The client sent ``Expect: 100-continue``, not yet met."""


ANSWERED: Final = web.RequestKey("answered", bool)
"""An answer has started: a ``100 Continue`` can no longer be sent."""


class RequestTooLarge(Exception):
    """The request body outgrew ``max_request_body_bytes``."""


WHOLE_BODY_BYTES: Final = 64 << 10
"""A body declared by a length up to this is read whole and sent on with that length."""


async def whole_body(request: web.Request) -> bytes | None:
    """A small body whose length the client declared, read whole (it came with the head,
    as an LLM request's JSON does): the upstream gets it in one write with its length,
    where a streamed one costs both sides a generator and chunked framing. None: stream it
    (:func:`request_body`): no length, a large one, or a ``100-continue`` to meet first."""
    length = request.content_length
    if length is None or length > WHOLE_BODY_BYTES:
        return None
    if "Expect" in request.headers and request.get(EXPECTS_CONTINUE):
        return None
    content = request.content
    if content.is_eof():  # all of it came with the head: taken as it is, no read loop
        return content.read_nowait()
    return await request.read()


async def request_body(request: web.Request, limit: int) -> AsyncIterator[bytes]:
    """The request body streamed through, not read whole; stops past ``limit`` bytes.

    A client that expects ``100 Continue`` gets it here, when the upstream request first
    asks for the body (:func:`defer_continue`), unless an answer has started already.
    """
    if "Expect" in request.headers and request.get(EXPECTS_CONTINUE) and not request.get(ANSWERED):
        request[EXPECTS_CONTINUE] = False
        writer = request.writer
        await writer.write(b"HTTP/1.1 100 Continue\r\n\r\n")
        writer.output_size = 0  # as aiohttp's own expect handler: the answer is still to come
    seen = 0
    async for chunk in request.content.iter_any():
        seen += len(chunk)
        if seen > limit:
            raise RequestTooLarge
        yield chunk


async def defer_continue(request: web.Request) -> None:
    """The proxy route's ``expect_handler``: ``Expect: 100-continue`` is answered only once
    the request is admitted and its upstream request is under way (:func:`request_body`),
    so a refusal (403, 413, 421, 502, ...) reaches a client that has sent no body. The
    expectation is the proxy's to meet: it is not forwarded."""
    expect = request.headers.get("Expect", "").strip().lower()
    if request.version <= HttpVersion10:
        return
    if expect != "100-continue":
        raise web.HTTPExpectationFailed(text=f"unknown expectation {shown(expect)!r}\n")
    request[EXPECTS_CONTINUE] = True
