"""Suite-wide fixtures: isolation of logging, and the real parts a test stands up.

Every test starts and ends with structlog's defaults (tests that configure logging must
not leak it into the next, and a proxy started without configuration must not print to the
runner's stdout). The fixtures start real servers on ephemeral loopback ports and stop them
all after the test; the helpers they use live in :mod:`tests.support`.
"""

from __future__ import annotations

import compileall
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator

import aiohttp
import pytest
import pytest_asyncio
import structlog

from sse_proxy.tools.mock_upstream import start_mock_upstream
from tests.support.cli import ROOT
from tests.support.logs import LogEntries
from tests.support.stack import AppStarter, ProxyStarter
from tests.support.upstreams import Behaviour, RawUpstream


def pytest_configure(config: pytest.Config) -> None:
    """Bytecode for the package and the tests, written once a run: the suite starts
    hundreds of Python processes (the CLI, servers, client programs), and where
    PYTHONDONTWRITEBYTECODE is set each one would compile every module it imports."""
    if hasattr(config, "workerinput"):  # an xdist worker: its controller has done it
        return
    for part in ("sse_proxy", "tests"):
        compileall.compile_dir(ROOT / part, quiet=1)


@pytest.fixture(autouse=True)
def _structlog_defaults() -> Iterator[None]:
    structlog.reset_defaults()
    yield
    structlog.reset_defaults()


@pytest.fixture
def logs() -> Iterator[LogEntries]:
    """Every structlog event emitted during the test, as dicts."""
    with structlog.testing.capture_logs() as entries:
        yield entries


@pytest_asyncio.fixture
async def mock_url() -> AsyncIterator[str]:
    """The built-in mock LLM upstream on an ephemeral loopback port."""
    runner, url = await start_mock_upstream()
    try:
        yield url
    finally:
        await runner.cleanup()


@pytest_asyncio.fixture
async def start() -> AsyncIterator[ProxyStarter]:
    """``url = await start(upstream, **config)`` runs a real proxy; all stop after."""
    starter = ProxyStarter()
    try:
        yield starter
    finally:
        await starter.stop_all()


@pytest_asyncio.fixture
async def proxy_url(mock_url: str, start: ProxyStarter) -> str:
    """A passthrough proxy in front of the mock upstream."""
    return await start(mock_url)


@pytest_asyncio.fixture
async def start_app() -> AsyncIterator[AppStarter]:
    """``url = await start_app(app)`` serves a custom upstream app on loopback; all stop after."""
    starter = AppStarter()
    try:
        yield starter
    finally:
        await starter.stop_all()


@pytest_asyncio.fixture
async def raw_upstream() -> AsyncIterator[Callable[[Behaviour], Awaitable[RawUpstream]]]:
    """``await raw_upstream(behaviour)`` starts a scripted upstream; all stop after."""
    servers: list[RawUpstream] = []

    async def _start(behaviour: Behaviour) -> RawUpstream:
        server = RawUpstream(behaviour)
        await server.start()
        servers.append(server)
        return server

    try:
        yield _start
    finally:
        for server in servers:
            await server.stop()


@pytest_asyncio.fixture
async def session() -> AsyncIterator[aiohttp.ClientSession]:
    """A client that leaves bodies as they come (no decompression)."""
    async with aiohttp.ClientSession(auto_decompress=False) as client:
        yield client
