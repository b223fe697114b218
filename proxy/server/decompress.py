"""An incrementally decompressed copy of a compressed body, for the observer only.

The client always gets the bytes exactly as upstream sent them; the reassembler reads this
copy so that alerts work on gzip/deflate/br streams too. Output per call is bounded, so a
decompression bomb cannot blow up memory: what the observer cannot take is skipped and
reported by the caller as a decode failure.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable

__all__ = ["DecodeFailed", "make_observer_decoder"]

_MAX_OUT = 4 << 20  # per upstream chunk


class DecodeFailed(Exception):
    """The compressed body could not be decoded (corrupt, or an unknown coding)."""


def make_observer_decoder(content_encoding: str | None) -> Callable[[bytes], bytes] | None:
    """A ``decode(chunk) -> bytes`` for the body's coding, ``None`` for identity.

    Raises :class:`DecodeFailed` for a coding we cannot decode (the proxy then forwards
    without observing).
    """
    coding = (content_encoding or "").strip().lower()
    if coding in ("", "identity"):
        return None
    if coding in ("gzip", "x-gzip"):
        return _zlib(zlib.decompressobj(wbits=31))
    if coding == "deflate":
        return _deflate()
    if coding == "br":
        import brotli

        dec = brotli.Decompressor()

        def brotli_decode(chunk: bytes) -> bytes:
            try:
                out: bytes = dec.process(chunk)
            except brotli.error as exc:
                raise DecodeFailed(f"br: {exc}") from None
            return out

        return brotli_decode
    raise DecodeFailed(f"unsupported content-encoding {coding!r}")


def _zlib(obj: zlib._Decompress) -> Callable[[bytes], bytes]:
    def decode(chunk: bytes) -> bytes:
        try:
            return obj.decompress(chunk, _MAX_OUT)
        except zlib.error as exc:
            raise DecodeFailed(str(exc)) from None

    return decode


def _deflate() -> Callable[[bytes], bytes]:
    """HTTP "deflate" is zlib-wrapped by the spec, raw deflate by many servers: try both."""
    state: dict[str, zlib._Decompress] = {}

    def decode(chunk: bytes) -> bytes:
        obj = state.get("d")
        if obj is None:
            obj = zlib.decompressobj(wbits=15)
            try:
                out = obj.decompress(chunk, _MAX_OUT)
            except zlib.error:
                obj = zlib.decompressobj(wbits=-15)
                try:
                    out = obj.decompress(chunk, _MAX_OUT)
                except zlib.error as exc:
                    raise DecodeFailed(str(exc)) from None
            state["d"] = obj
            return out
        try:
            return obj.decompress(chunk, _MAX_OUT)
        except zlib.error as exc:
            raise DecodeFailed(str(exc)) from None

    return decode
