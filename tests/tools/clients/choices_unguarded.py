"""Bug (langfuse#2833, pydantic-ai#164): ``chunk["choices"][0]`` unguarded.

Otherwise correct (incremental decoding, buffered frames, content null-safe): it crashes on
a chunk whose ``choices`` is empty, as Azure's first chunk and the ``include_usage`` last
chunk are.
"""

from __future__ import annotations

import json

from tests.tools.clients._sse import LineParser, delta_text, run


def first_choice_text(dialect: str, event: str, data: str) -> str:
    if dialect != "openai" or data == "[DONE]":
        return delta_text(dialect, event, data)
    chunk = json.loads(data)
    delta = chunk["choices"][0].get("delta") or {}
    return delta.get("content") or "" if not chunk["choices"][0].get("index") else ""


if __name__ == "__main__":
    run(LineParser, text_of=first_choice_text)
