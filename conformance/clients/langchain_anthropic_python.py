# langchain-anthropic: ChatAnthropic.stream; ANTHROPIC_BASE_URL / ANTHROPIC_API_KEY from env.
from __future__ import annotations

import os
import sys

from langchain_anthropic import ChatAnthropic

chat = ChatAnthropic(
    model="claude-sonnet-4-5", max_retries=0, base_url=os.environ["ANTHROPIC_BASE_URL"]
)
sys.stdout.write("".join(chunk.text for chunk in chat.stream("hi")))
