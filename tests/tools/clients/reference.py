"""A correct SSE client (stdlib only): the harness must pass it on every case, faults and
stalls included: it stops at the terminal marker and gives up after 4 s without text
(within the default patience of 5 s)."""

from __future__ import annotations

from tests.tools.clients._sse import LineParser, run

if __name__ == "__main__":
    run(LineParser, report_faults=True, stall_after=4.0)
