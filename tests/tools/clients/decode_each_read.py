"""Bug: decodes every read on its own, so a character cut across reads becomes U+FFFD."""

from __future__ import annotations

from tests.tools.clients._sse import LineParser, run

if __name__ == "__main__":
    run(LineParser, decode_each_read=True)
