# anthropic (Python): messages.stream's text_stream; ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY.
from __future__ import annotations

import sys

from anthropic import Anthropic

with Anthropic(max_retries=0).messages.stream(
    model="claude-sonnet-4-5", max_tokens=1024, messages=[{"role": "user", "content": "hi"}]
) as stream:
    sys.stdout.write("".join(stream.text_stream))
