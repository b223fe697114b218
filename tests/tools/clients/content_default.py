"""Bug: ``text += delta.get("content", "")``, which is None when ``content`` is null.

Otherwise correct (incremental decoding, buffered frames, choices guarded): it crashes on
a reasoning chunk whose ``content`` is null beside ``reasoning_content`` (DeepSeek, vLLM).
"""

from __future__ import annotations

import json

from tests.tools.clients._sse import LineParser, delta_text, run


def content_with_default(dialect: str, event: str, data: str) -> str:
    if dialect != "openai" or data == "[DONE]":
        return delta_text(dialect, event, data)
    text = ""
    for choice in json.loads(data).get("choices") or []:
        if choice.get("index", 0) == 0:
            delta = choice.get("delta") or {}
            text += delta.get("content", "")
    return text


if __name__ == "__main__":
    run(LineParser, text_of=content_with_default)
