"""Is this an event stream at all? A look at the first bytes of a capture.

`sse-proxy check` and `test-client --fixture` are handed whatever a user captured: often
an SSE stream, sometimes the JSON body of an HTTP 401, an HTML error page, `curl -i`
output with the headers in front, or binary. The WHATWG grammar accepts any bytes (unknown
fields are ignored), so parsing them "works" and yields misleading alerts; this names
what the input looks like instead.
"""

from __future__ import annotations

import json
import re
from typing import Final

__all__ = ["HEAD_BYTES", "looks_like"]

HEAD_BYTES: Final = 64 * 1024
"""How much of the input is looked at."""

_FIELD = re.compile(rb"^(?:data|event|id|retry)(?::|$)|^:")
_LINES = re.compile(rb"\r\n|\r|\n")
_CONTROL = re.compile(r"[\x00-\x08\x0b\x0e-\x1f\x7f]")


def looks_like(head: bytes) -> str | None:
    """``None`` when ``head`` has SSE structure; otherwise what the input looks like.

    SSE structure is any line that is a ``data``, ``event``, ``id`` or ``retry`` field or
    a comment. Empty or whitespace-only input is ``None`` too (an empty stream is the
    caller's finding, not a format).
    """
    head = head[:HEAD_BYTES].removeprefix(b"\xef\xbb\xbf")
    if not head.strip():
        return None
    if any(_FIELD.match(line) for line in _LINES.split(head)):
        return None
    text = head.decode("utf-8", "replace")
    odd = text.count("\ufffd") + len(_CONTROL.findall(text))
    if 0 in head or odd > max(2, len(text) // 100):
        return f"binary data ({len(head)} bytes looked at, {odd} invalid or control characters)"
    body = text.strip()
    if body.startswith(("{", "[")):
        detail = ""
        try:
            obj = json.loads(body)
        except (ValueError, RecursionError):
            obj = None
        if isinstance(obj, dict) and "error" in obj:
            detail = ' with an "error" member: an HTTP error response'
        return f"a JSON body{detail}, not an event stream"
    lower = body[:200].lower()
    if lower.startswith("<"):
        kind = "an HTML page" if ("<html" in lower or "<!doctype" in lower) else "markup (XML/HTML)"
        return f"{kind}, not an event stream"
    if body.startswith("HTTP/"):
        return (
            "an HTTP response with its status line and headers in front "
            "(capture the body only: curl -N, without -i)"
        )
    return "plain text without any SSE field (data:, event:, id:, retry:) or comment"
