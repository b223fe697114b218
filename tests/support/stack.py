"""Starting the parts of a test stack in-process: the real proxy and custom upstream apps,
each on an ephemeral loopback port, every one stopped when the test ends.

The ``start`` and ``start_app`` fixtures (tests/conftest.py) hand these to tests:
``url = await start(upstream, **config)``; ``url = await start_app(app)``.
"""

from __future__ import annotations

from typing import Any

from aiohttp import web

from sse_proxy.server.run import start_proxy, stop_proxy
from sse_proxy.settings import Config

__all__ = ["AppStarter", "ProxyStarter", "StartApp", "StartProxy"]


class ProxyStarter:
    """``await start(upstream, **config)``: a real proxy in front of ``upstream``, its URL."""

    def __init__(self) -> None:
        self._runners: dict[str, web.AppRunner] = {}

    async def __call__(self, upstream: str, **overrides: Any) -> str:
        settings: dict[str, Any] = {"port": 0, "shutdown_grace": 0.5, **overrides}
        runner, url = await start_proxy(Config(upstream=upstream, **settings))
        self._runners[url] = runner
        return url

    def runner_for(self, url: str) -> web.AppRunner:
        """The runner of the proxy at ``url`` (its app's state, for tests that look inside)."""
        return self._runners[url]

    async def stop_all(self) -> None:
        for runner in reversed(list(self._runners.values())):
            await stop_proxy(runner)
        self._runners.clear()


class AppStarter:
    """``await start_app(app)``: ``app`` served on loopback, its base URL."""

    def __init__(self) -> None:
        self._runners: list[web.AppRunner] = []

    async def __call__(self, app: web.Application) -> str:
        runner = web.AppRunner(app, access_log=None, shutdown_timeout=0.5)
        await runner.setup()
        self._runners.append(runner)
        site = web.TCPSite(runner, "127.0.0.1", 0)
        await site.start()
        return f"http://127.0.0.1:{runner.addresses[0][1]}"

    async def stop_all(self) -> None:
        for runner in reversed(self._runners):
            await runner.cleanup()
        self._runners.clear()


StartProxy = ProxyStarter
StartApp = AppStarter
