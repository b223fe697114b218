"""Bug (BerriAI/litellm#36327, #27492): reasoning and answer text read with ``elif``.

Otherwise correct: a delta that carries ``reasoning_content`` is taken for reasoning only,
so the answer text beside it, in the chunk where the reasoning ends, is lost.
"""

from __future__ import annotations

import json

from tests.tools.clients._sse import LineParser, delta_text, run


def reasoning_or_content(dialect: str, event: str, data: str) -> str:
    if dialect != "openai" or data == "[DONE]":
        return delta_text(dialect, event, data)
    text = ""
    for choice in json.loads(data).get("choices") or []:
        delta = choice.get("delta") or {}
        if choice.get("index"):
            continue
        if delta.get("reasoning_content"):
            continue  # the bug: reasoning, so no answer text here
        text += delta.get("content") or ""
    return text


if __name__ == "__main__":
    run(LineParser, report_faults=True, text_of=reasoning_or_content)
