"""Bug: ignores a tool-call fragment's ``index``, so parallel calls merge into one.

Otherwise correct: every fragment goes to one call, named after the last name seen.
"""

from __future__ import annotations

from tests.tools.clients._sse import LineParser, ToolCalls, run


class MergeCalls(ToolCalls):
    def fragment(self, key: object, order: int, fragment: dict[str, object]) -> None:
        super().fragment(0, 0, fragment)


if __name__ == "__main__":
    run(LineParser, calls=MergeCalls)
