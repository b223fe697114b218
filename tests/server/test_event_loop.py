"""`serve --loop`: the proxy runs and streams exactly on each event loop, and says which."""

from __future__ import annotations

import asyncio
import importlib.util

import aiohttp
import pytest

from sse_proxy.errors import ConfigError
from sse_proxy.server.run import loop_factory
from sse_proxy.settings import Config
from sse_proxy.tools.mock_upstream import mock_upstream
from tests.support.cli import ServeProcess
from tests.support.net import free_port

HAS_UVLOOP = importlib.util.find_spec("uvloop") is not None


@pytest.mark.asyncio
@pytest.mark.parametrize("choice", ["asyncio", "uvloop", "auto"])
async def test_each_loop_serves_a_stream_exactly_and_the_startup_line_names_it(
    choice: str,
) -> None:
    if choice == "uvloop" and not HAS_UVLOOP:
        pytest.fail("uvloop is a default dependency on this platform and must be installed")
    port = free_port()
    async with mock_upstream() as upstream:
        with ServeProcess("--upstream", upstream, "--port", str(port), "--loop", choice) as serve:
            (started,) = await asyncio.to_thread(serve.wait_for, "proxy.started")
            async with (
                aiohttp.ClientSession() as session,
                session.post(
                    f"http://127.0.0.1:{port}/v1/chat/completions",
                    json={"model": "m", "stream": True},
                ) as resp,
            ):
                body = await resp.read()
            (summary,) = await asyncio.to_thread(serve.wait_for, "stream.summary")
    expected = "asyncio" if choice == "asyncio" or not HAS_UVLOOP else "uvloop"
    assert started["loop"] == expected
    assert resp.status == 200
    assert body.endswith(b"data: [DONE]\n\n")
    assert summary["verdict"] == "ok"
    assert summary["alerts"] == {}


def test_a_bad_loop_setting_is_a_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match="loop"):
        Config(loop="trio")
    assert loop_factory("asyncio") == ("asyncio", None)
