"""Bug (BerriAI/litellm#25172, microsoft/vscode#330038): ``tool_calls`` present means no text.

Otherwise correct: a delta with a ``tool_calls`` key goes to the tool-call branch and its
content is never read, so ``tool_calls: []`` beside the text loses all the text.
"""

from __future__ import annotations

import json

from tests.tools.clients._sse import LineParser, delta_text, run


def calls_or_content(dialect: str, event: str, data: str) -> str:
    if dialect != "openai" or data == "[DONE]":
        return delta_text(dialect, event, data)
    text = ""
    for choice in json.loads(data).get("choices") or []:
        delta = choice.get("delta") or {}
        if choice.get("index") or "tool_calls" in delta:  # the bug: [] is no call
            continue
        text += delta.get("content") or ""
    return text


if __name__ == "__main__":
    run(LineParser, report_faults=True, text_of=calls_or_content)
