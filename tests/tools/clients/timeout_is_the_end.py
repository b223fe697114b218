"""A client that takes a read timeout (1 s) for the end of the answer and exits 0 with
what it has: a silent stall becomes a silent truncation."""

from __future__ import annotations

from tests.tools.clients._sse import LineParser, run

if __name__ == "__main__":
    run(LineParser, read_timeout=1.0, deadline_is_the_end=True)
