# openai (Python): chat.completions stream; OPENAI_BASE_URL and OPENAI_API_KEY from env.
from __future__ import annotations

import sys

from openai import OpenAI

stream = OpenAI(max_retries=0).chat.completions.create(
    model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True
)
text = [c.delta.content or "" for chunk in stream for c in chunk.choices if c.index == 0]
sys.stdout.write("".join(text))
