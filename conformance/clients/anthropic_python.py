# anthropic (Python): messages.stream's text_stream; ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY.
# CONFORMANCE_TIMEOUT (seconds): the SDK's own timeout= (httpx's, per read when streaming).
from __future__ import annotations

import os
import sys

from anthropic import Anthropic

timeout = os.environ.get("CONFORMANCE_TIMEOUT")
options = {} if timeout is None else {"timeout": float(timeout)}
with Anthropic(max_retries=0, **options).messages.stream(
    model="claude-sonnet-4-5", max_tokens=1024, messages=[{"role": "user", "content": "hi"}]
) as stream:
    sys.stdout.write("".join(stream.text_stream))
