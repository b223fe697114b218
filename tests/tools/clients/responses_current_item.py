"""Bug (earendil-works/pi#6009): one "current item", finished by the next ``done``.

Otherwise correct (the text is read from ``output_text.delta``): the calls are assembled in
the item last added and collected when an ``output_item.done`` comes, whatever item that
``done`` is about; when an earlier item finishes after a later one, the later call is
collected twice and the order breaks.
"""

from __future__ import annotations

import json

from tests.tools.clients._sse import Call, LineParser, ToolCalls, run


class CurrentItem(ToolCalls):
    def __init__(self, dialect: str) -> None:
        super().__init__(dialect)
        self.current: tuple[str, Call] | None = None
        self.finished: list[Call] = []

    def event(self, event: str, data: str) -> None:
        if self.dialect != "responses" or not data.startswith("{"):
            super().event(event, data)
            return
        obj = json.loads(data)
        kind = obj.get("type")
        if kind == "response.output_item.added":
            item = obj.get("item") or {}
            self.current = (str(item.get("type")), Call(name=item.get("name")))
        elif kind == "response.function_call_arguments.delta" and self.current is not None:
            self.current[1].args.append(obj.get("delta") or "")
        elif (
            kind == "response.output_item.done"
            and self.current is not None
            and self.current[0] == "function_call"  # the bug: the current item, not obj's
        ):
            self.finished.append(self.current[1])

    def lines(self) -> str:
        if self.dialect != "responses":
            return super().lines()
        return "".join(f"\ntool_call {c.name} {''.join(c.args) or '{}'}" for c in self.finished)


if __name__ == "__main__":
    run(LineParser, report_faults=True, calls=CurrentItem)
