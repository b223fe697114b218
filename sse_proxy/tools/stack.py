"""An upstream, then a proxy in front of it: the one way the tools start the pair.

`sse-proxy demo`, `sse-proxy test-client` and the pytest plugin all need "start the mock
upstream (or another upstream), then an sse-proxy on an ephemeral loopback port in front
of it, and stop both afterwards, proxy first". This is that, written once.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web

if TYPE_CHECKING:
    from sse_proxy.tools.lockstep import Lockstep

__all__ = ["Stack", "Stoppable", "UpstreamStarter", "proxy_stack", "start_stack"]


class Stoppable(Protocol):
    """A running server stopped with ``await cleanup()`` (an aiohttp ``AppRunner``...)."""

    async def cleanup(self) -> None: ...


UpstreamStarter = Callable[[], Awaitable[tuple[Stoppable, str]]]
"""Starts an upstream server; returns its handle (stopped with ``cleanup()``) and URL."""


@dataclass
class Stack:
    """A running upstream and the proxy in front of it."""

    upstream_url: str
    url: str
    _upstream: Stoppable
    _proxy: web.AppRunner | None

    async def stop_proxy(self) -> None:
        """Stop the proxy alone (at most once): it drains and flushes what it buffers."""
        from sse_proxy.server.run import stop_proxy

        proxy, self._proxy = self._proxy, None
        if proxy is not None:
            await stop_proxy(proxy)

    async def stop(self) -> None:
        """Stop the proxy, then the upstream (each at most once)."""
        try:
            await self.stop_proxy()
        finally:
            await self._upstream.cleanup()


async def start_stack(
    upstream: UpstreamStarter | None = None,
    *,
    mock_seed: int = 0,
    first_text: bool = False,
    mock_tools: bool = False,
    lockstep: Lockstep | None = None,
    **settings: Any,
) -> Stack:
    """Start ``upstream`` (default: the built-in mock with ``mock_seed``, ``first_text``
    and ``mock_tools``: its streams carry the tool-call fixture) and a proxy.

    ``settings`` are :class:`sse_proxy.settings.Config` fields for the proxy (``mode``,
    ``chaos``, ``seed``...); it always listens on an ephemeral loopback port. If the proxy
    cannot start, the upstream is stopped before the error propagates. With a
    ``lockstep``, the proxy reads each upstream write apart (the mock is given it; an
    ``upstream`` starter must have been).
    """
    from sse_proxy.server.run import start_proxy
    from sse_proxy.settings import Config

    if upstream is None:
        from sse_proxy.tools.mock_upstream import start_mock_upstream

        runner: Stoppable
        runner, upstream_url = await start_mock_upstream(
            seed=mock_seed, first_text=first_text, tools=mock_tools, lockstep=lockstep
        )
    else:
        runner, upstream_url = await upstream()
    try:
        cfg = Config(**{"shutdown_grace": 1.0, **settings, "upstream": upstream_url, "port": 0})
        proxy, url = await start_proxy(cfg)
        if lockstep is not None:
            from sse_proxy.server.keys import STREAM_TAPS

            proxy.app[STREAM_TAPS].append(lockstep.tap)
    except BaseException:
        await runner.cleanup()
        raise
    return Stack(upstream_url=upstream_url, url=url, _upstream=runner, _proxy=proxy)


@contextlib.asynccontextmanager
async def proxy_stack(
    upstream: UpstreamStarter | None = None,
    *,
    mock_seed: int = 0,
    first_text: bool = False,
    mock_tools: bool = False,
    lockstep: Lockstep | None = None,
    **settings: Any,
) -> AsyncIterator[Stack]:
    """``async with proxy_stack(mode="frames") as s:`` -- started, and stopped afterwards."""
    stack = await start_stack(
        upstream,
        mock_seed=mock_seed,
        first_text=first_text,
        mock_tools=mock_tools,
        lockstep=lockstep,
        **settings,
    )
    try:
        yield stack
    finally:
        await stack.stop()
