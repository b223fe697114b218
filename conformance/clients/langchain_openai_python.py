# langchain-openai: ChatOpenAI.stream; OPENAI_BASE_URL / OPENAI_API_KEY from env.
from __future__ import annotations

import sys

from langchain_openai import ChatOpenAI

chat = ChatOpenAI(model="gpt-4o-mini", max_retries=0)
sys.stdout.write("".join(str(chunk.content) for chunk in chat.stream("hi")))
