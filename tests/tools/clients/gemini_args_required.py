"""Bug (vercel/ai#14847, fixed by vercel/ai#14968): a Gemini call counts only with ``args``.

Otherwise correct: a ``functionCall`` part is taken for a call when it has ``args`` (or
streams them), so a call to a tool that takes no arguments, sent whole without ``args``,
is silently dropped.
"""

from __future__ import annotations

import json

from tests.tools.clients._sse import LineParser, ToolCalls, run


class ArgsRequired(ToolCalls):
    def event(self, event: str, data: str) -> None:
        if self.dialect != "gemini" or not data.startswith("{"):
            super().event(event, data)
            return
        for cand in json.loads(data).get("candidates") or []:
            for part in (cand.get("content") or {}).get("parts") or []:
                fc = part.get("functionCall")
                if fc and "args" in fc:  # the bug: no args, no call
                    n = len(self.calls)
                    call = self.call(n, n)
                    call.name = fc.get("name")
                    call.args.append(json.dumps(fc["args"]))


if __name__ == "__main__":
    run(LineParser, report_faults=True, calls=ArgsRequired)
