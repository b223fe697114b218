"""A correct client that reads every choice of each chunk and asks for one (no ``n``).

Reading ``choices`` whole, not by ``index``, is right for such a request: with ``n = 1`` a
provider sends choice 0 only. The harness must not blame it for ``choices_n2`` (which
needs ``n > 1``): the case is not applicable to its request, and it passes every group
(stalls too: it gives up after 4 s without text, within the default patience of 5 s).
"""

from __future__ import annotations

import json

from tests.tools.clients._sse import LineParser, delta_text, run


def every_choice_text(dialect: str, event: str, data: str) -> str:
    if dialect != "openai" or data == "[DONE]":
        return delta_text(dialect, event, data)
    chunk = json.loads(data)
    return "".join(
        (choice.get("delta") or {}).get("content") or "" for choice in chunk.get("choices") or []
    )


if __name__ == "__main__":
    run(LineParser, report_faults=True, text_of=every_choice_text, stall_after=4.0)
