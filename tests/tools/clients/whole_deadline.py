"""A careful client with a deadline on the whole answer (2.5 s) that stops at the terminal
marker: every fault in time ends it in time, comments or not."""

from __future__ import annotations

from tests.tools.clients._sse import LineParser, run

if __name__ == "__main__":
    run(LineParser, report_faults=True, whole_deadline=2.5)
