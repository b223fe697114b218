"""The client's body bytes, written with one call per read.

``StreamResponse.write`` costs two coroutines, a formatted chunk header and a list join per
call; at one token per read that is as much as observing the token. Once aiohttp has sent
the headers (with the first body write, which goes through it), a response that aiohttp
frames as HTTP/1.1 chunked, uncompressed, gets each further chunk from :meth:`send`: one
``transport.write`` of the framed bytes, aiohttp's byte counters kept as it keeps them,
and its flow control honoured as it does it (a drain every 64 KiB written, which waits
only while the transport is paused). Anything else (HTTP/1.0, compression, a declared
length, an aiohttp whose writer :func:`.aiohttp_internals.chunked_writer` does not know)
stays on ``StreamResponse.write``.
"""

from __future__ import annotations

import asyncio

import aiohttp
from aiohttp import web
from aiohttp.abc import AbstractStreamWriter

from sse_proxy.server.aiohttp_internals import chunked_writer

__all__ = ["ClientGone", "ClientWriter", "cut_off"]

_DRAIN_EVERY = 0x10000  # aiohttp's StreamWriter.write's own LIMIT
_COPY_UP_TO = 2048  # a token's read is framed in one small copy; a larger one by parts
_GONE = (ConnectionError, aiohttp.ClientConnectionError, RuntimeError)


class ClientGone(Exception):
    """The client's connection is gone: nothing more can be written to it."""


class ClientWriter:
    """Body writes to one response: ``if not w.send(data): await w.write(data)``."""

    __slots__ = ("_decided", "_request", "_resp", "_transport", "_writer")

    def __init__(self, resp: web.StreamResponse, request: web.BaseRequest) -> None:
        self._resp = resp
        self._request = request
        self._writer: AbstractStreamWriter | None = None
        self._transport: asyncio.Transport | None = None
        self._decided = False

    def send(self, data: bytes) -> bool:
        """Write ``data`` now if nothing needs awaiting; False: ``await write(data)``."""
        writer = self._writer
        n = len(data)
        if writer is None or writer.buffer_size + n > _DRAIN_EVERY:
            return False
        transport = self._transport
        assert transport is not None
        if transport.is_closing():
            raise ClientGone("the client's connection is closing")
        if n:  # an empty chunk would end the body; the rest is _put, inlined (per token)
            if n > _COPY_UP_TO:
                self._put(writer, data)
                return True
            framed = b"%x\r\n%b\r\n" % (n, data)
            transport.write(framed)
            n = len(framed)
            writer.output_size += n
            writer.buffer_size += n
        return True

    async def write(self, data: bytes) -> None:
        """Any write: the first (the headers go with it), one that is due a drain, or one
        that is aiohttp's to frame."""
        try:
            writer = self._writer
            if writer is None:
                await self._resp.write(data)
                if not self._decided:
                    self._decided = True  # once, after the headers went out
                    self._take_over()
                return
            if data:
                self._put(writer, data)
            if writer.buffer_size > _DRAIN_EVERY:
                writer.buffer_size = 0
                await writer.drain()
        except _GONE as exc:
            raise ClientGone(str(exc)) from exc

    def _put(self, writer: AbstractStreamWriter, data: bytes) -> None:
        transport = self._transport
        assert transport is not None
        if transport.is_closing():
            raise ClientGone("the client's connection is closing")
        size = len(data)
        if size > _COPY_UP_TO:  # framed without copying the data: a large copy holds the loop
            head = b"%x\r\n" % size
            transport.writelines((head, data, b"\r\n"))
            size += len(head) + 2
        else:
            framed = b"%x\r\n%b\r\n" % (size, data)
            transport.write(framed)
            size = len(framed)
        writer.output_size += size
        writer.buffer_size += size

    def _take_over(self) -> None:
        found = chunked_writer(self._request, self._resp)
        if found is not None:
            self._writer, self._transport = found


def cut_off(request: web.Request) -> None:
    """End the client's response without its terminating chunk: never a fake completion."""
    transport = request.transport
    if transport is not None:
        transport.close()
