"""A careful client whose only deadline is a read timeout (1 s between two reads): it
reports a silent stall and stops at the terminal marker, but a stall kept alive by
comments never ends it, nor does a drip."""

from __future__ import annotations

from tests.tools.clients._sse import LineParser, run

if __name__ == "__main__":
    run(LineParser, report_faults=True, read_timeout=1.0)
