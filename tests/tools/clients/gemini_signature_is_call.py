"""Bug (googleapis/python-genai#1938, langchain-ai/langchainjs#9624): a signature means a call.

Otherwise correct: Gemini 3 puts the first call's ``thoughtSignature`` on its
``functionCall`` part, so this client pairs the two by part: a part with a signature is
read as the call it signs. A signature on a part of its own (an empty thought part before
the call) crashes it.
"""

from __future__ import annotations

import json

from tests.tools.clients._sse import LineParser, ToolCalls, run


class SignatureIsCall(ToolCalls):
    def __init__(self, dialect: str) -> None:
        super().__init__(dialect)
        self.signatures: dict[str, str] = {}

    def event(self, event: str, data: str) -> None:
        if self.dialect != "gemini" or not data.startswith("{"):
            super().event(event, data)
            return
        for cand in json.loads(data).get("candidates") or []:
            for part in (cand.get("content") or {}).get("parts") or []:
                if "thoughtSignature" in part:
                    signed = part["functionCall"]  # the bug: KeyError on a signature alone
                    self.signatures[signed["name"]] = part["thoughtSignature"]
                fc = part.get("functionCall")
                if fc:
                    n = len(self.calls)
                    call = self.call(n, n)
                    call.name = fc.get("name")
                    call.args.append(json.dumps(fc.get("args") or {}))


if __name__ == "__main__":
    run(LineParser, report_faults=True, calls=SignatureIsCall)
