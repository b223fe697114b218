"""Bugs: a line is data only if it starts with exactly ``data:`` (a leading BOM hides the
first one), and every block is JSON-parsed, with or without data."""

from __future__ import annotations

import json
import os

from tests.tools.clients._sse import LineParser, run


class StrictDataPrefix(LineParser):
    def feed(self, text: str) -> None:
        self.first = False  # never strips the BOM
        super().feed(text)

    def line(self, line: str) -> None:
        if not line:
            payload = "\n".join(self.data)
            if os.environ.get("SSE_PROXY_DIALECT", "openai") != "text" and payload != "[DONE]":
                json.loads(payload)  # every block, data or not
            if self.data:
                self.dispatch(self.event or "message", payload)
            self.data, self.event = [], ""
            return
        super().line(line)


if __name__ == "__main__":
    run(StrictDataPrefix)
