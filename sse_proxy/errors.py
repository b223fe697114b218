"""The one exception tree of sse-proxy.

Anomalies in upstream bytes are never exceptions: the core reports them as
:mod:`sse_proxy.core.alerts` values. Exceptions are for misuse and for the shell::

    ProxyError
    ├── ConfigError            bad config file, flag or environment value (exit 2)
    ├── UsageError             bad CLI usage or unreadable input (exit 2)
    ├── ChaosSpecError         malformed chaos spec or header, or chaos not allowed (400 / exit 2)
    ├── UpstreamError          connect/read failures, mapped from aiohttp at the boundary (502)
    │   └── UpstreamTimeout    connect, idle or total timeout (504)
    └── ReassemblerStateError  feed() after close(), or a broken internal invariant
"""

from __future__ import annotations

__all__ = [
    "ChaosSpecError",
    "ConfigError",
    "ProxyError",
    "ReassemblerStateError",
    "UpstreamError",
    "UpstreamTimeout",
    "UsageError",
]


class ProxyError(Exception):
    """Base of every error sse-proxy raises on purpose."""


class ConfigError(ProxyError, ValueError):
    """A configuration value is missing, malformed or out of range."""


class UsageError(ProxyError):
    """The command line was wrong or its input could not be read."""


class ChaosSpecError(ProxyError, ValueError):
    """A chaos strategy spec (flag or X-SSE-Proxy-Chaos header) is invalid or not allowed."""


class UpstreamError(ProxyError):
    """The upstream could not be reached or failed before or during the response."""

    status = 502


class UpstreamTimeout(UpstreamError):
    """The upstream did not answer within a configured timeout."""

    status = 504


class ReassemblerStateError(ProxyError, RuntimeError):
    """The reassembler was misused (fed after close) or broke its own invariant."""
