"""The aiohttp internals module: which aiohttp versions it knows, and that on any other each
of its parts falls back to aiohttp's public behaviour. (The installed aiohttp is a known
one: the rest of the suite runs the internals; tests/test_aiohttp_floor.py runs the
fallbacks end to end, on the oldest aiohttp the project allows.)"""

from __future__ import annotations

import subprocess
import sys
import textwrap

import aiohttp
import pytest

from sse_proxy.server import aiohttp_internals
from sse_proxy.server.aiohttp_internals import INTERNALS_KNOWN, INTERNALS_OK, _version


@pytest.mark.parametrize(
    ("text", "parsed"),
    [("3.14.5", (3, 14, 5)), ("3.14.0rc1", (3, 14, 0)), ("3.15", (3, 15, 0)), ("x", (0, 0, 0))],
)
def test_versions_are_read_by_their_release_numbers(text: str, parsed: tuple[int, ...]) -> None:
    assert _version(text) == parsed


def test_the_installed_aiohttp_is_one_the_internals_know() -> None:
    """The suite tests the internals: a newer aiohttp must be looked at, then let in."""
    assert INTERNALS_OK, (aiohttp.__version__, INTERNALS_KNOWN)
    assert aiohttp_internals.REQUEST_CLASS is aiohttp_internals.UpstreamRequest


_FALLBACKS = """
    import asyncio, aiohttp
    aiohttp.__version__ = {version!r}
    from aiohttp import web
    from aiohttp.web_urldispatcher import UrlDispatcher
    from sse_proxy.server import aiohttp_internals as ai
    from sse_proxy.server.protocol import proxy_app_runner
    from sse_proxy.server.app import make_app
    from sse_proxy.settings import Config

    assert not ai.INTERNALS_OK
    assert ai.REQUEST_CLASS is aiohttp.ClientRequest
    app = make_app(Config(upstream="http://127.0.0.1:9"))
    assert type(app.router) is UrlDispatcher  # remember_resolutions left it
    assert not ai.remember_resolutions(web.Application())

    async def main():
        reader = aiohttp.StreamReader(None, 2**16, loop=asyncio.get_running_loop())
        assert not ai.lean_body(reader) and type(reader) is aiohttp.StreamReader
        runner = proxy_app_runner(app)
        assert type(runner).__name__ == "_PlainRunner", type(runner)
        await runner.setup()
        assert type(runner.server) is web.Server
        assert runner.server.request_handler.__qualname__.startswith("unroutable_first")
        await runner.cleanup()

    asyncio.run(main())
    print("fallbacks")
"""


@pytest.mark.parametrize("version", ["3.99.0", "3.13.5", "4.0.0a1"])
def test_an_unknown_aiohttp_gets_the_public_path(version: str) -> None:
    code = textwrap.dedent(_FALLBACKS.format(version=version))
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "fallbacks"
