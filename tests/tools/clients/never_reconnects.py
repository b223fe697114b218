"""A client that takes a drop for the end: it prints what it had and exits 0."""

from __future__ import annotations

from tests.tools.clients._resume import run

if __name__ == "__main__":
    run(reconnect=False)
