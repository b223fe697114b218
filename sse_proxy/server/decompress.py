"""An incrementally decompressed copy of a compressed body, for the observer only.

The client always gets the bytes exactly as upstream sent them; the reassembler reads this
copy so that alerts work on gzip/deflate/br streams too. Three bounds keep that copy safe:

- **memory**: each decompressor call is capped at ``slice_bytes`` of output, and input the
  decompressor has not consumed yet (zlib's ``unconsumed_tail``, brotli's internal tail) is
  fed back in a loop, so no output byte is ever dropped and one small chunk never expands
  into one huge buffer;
- **time**: the output comes as slices of at most ``slice_bytes``, so the caller can hand
  them to the reassembler one at a time and let other streams run in between;
- **work**: a body that expands past ``max_ratio`` (judged once the output passes
  :data:`RATIO_FLOOR`, so a short answer's header-heavy start never trips it) or past
  ``max_bytes`` in all is a decompression bomb: :class:`DecodeFailed` with reason
  ``decompression_bomb``, and the caller stops observing while it keeps forwarding.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterator
from typing import Any, Protocol

import brotli

__all__ = [
    "DEFAULT_SLICE",
    "RATIO_FLOOR",
    "DecodeFailed",
    "ObserverDecoder",
    "make_observer_decoder",
]

DEFAULT_SLICE = 32 << 10
"""Largest piece of output one decompressor call makes and one reassembler step reads: no
more than one socket read of a plain stream, so a compressed stream holds the event loop no
longer per step than a plain one (a larger slice of pathological text holds it too long;
a smaller one gains nothing)."""

RATIO_FLOOR = 16 << 20
"""The expansion ratio is judged only once this much output has come out: below it the
observer's work is small whatever the ratio (and a short, very repetitive answer is read
whole); above it, a high ratio is a bomb's signature, not an answer's."""


class DecodeFailed(Exception):
    """The observer cannot (or must not) read this body further; the client still gets it.

    ``reason`` is a short code for the ``stream.not_observed`` log line
    (``unsupported_encoding``, ``decode_error``, ``decompression_bomb``) and ``details``
    the fields that go with it.
    """

    def __init__(self, reason: str, message: str, **details: Any) -> None:
        super().__init__(message)
        self.reason = reason
        self.details = details


class _Inflater(Protocol):
    def run(self, chunk: bytes, budget: int) -> Iterator[bytes]:
        """All the output ``chunk`` makes available now, in pieces of about ``budget``."""
        ...  # pragma: no cover


class ObserverDecoder:
    """``feed(chunk)`` yields the decompressed copy of ``chunk`` in bounded slices.

    Every byte the compressed stream holds comes out, whatever the chunk sizes: the
    concatenated output does not depend on where upstream's reads were cut.
    """

    def __init__(
        self,
        coding: str,
        inflater: _Inflater,
        *,
        max_ratio: float,
        max_bytes: int,
        slice_bytes: int = DEFAULT_SLICE,
    ) -> None:
        if slice_bytes < 1 or max_bytes < 1 or max_ratio < 1:
            raise ValueError("slice_bytes, max_bytes and max_ratio must be at least 1")
        self.coding = coding
        self._inflater = inflater
        self.max_ratio = max_ratio
        self.max_bytes = max_bytes
        self.slice_bytes = slice_bytes
        self.bytes_in = 0
        self.bytes_out = 0

    def feed(self, chunk: bytes) -> Iterator[bytes]:
        """Decompress ``chunk``; raises :class:`DecodeFailed` (corrupt input or a bomb).

        A slice that would cross a bound is not yielded: the observer never reads past it.
        """
        self.bytes_in += len(chunk)
        step = self.slice_bytes
        for out in self._inflater.run(chunk, step):
            for start in range(0, len(out), step):
                piece = out[start : start + step] if len(out) > step else out
                self.bytes_out += len(piece)
                self._check()
                yield piece

    def _check(self) -> None:
        out = self.bytes_out
        if out > self.max_bytes:
            raise self._bomb("size", f"more than {self.max_bytes} bytes decompressed")
        if out > RATIO_FLOOR and out > self.max_ratio * self.bytes_in:
            raise self._bomb("ratio", f"expanded more than {self.max_ratio:g}x")

    def _bomb(self, limit: str, message: str) -> DecodeFailed:
        return DecodeFailed(
            "decompression_bomb",
            f"{self.coding}: {message}",
            coding=self.coding,
            limit=limit,
            compressed_bytes=self.bytes_in,
            decompressed_bytes=self.bytes_out,
            ratio=round(self.bytes_out / max(self.bytes_in, 1), 1),
            max_ratio=self.max_ratio,
            max_bytes=self.max_bytes,
        )


def make_observer_decoder(
    content_encoding: str | None,
    *,
    max_ratio: float = 100.0,
    max_bytes: int = 256 << 20,
    slice_bytes: int = DEFAULT_SLICE,
) -> ObserverDecoder | None:
    """An :class:`ObserverDecoder` for the body's coding, ``None`` for identity.

    Raises :class:`DecodeFailed` for a coding we cannot decode (the proxy then forwards
    without observing).
    """
    coding = (content_encoding or "").strip().lower()
    inflater: _Inflater
    if coding in ("", "identity"):
        return None
    if coding in ("gzip", "x-gzip"):
        inflater = _ZlibInflater(coding, gzip=True)
    elif coding == "deflate":
        inflater = _ZlibInflater(coding, gzip=False)
    elif coding == "br":
        inflater = _BrotliInflater()
    else:
        raise DecodeFailed(
            "unsupported_encoding",
            f"unsupported content-encoding {coding!r}",
            coding=coding,
        )
    return ObserverDecoder(
        coding, inflater, max_ratio=max_ratio, max_bytes=max_bytes, slice_bytes=slice_bytes
    )


def _failed(coding: str, error: object) -> DecodeFailed:
    return DecodeFailed("decode_error", f"{coding}: {error}", coding=coding, error=str(error))


class _ZlibInflater:
    """gzip (several members allowed, zero padding between them skipped) or HTTP deflate.

    HTTP "deflate" is zlib-wrapped by the spec and raw deflate from many servers: the first
    two bytes decide (a zlib header is ``CMF FLG`` with method 8 and ``CMF*256+FLG``
    divisible by 31; raw deflate from zlib never starts that way), so the choice does not
    depend on how the first read was cut. Data after the end of a deflate stream is ignored.
    """

    def __init__(self, coding: str, *, gzip: bool) -> None:
        self._coding = coding
        self._gzip = gzip
        self._obj: zlib._Decompress | None = None
        self._head = b""  # deflate: bytes held until the first two decide the format
        self._done = False  # deflate: the stream ended; the rest is ignored

    def run(self, chunk: bytes, budget: int) -> Iterator[bytes]:
        data = chunk
        while data or self._obj is not None:
            obj = self._obj
            if obj is None:
                if self._done:
                    return
                obj, data = self._start(data)
                if obj is None:
                    return  # gzip padding, or too few bytes to tell the deflate format
                self._obj = obj
            try:
                out = obj.decompress(data, budget)
            except zlib.error as exc:
                raise _failed(self._coding, exc) from None
            if out:
                yield out
            if obj.eof:
                # At the end, the input left over is in unused_data (unconsumed_tail may
                # still hold a stale copy of it: never read both).
                self._obj = None
                if not self._gzip:
                    self._done = True
                    return
                data = obj.unused_data
                continue
            data = obj.unconsumed_tail
            if not data and len(out) < budget:
                return  # all input consumed, and zlib had room: nothing is pending

    def _start(self, data: bytes) -> tuple[zlib._Decompress | None, bytes]:
        """A decompressor for the member or stream ``data`` starts, and the bytes to feed it.

        ``None`` when there is nothing to start yet (only gzip padding, or fewer than two
        bytes of a deflate stream, which are held).
        """
        if self._gzip:
            data = data.lstrip(b"\0")
            return (zlib.decompressobj(wbits=31) if data else None), data
        head = self._head + data
        if len(head) < 2:
            self._head = head
            return None, b""
        self._head = b""
        zlib_wrapped = head[0] & 0x0F == 8 and (head[0] << 8 | head[1]) % 31 == 0
        return zlib.decompressobj(wbits=15 if zlib_wrapped else -15), head


class _BrotliInflater:
    """brotli through ``Decompressor.process(data, output_buffer_limit=...)`` (brotli >= 1.2).

    With a limit, ``process`` keeps the input it has not consumed and must then be called
    with empty input until ``can_accept_more_data()``; output can also stay pending inside
    the decoder after all input is consumed, which a full buffer (output at the limit)
    signals. Both are drained here, so nothing is lost.
    """

    def __init__(self) -> None:
        self._dec = brotli.Decompressor()

    def run(self, chunk: bytes, budget: int) -> Iterator[bytes]:
        dec = self._dec
        data = chunk
        while True:
            try:
                out: bytes = dec.process(data, output_buffer_limit=budget)
                more = not dec.can_accept_more_data()
            except brotli.error as exc:
                raise _failed("br", exc) from None
            data = b""
            if out:
                yield out
            if not more and len(out) < budget:
                return
