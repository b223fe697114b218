# google-genai (Python): generate_content_stream; GOOGLE_GEMINI_BASE_URL from env.
# CONFORMANCE_TIMEOUT (seconds): HttpOptions(timeout=ms), the SDK's own.
from __future__ import annotations

import os
import sys

from google import genai
from google.genai import types

timeout = os.environ.get("CONFORMANCE_TIMEOUT")
http = None if timeout is None else types.HttpOptions(timeout=int(float(timeout) * 1000))
client = genai.Client(api_key="sse-proxy-test-not-a-real-key", http_options=http)
stream = client.models.generate_content_stream(model="gemini-2.0-flash", contents="hi")
sys.stdout.write("".join(chunk.text or "" for chunk in stream))
