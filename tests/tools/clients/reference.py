"""A correct SSE client (stdlib only): the harness must pass it on every case, faults included."""

from __future__ import annotations

from tests.tools.clients._sse import LineParser, run

if __name__ == "__main__":
    run(LineParser, report_faults=True)
