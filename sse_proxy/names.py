"""Names shared by the server, the mock upstream, the demo and the client-test tools.

Endpoint paths, proxy modes and header names are spelled once, here, so the demo, the
mock upstream, `test-client`, the pytest plugin and the proxy can never disagree (the
per-dialect ones come from the dialect descriptors).
"""

from __future__ import annotations

import copy
from typing import Any, Final

from sse_proxy.core.dialects.registry import DIALECTS

__all__ = [
    "ADMIN_PREFIX",
    "CHAOS_HEADER",
    "DIALECT_BODIES",
    "DIALECT_PATHS",
    "MOCK_DELAY_HEADER",
    "MOCK_FAULT_HEADER",
    "MOCK_SEED_HEADER",
    "MOCK_TIME_HEADERS",
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
MOCK_TIME_HEADERS: Final[dict[str, str]] = {
    "stall": "X-Mock-Stall",
    "keepalive_every": "X-Mock-Keepalive-Every",
    "linger": "X-Mock-Linger",
    "drip_rate": "X-Mock-Drip-Rate",
}
"""The mock upstream's per-request durations of the faults in time, by setting name."""

DIALECT_PATHS: Final[dict[str, str]] = {
    d.name: d.example_path for d in DIALECTS.values() if d.example_path is not None
}
"""The mock upstream's streaming endpoint of each dialect (its descriptor's example)."""

DIALECT_BODIES: Final[dict[str, dict[str, Any]]] = {
    d.name: copy.deepcopy(d.example_body) for d in DIALECTS.values() if d.example_path
}
"""A request body that makes each endpoint stream."""
