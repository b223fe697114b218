"""sse-proxy: reassemble, validate and re-chunk Server-Sent Events streams.

Importing :mod:`proxy` or :mod:`sse_proxy.core` stays cheap and free of aiohttp;
the server shell is imported only by the commands that need it.
"""

from __future__ import annotations

__version__ = "0.1.0"
__all__ = ["__version__"]
