"""A correct resuming client (stdlib only): after a drop it reconnects after the retry
delay from its cursor (raw SSE: Last-Event-ID; Responses: starting_after), and stops at a
204 or at response.completed. The resume group must pass it."""

from __future__ import annotations

from tests.tools.clients._resume import run

if __name__ == "__main__":
    run()
