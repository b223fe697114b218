"""The google-genai SDK streaming one answer from $GOOGLE_GEMINI_BASE_URL; prints the text."""

from __future__ import annotations

import os
import sys

from google import genai
from google.genai import types


def main() -> None:
    client = genai.Client(
        api_key=os.environ.get("GEMINI_API_KEY", "test-key-not-real"),
        http_options=types.HttpOptions(base_url=os.environ["GOOGLE_GEMINI_BASE_URL"]),
    )
    for chunk in client.models.generate_content_stream(
        model="gemini-2.0-flash", contents="Say hello"
    ):
        sys.stdout.write(chunk.text or "")
    sys.stdout.flush()


if __name__ == "__main__":
    main()
