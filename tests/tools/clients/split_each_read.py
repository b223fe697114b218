"""Bug: splits each read on blank lines and parses the pieces, keeping nothing across reads."""

from __future__ import annotations

import json

from tests.tools.clients._sse import Dispatch, run


class SplitEachRead:
    """The classic: ``for block in read.split("\\n\\n")``; a partial frame is just skipped."""

    def __init__(self, dispatch: Dispatch) -> None:
        self.dispatch = dispatch

    def feed(self, text: str) -> None:
        for block in text.split("\n\n"):
            data = [line[6:] for line in block.split("\n") if line.startswith("data: ")]
            if not data:
                continue
            try:
                self.dispatch("message", "\n".join(data))
            except (json.JSONDecodeError, ValueError):
                continue  # "incomplete JSON, must be a network glitch"


if __name__ == "__main__":
    run(SplitEachRead)
