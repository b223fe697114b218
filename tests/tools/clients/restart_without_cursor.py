"""A client that reconnects after a drop without its cursor (no Last-Event-ID, no
starting_after): the stream comes again from its start, and it shows what it had twice."""

from __future__ import annotations

from tests.tools.clients._resume import run

if __name__ == "__main__":
    run(cursor=False)
