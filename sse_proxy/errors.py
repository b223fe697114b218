"""The one exception tree of sse-proxy.

Anomalies in upstream bytes are never exceptions: the core reports them as
:mod:`sse_proxy.core.alerts` values. Exceptions are for misuse and for the shell::

    ProxyError
    ├── ConfigError            bad config file, flag or environment value (exit 2)
    ├── UsageError             bad CLI usage or unreadable input (exit 2)
    ├── ChaosSpecError         malformed chaos spec or header, or chaos not allowed (400 / exit 2)
    ├── BrowserError           test-client's browser would not start or stopped answering (exit 2)
    ├── UpstreamError          the upstream unreachable or failing before its response is
    │   │                      relayed, mapped once from aiohttp and OS errors (502)
    │   └── UpstreamTimeout    no answer within the connect or idle timeout (504)
    └── ReassemblerStateError  feed() after close(), or a broken internal invariant
"""

from __future__ import annotations

__all__ = [
    "BrowserError",
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


class BrowserError(ProxyError):
    """``test-client --browser``: the browser could not be started, or stopped answering."""


class UpstreamError(ProxyError):
    """The upstream could not be reached, or failed before its response could be relayed.

    Raised by the one exception map at the upstream boundary
    (:func:`sse_proxy.server.upstream.map_upstream_errors`), for HTTP and WebSocket alike.
    ``kind`` names the failure in the reply, the ``upstream.error`` line and the metrics;
    ``status`` is the reply's status (h11's ``error_status_hint``); ``reason`` is a finer
    cause where one is known (why a TLS handshake failed). The message is the foreign
    error's own text, not yet redacted.
    """

    def __init__(
        self, kind: str, message: str = "", *, status: int = 502, reason: str | None = None
    ) -> None:
        super().__init__(message or kind)
        self.kind = kind
        self.status = status
        self.reason = reason


class UpstreamTimeout(UpstreamError):
    """The upstream did not answer within a configured timeout."""

    def __init__(self, kind: str = "upstream_timeout", message: str = "") -> None:
        super().__init__(kind, message, status=504)


class ReassemblerStateError(ProxyError, RuntimeError):
    """The reassembler was misused (fed after close) or broke its own invariant."""
