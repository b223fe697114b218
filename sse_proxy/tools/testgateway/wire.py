"""HTTP/1.1 as the case router sees it: a request to read whole, a response to decode read
by read. Pure functions and small state machines over bytes; the router does the I/O.

The router splices the upstream's response to the gateway byte for byte, so what the gateway
was sent is the raw response; :class:`ResponseDecoder` turns each raw read into the body
bytes it carried (chunked or not), so that every body byte keeps the time its read left.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Final

from sse_proxy.errors import ProxyError

__all__ = [
    "MAX_HEAD",
    "RequestHead",
    "ResponseDecoder",
    "WireError",
    "decode_chunked",
    "parse_request_head",
    "request_model",
    "with_model",
]

MAX_HEAD: Final = 64 * 1024


class WireError(ProxyError):
    """A request the router cannot read (bad HTTP, or too large)."""


@dataclass(frozen=True, slots=True)
class RequestHead:
    """A request line and its headers, in order, names as sent."""

    method: str
    target: str
    version: str
    headers: tuple[tuple[str, str], ...]

    def get(self, name: str) -> str | None:
        low = name.lower()
        return next((v for k, v in self.headers if k.lower() == low), None)

    @property
    def path(self) -> str:
        return self.target.split("?", 1)[0]

    def encode(self, body: bytes, *, drop: frozenset[str], extra: dict[str, str]) -> bytes:
        """The request as it goes on: ``drop`` names removed, ``extra`` added, the body
        with its length (a chunked request body is passed on whole)."""
        removed = drop | {"content-length", "transfer-encoding", "connection", "expect"}
        lines = [f"{self.method} {self.target} HTTP/1.1"]
        lines += [f"{k}: {v}" for k, v in self.headers if k.lower() not in removed]
        lines += [f"{k}: {v}" for k, v in extra.items()]
        lines += [f"Content-Length: {len(body)}", "Connection: close", "", ""]
        return "\r\n".join(lines).encode("latin-1") + body


def parse_request_head(head: bytes) -> RequestHead:
    """The head of a request, up to and including its blank line."""
    if len(head) > MAX_HEAD:
        raise WireError("request head too large")
    lines = head.decode("latin-1").split("\r\n")
    parts = lines[0].split(" ")
    if len(parts) != 3 or not parts[2].startswith("HTTP/1."):
        raise WireError(f"not an HTTP/1.x request line: {lines[0][:80]!r}")
    headers: list[tuple[str, str]] = []
    for line in lines[1:]:
        if not line:
            continue
        name, sep, value = line.partition(":")
        if not sep or not name.strip():
            raise WireError(f"bad header line: {line[:80]!r}")
        headers.append((name.strip(), value.strip()))
    return RequestHead(parts[0], parts[1], parts[2], tuple(headers))


def decode_chunked(data: bytes) -> tuple[bytes, int] | None:
    """A whole chunked body at the start of ``data``: (body, bytes used); None while it is
    incomplete. Trailers are read and dropped."""
    out = bytearray()
    pos = 0
    while True:
        end = data.find(b"\r\n", pos)
        if end < 0:
            return None
        try:
            size = int(data[pos:end].split(b";", 1)[0].strip(), 16)
        except ValueError:
            raise WireError("bad chunk size in the request body") from None
        pos = end + 2
        if size == 0:
            while True:  # trailers, then the blank line
                end = data.find(b"\r\n", pos)
                if end < 0:
                    return None
                if end == pos:
                    return bytes(out), end + 2
                pos = end + 2
        if len(data) < pos + size + 2:
            return None
        out += data[pos : pos + size]
        pos += size + 2


def request_model(body: bytes) -> str | None:
    """The ``model`` of a JSON request body, if it has one."""
    try:
        doc = json.loads(body)
    except ValueError:
        return None
    model = doc.get("model") if isinstance(doc, dict) else None
    return model if isinstance(model, str) else None


def with_model(body: dict[str, Any], model: str) -> dict[str, Any]:
    """A copy of a request body with another ``model``."""
    return {**body, "model": model}


@dataclass(slots=True)
class ResponseDecoder:
    """An HTTP/1.1 response, fed raw read by read: status, headers, and per read the body
    bytes it completed. ``complete``: the body ended as HTTP says it does (the last chunk,
    the announced length), not by the connection closing early."""

    status: int | None = None
    headers: dict[str, str] = field(default_factory=dict)
    complete: bool = False
    _buf: bytearray = field(default_factory=bytearray)
    _chunked: bool = False
    _left: int | None = None  # bytes of the current chunk (or the whole body) still to come
    _until_close: bool = False
    _trailers: bool = False

    def feed(self, raw: bytes) -> bytes:
        """The body bytes ``raw`` completed (those of a chunk as they arrive)."""
        self._buf += raw
        if self.status is None and not self._head():
            return b""
        return self._body()

    def _head(self) -> bool:
        end = self._buf.find(b"\r\n\r\n")
        if end < 0:
            return False
        lines = bytes(self._buf[:end]).decode("latin-1").split("\r\n")
        del self._buf[: end + 4]
        try:
            self.status = int(lines[0].split(" ")[1])
        except (IndexError, ValueError):
            raise WireError(f"not an HTTP response: {lines[0][:80]!r}") from None
        for line in lines[1:]:
            name, _, value = line.partition(":")
            self.headers[name.strip().lower()] = value.strip()
        if "chunked" in self.headers.get("transfer-encoding", "").lower():
            self._chunked = True
        elif "content-length" in self.headers:
            self._left = int(self.headers["content-length"])
            self.complete = self._left == 0
        else:
            self._until_close = True
        return True

    def _body(self) -> bytes:
        buf = self._buf
        if self._until_close or (not self._chunked and self._left is not None):
            take = len(buf) if self._left is None else min(self._left, len(buf))
            whole = bytes(buf[:take])
            del buf[:take]
            if self._left is not None:
                self._left -= take
                self.complete = self._left == 0
            return whole
        out = bytearray()
        while buf and not self.complete:
            if self._trailers:
                end = buf.find(b"\r\n")
                if end < 0:
                    break
                del buf[: end + 2]
                self.complete = end == 0
                continue
            if self._left is None:
                end = buf.find(b"\r\n")
                if end < 0:
                    break
                size = int(bytes(buf[:end]).split(b";", 1)[0].strip() or b"0", 16)
                del buf[: end + 2]
                if size == 0:
                    self._trailers = True
                    continue
                self._left = size + 2  # the data and its CRLF
            data_left = self._left - 2
            take = min(len(buf), self._left)
            out += buf[: min(take, max(data_left, 0))]
            del buf[:take]
            self._left -= take
            if self._left == 0:
                self._left = None
        return bytes(out)
