# openai (Python): chat.completions stream; OPENAI_BASE_URL and OPENAI_API_KEY from env.
# CONFORMANCE_TIMEOUT (seconds): the SDK's own timeout= (httpx's, per read when streaming).
from __future__ import annotations

import os
import sys

from openai import OpenAI

timeout = os.environ.get("CONFORMANCE_TIMEOUT")
options = {} if timeout is None else {"timeout": float(timeout)}
stream = OpenAI(max_retries=0, **options).chat.completions.create(
    model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True
)
text = [c.delta.content or "" for chunk in stream for c in chunk.choices if c.index == 0]
sys.stdout.write("".join(text))
