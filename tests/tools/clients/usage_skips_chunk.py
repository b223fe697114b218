"""Bug (BerriAI/litellm#36168): a chunk with ``usage`` is taken for the usage-only chunk.

Otherwise correct (it skips ``choices: []`` chunks too): it records the usage and skips
the chunk, so when the usage rides on the last chunk that still has choices, the last
piece of text in it is lost.
"""

from __future__ import annotations

import json

from tests.tools.clients._sse import LineParser, delta_text, run


def skip_usage_chunks(dialect: str, event: str, data: str) -> str:
    if dialect != "openai" or data == "[DONE]":
        return delta_text(dialect, event, data)
    chunk = json.loads(data)
    if chunk.get("usage"):
        return ""  # the bug: "the usage chunk", whatever else it carries
    return delta_text(dialect, event, data)


if __name__ == "__main__":
    run(LineParser, report_faults=True, text_of=skip_usage_chunks)
