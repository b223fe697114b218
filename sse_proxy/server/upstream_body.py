"""An upstream body read without aiohttp's per-chunk bookkeeping (issue 23).

An LLM API writes one HTTP chunk per event. For each, aiohttp's client ``StreamReader``
runs three Python calls as its parser meets the chunk (``begin_http_chunk_receiving``,
``feed_data``, ``end_http_chunk_receiving``: the first and last only record chunk
boundaries for ``readchunk``), and ``readany`` then drains its buffer chunk by chunk,
asking the protocol to resume reading after every one (which, from aiohttp 3.13 on,
runs the protocol's ``data_received`` again with no data). That is most of a bare
aiohttp proxy's CPU per event.

The relay reads with ``readany`` only. :func:`lean_body` turns a response's body reader
into a :class:`LeanBody`: the same object, its class swapped for a subclass that keeps
no chunk boundaries and, draining, takes the whole buffer at once and resumes reading
only if it was paused. Everything else (``feed_data``, ``feed_eof``, exceptions, EOF
callbacks, the high-water pause) is aiohttp's own. Where the installed aiohttp's reader
lacks what this relies on, the body is left as it is.
"""

from __future__ import annotations

from typing import Final

from aiohttp.streams import StreamReader

__all__ = ["LeanBody", "lean_body"]

_RELIES_ON: Final = (
    "_buffer",
    "_buffer_offset",
    "_size",
    "_cursor",
    "_eof",
    "_exception",
    "_http_chunk_splits",
    "_protocol",
    "_timer",
)


class LeanBody(StreamReader):
    """aiohttp's body reader for ``readany`` alone (see the module's docstring)."""

    __slots__ = ()

    def begin_http_chunk_receiving(self) -> None:
        """No chunk boundaries are kept: ``readchunk`` is not used on this body."""

    def end_http_chunk_receiving(self) -> None:
        """No chunk boundaries; ``feed_data`` has woken the reader already."""

    async def readany(self) -> bytes:
        if self._exception is not None:
            raise self._exception
        while not self._buffer and not self._eof:
            await self._wait("readany")
        buffer = self._buffer
        if not buffer or self._buffer_offset:  # (at EOF; or a partial read before)
            return self._read_nowait(-1)
        self._timer.assert_timeout()
        data = buffer.popleft() if len(buffer) == 1 else b"".join(buffer)
        buffer.clear()
        self._size = 0
        self._cursor += len(data)
        protocol = self._protocol
        if getattr(protocol, "_reading_paused", True):
            protocol.resume_reading()
        return data


_USABLE: Final = all(name in getattr(StreamReader, "__slots__", ()) for name in _RELIES_ON)


def lean_body(content: StreamReader) -> bool:
    """Make ``content`` (a response's body, not yet read) a :class:`LeanBody` if it is
    aiohttp's plain reader; True if it now is one."""
    if type(content) is LeanBody:
        return True
    if not _USABLE or type(content) is not StreamReader:
        return False
    content.__class__ = LeanBody
    content._http_chunk_splits = None  # boundaries the parser noted before: not wanted
    return True
