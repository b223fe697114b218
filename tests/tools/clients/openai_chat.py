"""The official openai SDK as a test subject: stream a chat completion, print the content."""

from __future__ import annotations

import sys

from openai import OpenAI


def main() -> None:
    client = OpenAI(max_retries=0, timeout=30)  # OPENAI_BASE_URL / OPENAI_API_KEY from env
    stream = client.chat.completions.create(
        model="gpt-4o-mini",
        messages=[{"role": "user", "content": "Say hello"}],
        stream=True,
    )
    parts: list[str] = []
    for chunk in stream:
        for choice in chunk.choices:  # the message is choice 0's (n > 1 interleaves others)
            if choice.index == 0 and choice.delta.content:
                parts.append(choice.delta.content)
    sys.stdout.buffer.write("".join(parts).encode("utf-8"))


if __name__ == "__main__":
    main()
