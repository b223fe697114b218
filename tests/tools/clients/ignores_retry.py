"""A client that resumes from the right cursor, but at once: it ignores the stream's
retry delay."""

from __future__ import annotations

from tests.tools.clients._resume import run

if __name__ == "__main__":
    run(honour_retry=False)
