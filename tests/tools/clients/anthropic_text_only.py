"""Bug: ``delta["text"]`` on every Anthropic ``content_block_delta``.

Otherwise correct (incremental decoding, buffered frames, event types checked): it crashes
on the first delta that is not a ``text_delta``: ``thinking_delta``, ``signature_delta``,
``input_json_delta`` or ``citations_delta``.
"""

from __future__ import annotations

import json

from tests.tools.clients._sse import LineParser, delta_text, run


def every_delta_is_text(dialect: str, event: str, data: str) -> str:
    if dialect != "anthropic":
        return delta_text(dialect, event, data)
    obj = json.loads(data)
    if obj.get("type") == "content_block_delta":
        return str(obj["delta"]["text"])
    return ""


if __name__ == "__main__":
    run(LineParser, text_of=every_delta_is_text)
