"""Faults in time on MCP tool calls: performed by the mock's MCP server and by the chaos
proxy, among the progress notifications; and the ``stalls`` group run against MCP clients.

An MCP stream's text comes whole in its response, so a stall falls after the first
notifications (:data:`~sse_proxy.rechunk.timefaults.NOTES_BEFORE`), the rest and the
response after it; a linger after the response. Durations are tenths of a second, the
clients the raw stdlib one (tests/tools/clients/mcp_raw.py) with one deadline each, and
``--patience 2``.
"""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from sse_proxy.names import CHAOS_HEADER
from sse_proxy.rechunk.timefaults import COMMENT_KEEPALIVE, NOTES_BEFORE
from sse_proxy.tools import fixtures
from sse_proxy.tools.fixtures import mcp
from sse_proxy.tools.mock_upstream import MCP_SERVER, start_mock_upstream
from sse_proxy.tools.testclient.harness import HarnessOptions, run_test_client
from sse_proxy.tools.testclient.stalls import MCP_FAMILIES
from tests.support.oracle import parse
from tests.support.recordings import CLIENTS
from tests.support.stack import StartProxy

ACCEPT = {"Accept": "application/json, text/event-stream"}
FAST = {
    "X-Mock-Stall": "0.4",
    "X-Mock-Keepalive-Every": "0.1",
    "X-Mock-Linger": "0.4",
    "X-Mock-Drip-Rate": "4000",
}
MODERN = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}
Reads = list[tuple[float, bytes]]


def _call(rid: int = 1, modern: bool = False) -> dict[str, Any]:
    meta: dict[str, Any] = {"progressToken": "t", **(MODERN if modern else {})}
    params = {"name": mcp.TOOL, "arguments": {}, "_meta": meta}
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


async def _timed(url: str, headers: dict[str, str]) -> Reads:
    """A 2025-11-25 session's tool call: the reads of its stream, and when each came (the
    last, empty: when the body ended)."""
    async with aiohttp.ClientSession() as http:
        init = {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "t"}}
        body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}
        async with http.post(url, json=body, headers=ACCEPT) as resp:
            session = resp.headers["Mcp-Session-Id"]
        headers = {**ACCEPT, **headers, "Mcp-Session-Id": session}
        headers["MCP-Protocol-Version"] = "2025-11-25"
        reads: Reads = []
        started = time.monotonic()
        async with http.post(url, json=_call(), headers=headers) as resp:
            assert resp.status == 200, await resp.text()
            async for chunk in resp.content.iter_any():
                reads.append((time.monotonic() - started, chunk))
            reads.append((time.monotonic() - started, b""))  # the body's end
    return reads


def _when(reads: Reads, needle: bytes) -> float:
    body = b""
    for at, chunk in reads:
        body += chunk
        if needle in body:
            return at
    raise AssertionError(f"{needle!r} never arrived")


def _methods(body: bytes) -> list[str | None]:
    return [json.loads(e.data).get("method") for e in parse(body).events if e.data]


@pytest.mark.asyncio
@pytest.mark.parametrize("fault", ["stall_keepalive", "stall_silent", "linger", "drip"])
async def test_the_mock_performs_each_fault_among_the_progress_notifications(fault: str) -> None:
    runner, base = await start_mock_upstream()
    try:
        reads = await _timed(base + "/mcp", {"X-Mock-Fault": fault, **FAST})
        (call,) = runner.app[MCP_SERVER].calls
    finally:
        await runner.cleanup()
    body = b"".join(c for _, c in reads)
    clean = fixtures.clean_stream("mcp", request=call)
    assert body.replace(COMMENT_KEEPALIVE, b"") == clean  # the bytes are the clean stream's
    assert body.startswith(b"id: s1-0\nretry: 500\ndata:\n\n")  # priming first, as ever
    frames = clean.split(b"\n\n")
    result = frames[-2]  # the response (the text), the last frame
    if fault == "linger":
        assert reads[-1][0] - _when(reads, result) >= 0.35  # open after the response
        return
    # the fault begins after NOTES_BEFORE notifications, before the rest and the result
    last_before, first_after = frames[NOTES_BEFORE], frames[NOTES_BEFORE + 1]
    assert _methods(last_before + b"\n\n") == ["notifications/progress"]
    gap = _when(reads, first_after) - _when(reads, last_before)
    drip = len(first_after) / 4000  # a drip: the frames after it come slowly
    assert gap >= (0.35 if fault != "drip" else drip * 0.9)
    kept = body.count(COMMENT_KEEPALIVE)
    assert (2 <= kept <= 4) if fault == "stall_keepalive" else kept == 0


@pytest.mark.asyncio
async def test_the_chaos_header_stalls_an_mcp_stream(mock_url: str, start: StartProxy) -> None:
    url = await start(mock_url, allow_chaos_header=True)
    chaos = {CHAOS_HEADER: "fault=stall_keepalive; stall=0.4; keepalive_every=0.1"}
    reads = await _timed(url + "/mcp", chaos)
    body = b"".join(c for _, c in reads)
    assert 2 <= body.count(COMMENT_KEEPALIVE) <= 4
    stalled = body.index(COMMENT_KEEPALIVE)
    methods = _methods(body[:stalled])
    assert methods == ["notifications/message", "notifications/progress"]  # the first two
    assert _methods(body)[-1] is None  # ... the rest, and the response: all of it
    assert reads[-1][0] >= 0.4


@pytest.mark.asyncio
@pytest.mark.parametrize("modern", [True, False])
async def test_a_client_that_closes_mid_call_cancels_it(modern: bool) -> None:
    """Closing the stream before the response is how a 2026-07-28 client cancels; the
    server records the call (an earlier client's close is recorded too, and means less)."""
    runner, base = await start_mock_upstream()
    server = runner.app[MCP_SERVER]
    headers = {**ACCEPT, "X-Mock-Fault": "stall_silent", "X-Mock-Stall": "30"}
    if modern:
        headers.update(
            {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/call", "Mcp-Name": mcp.TOOL}
        )
    try:
        async with (
            aiohttp.ClientSession() as http,
            http.post(base + "/mcp", json=_call(modern=modern), headers=headers) as resp,
        ):
            await resp.content.readuntil(b"notifications/progress")  # it is under way
        for _ in range(200):  # the server notices the close
            if server.cancelled:
                break
            await asyncio.sleep(0.01)
        assert server.cancelled == server.calls
        assert server.cancelled[0].modern is modern
        async with (
            aiohttp.ClientSession() as http,
            http.post(base + "/mcp", json=_call(2), headers=ACCEPT) as resp,
        ):
            await resp.read()  # read to the end: not cancelled
        assert len(server.calls) == 2
        assert len(server.cancelled) == 1
    finally:
        await runner.cleanup()


RAW = ("python", "-m", f"{CLIENTS}.mcp_raw")


def _stalls(tmp_path: Path, *args: str) -> tuple[int, dict[str, dict[str, Any]], str]:
    report = tmp_path / "report.json"
    out = tmp_path / "out.txt"
    import sys

    command = (sys.executable, *RAW[1:], *args)
    options = HarnessOptions(
        command=command,
        dialect="mcp",
        only=("stalls",),
        patience=2.0,
        report=str(report),
        jobs=4,
        timeout=20.0,
    )
    with out.open("w", encoding="utf-8") as stream:
        code = run_test_client(options, out=stream)
    cases = json.loads(report.read_text("utf-8"))["cases"]
    return code, {c["fault"]: c for c in cases}, out.read_text("utf-8")


def test_a_correct_mcp_client_passes_every_stall(tmp_path: Path) -> None:
    """A deadline on messages (comments are none), and the result taken at the response."""
    code, cases, text = _stalls(tmp_path, "--deadline", "0.8")
    assert code == 0, text
    assert {k: c["outcome"] for k, c in cases.items()} == {
        "stall_keepalive": "pass",
        "stall_silent": "pass",
        "linger": "pass",
        "drip": "pass",
    }
    for fault in ("stall_keepalive", "stall_silent"):
        assert 0.7 <= cases[fault]["timing"]["into_fault_s"] < 2
    assert cases["linger"]["exit_code"] == 0
    assert cases["linger"]["mcp"]["calls"] == 1


def test_mcp_stall_verdicts_say_what_happened_to_the_call(tmp_path: Path) -> None:
    """No deadline but the socket's 30 s: the result never came (stalls), still waiting
    after the result (a linger, for the client that reads to the close)."""
    code, cases, text = _stalls(tmp_path, "--bug", "waits-for-close")
    assert code == 1, text
    for fault in ("stall_keepalive", "stall_silent", "linger"):
        assert cases[fault]["outcome"] == "hang", (fault, text)
        assert cases[fault]["diagnosis"]["family"] == MCP_FAMILIES[fault]
    kept = cases["stall_keepalive"]["diagnosis"]["reason"]
    assert kept.startswith("hang: the result never came: 2 of the call's 8 progress")
    assert "': keep-alive' comments" in kept
    assert "comments are not progress" in cases["stall_keepalive"]["diagnosis"]["rule"]
    linger = cases["linger"]["diagnosis"]["reason"]
    assert linger.startswith("hang: still waiting after the result")
    assert "lingers" in linger
    assert cases["drip"]["outcome"] == "hang"  # --patience given: the drip must end too
    assert "mcp (lingers after the result)" in text
