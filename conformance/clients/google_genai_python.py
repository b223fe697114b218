# google-genai (Python): generate_content_stream; GOOGLE_GEMINI_BASE_URL from env.
from __future__ import annotations

import sys

from google import genai

client = genai.Client(api_key="sse-proxy-test-not-a-real-key")
stream = client.models.generate_content_stream(model="gemini-2.0-flash", contents="hi")
sys.stdout.write("".join(chunk.text or "" for chunk in stream))
