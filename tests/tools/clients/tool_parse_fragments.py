"""Bug: parses every tool-call argument fragment as JSON the moment it arrives.

Otherwise correct: it crashes on the first fragment that is not a whole JSON text.
"""

from __future__ import annotations

import json

from tests.tools.clients._sse import LineParser, ToolCalls, run


class ParseEachFragment(ToolCalls):
    def fragment(self, key: object, order: int, fragment: dict[str, object]) -> None:
        fn = fragment.get("function") or {}
        assert isinstance(fn, dict)
        if fn.get("arguments"):
            json.loads(str(fn["arguments"]))  # "the arguments are JSON"
        super().fragment(key, order, fragment)


if __name__ == "__main__":
    run(LineParser, calls=ParseEachFragment)
