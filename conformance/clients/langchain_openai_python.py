# langchain-openai: ChatOpenAI.stream; OPENAI_BASE_URL / OPENAI_API_KEY from env.
# CONFORMANCE_TIMEOUT (seconds): ChatOpenAI(timeout=...), the openai SDK's underneath.
from __future__ import annotations

import os
import sys

from langchain_openai import ChatOpenAI

timeout = os.environ.get("CONFORMANCE_TIMEOUT")
chat = ChatOpenAI(
    model="gpt-4o-mini", max_retries=0, timeout=None if timeout is None else float(timeout)
)
sys.stdout.write("".join(str(chunk.content) for chunk in chat.stream("hi")))
