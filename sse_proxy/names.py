"""Names shared by the server, the mock upstream, the demo and the client-test tools.

Endpoint paths, proxy modes and header names are spelled once, here, so the demo, the
mock upstream, `test-client`, the pytest plugin and the proxy can never disagree.
"""

from __future__ import annotations

from typing import Any, Final

__all__ = [
    "ADMIN_PREFIX",
    "CHAOS_HEADER",
    "DIALECT_BODIES",
    "DIALECT_PATHS",
    "MOCK_DELAY_HEADER",
    "MOCK_FAULT_HEADER",
    "MOCK_SEED_HEADER",
    "MODES",
    "SEED_HEADER",
    "STREAM_ID_HEADER",
]

MODES: Final[tuple[str, ...]] = ("passthrough", "frames", "chaos")
"""How the proxy writes toward the client (``--mode``)."""

ADMIN_PREFIX: Final[str] = "/_sse-proxy"
"""Reserved path prefix of health and metrics; never forwarded."""

CHAOS_HEADER: Final[str] = "X-SSE-Proxy-Chaos"
SEED_HEADER: Final[str] = "X-SSE-Proxy-Chaos-Seed"
STREAM_ID_HEADER: Final[str] = "X-SSE-Proxy-Stream-Id"
MOCK_FAULT_HEADER: Final[str] = "X-Mock-Fault"
MOCK_SEED_HEADER: Final[str] = "X-Mock-Seed"
MOCK_DELAY_HEADER: Final[str] = "X-Mock-Delay"

DIALECT_PATHS: Final[dict[str, str]] = {
    "openai": "/v1/chat/completions",
    "responses": "/v1/responses",
    "anthropic": "/v1/messages",
    "gemini": "/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse",
    "text": "/v1/text",
}
"""The mock upstream's streaming endpoint of each dialect."""

DIALECT_BODIES: Final[dict[str, dict[str, Any]]] = {
    "openai": {
        "model": "gpt-4o-mini",
        "stream": True,
        "messages": [{"role": "user", "content": "Say hello"}],
    },
    "responses": {"model": "gpt-4o-mini", "stream": True, "input": "Say hello"},
    "anthropic": {
        "model": "claude-3-5-sonnet-20241022",
        "max_tokens": 1024,
        "stream": True,
        "messages": [{"role": "user", "content": "Say hello"}],
    },
    "gemini": {"contents": [{"role": "user", "parts": [{"text": "Say hello"}]}]},
    "text": {"stream": True},
}
"""A request body that makes each endpoint stream."""
