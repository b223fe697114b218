"""Bug: takes a tool call's id and name from its first fragment, and skips that fragment's
arguments ("the first fragment only announces the call").

Otherwise correct: it passes OpenAI's own shape, whose announcing fragment has empty
arguments, and loses arguments whenever a provider sends some with the id.
"""

from __future__ import annotations

from tests.tools.clients._sse import LineParser, ToolCalls, run


class DropIdFragment(ToolCalls):
    def fragment(self, key: object, order: int, fragment: dict[str, object]) -> None:
        if fragment.get("id"):
            fn = dict(fragment.get("function") or {})  # type: ignore[call-overload]
            fragment = {**fragment, "function": {**fn, "arguments": ""}}
        super().fragment(key, order, fragment)


if __name__ == "__main__":
    run(LineParser, calls=DropIdFragment)
