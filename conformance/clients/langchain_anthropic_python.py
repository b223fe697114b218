# langchain-anthropic: ChatAnthropic.stream; ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY from env.
# CONFORMANCE_TIMEOUT (seconds): ChatAnthropic(default_request_timeout=...), the SDK's timeout.
from __future__ import annotations

import os
import sys

from langchain_anthropic import ChatAnthropic

timeout = os.environ.get("CONFORMANCE_TIMEOUT")
chat = ChatAnthropic(
    model="claude-sonnet-4-5",
    max_retries=0,
    base_url=os.environ["ANTHROPIC_BASE_URL"],
    default_request_timeout=None if timeout is None else float(timeout),
)
sys.stdout.write("".join(chunk.text for chunk in chat.stream("hi")))
