"""A careful client that reads until the connection closes, not until the terminal marker:
a body left open after the marker hangs it."""

from __future__ import annotations

from tests.tools.clients._sse import LineParser, run

if __name__ == "__main__":
    run(LineParser, report_faults=True, stop_at_marker=False)
