"""A finished stream leaves no reference cycle behind: what it allocated is freed by
reference counting at once, not by a collection pausing the loop later.

The relay, its observers and their callbacks point at each other while a stream runs; its
end must undo that. Checked with the collector off: what a collection finds afterwards is
exactly what cycles kept alive.
"""

from __future__ import annotations

import asyncio
import gc

import aiohttp
import pytest

from sse_proxy.server.run import start_proxy, stop_proxy
from sse_proxy.settings import Config
from sse_proxy.tools.mock_upstream import mock_upstream

STREAMS = 12


@pytest.mark.asyncio
@pytest.mark.parametrize("mode", ["passthrough", "frames"])
async def test_finished_streams_leave_no_cycles(mode: str) -> None:
    async with mock_upstream() as upstream:
        cfg = Config(upstream=upstream, port=0, mode=mode, log_level="error")
        runner, url = await start_proxy(cfg, reuse_port=False)
        try:
            async with aiohttp.ClientSession() as session:

                async def stream() -> bytes:
                    body = {"model": "m", "stream": True, "messages": []}
                    async with session.post(url + "/v1/chat/completions", json=body) as resp:
                        assert resp.status == 200
                        return await resp.read()

                for _ in range(3):  # one-off lazy state is made here, not counted
                    await stream()
                gc.collect()
                gc.disable()
                try:
                    bodies = [await stream() for _ in range(STREAMS)]
                    await asyncio.sleep(0.05)  # the handlers' last steps
                    found = gc.collect()
                finally:
                    gc.enable()
        finally:
            await stop_proxy(runner)
    assert all(b"[DONE]" in b for b in bodies)
    assert found < STREAMS, f"{found} objects in cycles after {STREAMS} streams"
