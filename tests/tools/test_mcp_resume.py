"""The mock MCP server's drops, the MCP way, over real loopback sockets.

A tool call's stream is cut (the connection reset mid-event); in 2025-11-25 a ``GET`` with
``Last-Event-ID`` gets the rest of *that* stream and never another's; in 2026-07-28 there
is nothing to resume (405) and a call re-issued under a new id runs whole. The streams are
read with the suite's own SSE parser (the oracle), ids included.
"""

from __future__ import annotations

import json
from typing import Any

import aiohttp
import pytest

from sse_proxy.tools import fixtures
from sse_proxy.tools.fixtures import mcp
from sse_proxy.tools.mock_resume import SERVED
from sse_proxy.tools.mock_upstream import MCP_SERVER, start_mock_upstream
from tests.support.oracle import parse

ACCEPT = {"Accept": "application/json, text/event-stream"}
MODERN = "2026-07-28"
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": MODERN,
    "io.modelcontextprotocol/clientCapabilities": {},
}


def _call(rid: int, meta: dict[str, Any] | None = None) -> dict[str, Any]:
    params = {"name": mcp.TOOL, "arguments": {"progress": 4}, "_meta": meta or {}}
    return {"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params}


async def _read(resp: aiohttp.ClientResponse) -> tuple[bytes, bool]:
    """The body as far as it came, and whether it ended cleanly (False: the drop cut it)."""
    body = b""
    try:
        async for chunk in resp.content.iter_any():
            body += chunk
    except (aiohttp.ClientPayloadError, aiohttp.ClientConnectionError):
        return body, False
    return body, True


async def _session(http: aiohttp.ClientSession, url: str) -> dict[str, str]:
    init = {
        "jsonrpc": "2.0",
        "id": 0,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {}},
    }
    async with http.post(url, json=init, headers=ACCEPT) as resp:
        sid = resp.headers["Mcp-Session-Id"]
    return {**ACCEPT, "Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}


@pytest.mark.asyncio
async def test_a_resume_gets_the_rest_of_its_own_stream_and_never_another() -> None:
    runner, base = await start_mock_upstream(fault="drop", seed=3)
    url = base + "/mcp"
    try:
        async with aiohttp.ClientSession() as http:
            headers = await _session(http, url)
            async with http.post(url, json=_call(1), headers=headers) as resp:
                first, clean = await _read(resp)
            assert not clean  # attempt 0: cut
            async with http.post(url, json=_call(2), headers=headers) as resp:
                second, clean = await _read(resp)
            assert clean  # attempt 1: whole (a stream of its own, s2)
            last = parse(first).events[-1].id
            assert last is not None
            assert last.startswith("s1-")
            assert {e.id.split("-")[0] for e in parse(second).events if e.id} == {"s2"}
            async with http.get(url, headers={**headers, "Last-Event-ID": last}) as resp:
                assert resp.status == 200
                replay, clean = await _read(resp)
            assert clean
            events = parse(replay).events
            ids = [e.id for e in events]
            n = int(last.split("-")[1])
            assert ids == [f"s1-{i}" for i in range(n + 1, n + 1 + len(ids))]
            answers = [json.loads(e.data) for e in events if e.data]
            assert answers[-1]["id"] == 1  # the response of the call whose stream broke
            assert all(a.get("id") in (None, 1) for a in answers)  # never s2's (id 2)
            text = "".join(c["text"] for c in answers[-1]["result"]["content"])
            assert text == fixtures.MESSAGE
            # the same cursor from another session names no stream of it
            other = await _session(http, url)
            async with http.get(url, headers={**other, "Last-Event-ID": last}) as resp:
                assert resp.status == 400
                assert "names no event" in (await resp.json())["error"]["message"]
    finally:
        await runner.cleanup()
    log = runner.app[SERVED]
    assert [(s.method, s.status, s.cut_at is not None) for s in log] == [
        ("POST", 200, True),
        ("POST", 200, False),
        ("GET", 200, False),
        ("GET", 400, False),
    ]
    assert (log[0].delivered, log[0].stream, log[0].request_id) == (n, "s1", 1)
    assert (log[2].cursor, log[2].delivered) == (last, n + len(ids))


@pytest.mark.asyncio
async def test_bad_cursors_get_a_clean_400() -> None:
    runner, base = await start_mock_upstream(fault="drop_primed")
    url = base + "/mcp"
    try:
        async with aiohttp.ClientSession() as http:
            headers = await _session(http, url)
            async with http.post(url, json=_call(1), headers=headers) as resp:
                body, clean = await _read(resp)
            assert not clean
            (priming,) = parse(body).events  # the priming event, then the cut
            assert (priming.id, priming.data, priming.retry) == ("s1-0", "", 500)
            for cursor in ("x" * 100_000, "garbage", "s1-999", "s9-1", "s1-"):
                async with http.get(url, headers={**headers, "Last-Event-ID": cursor}) as resp:
                    assert resp.status == 400, cursor
                    assert (await resp.json())["error"]["code"] == -32600
            async with http.get(url, headers=headers) as resp:  # no cursor: no stream of ours
                assert resp.status == 405
            gone = {**headers, "Mcp-Session-Id": "ended", "Last-Event-ID": "s1-0"}
            async with http.get(url, headers=gone) as resp:  # an unknown session: 404
                assert resp.status == 404
    finally:
        await runner.cleanup()


@pytest.mark.asyncio
async def test_2026_has_nothing_to_resume_and_a_reissued_call_runs_whole() -> None:
    runner, base = await start_mock_upstream(fault="drop", seed=1)
    url = base + "/mcp"
    headers = {**ACCEPT, "MCP-Protocol-Version": MODERN, "Mcp-Method": "tools/call"}
    try:
        async with aiohttp.ClientSession() as http:
            async with http.post(url, json=_call(1, MODERN_META), headers=headers) as resp:
                body, clean = await _read(resp)
            assert not clean
            assert all(e.id is None for e in parse(body).events)  # no ids: no resumption
            resume = {**headers, "Last-Event-ID": "r1-1"}
            async with http.get(url, headers=resume) as resp:
                assert resp.status == 405
            async with http.post(url, json=_call(2, MODERN_META), headers=headers) as resp:
                body, clean = await _read(resp)
            assert clean
            last = json.loads(parse(body).events[-1].data)
            assert (last["id"], last["result"]["resultType"]) == (2, "complete")
    finally:
        await runner.cleanup()
    server = runner.app[MCP_SERVER]
    assert [c.id for c in server.calls] == [1, 2]
    assert [c.id for c in server.cancelled] == [1]  # the broken stream's call is lost
    assert [(s.method, s.status) for s in runner.app[SERVED]] == [
        ("POST", 200),
        ("GET", 405),
        ("POST", 200),
    ]


def test_an_mcp_stream_is_cut_among_its_notifications_then_before_any_new_id() -> None:
    """The first cut leaves notifications and the response to resume; a second falls inside
    the resumed stream's first event, so its reconnect can only name the first's cursor."""
    from dataclasses import replace

    from sse_proxy.rechunk.timefaults import DEFAULT_TIMING, DROP, NOTES_BEFORE, Timeline
    from sse_proxy.server.delivery import stream_kind
    from sse_proxy.tools.fixtures.resume import after
    from sse_proxy.tools.mcp_resume import events_of

    sse = mcp.DEFAULT_OPTIONS.fields("2025-11-25", "s1")
    call = replace(mcp.DEFAULT_CALL, revision="2025-11-25", sse=sse)
    events = events_of(fixtures.clean_stream("mcp", request=call))
    assert [e.cursor for e in events] == list(range(len(events)))  # s1-0 (priming)...
    placed = set()
    for seed in range(24):
        timeline = Timeline("drop_twice", DEFAULT_TIMING, stream_kind("mcp"), seed=seed)
        cut = next(
            e.cursor for e in events if any(p is not None for _, p in timeline.frame(e.frame))
        )
        notes = sum(1 for e in events[1:cut] if b'"method":"notifications/' in e.frame)
        assert NOTES_BEFORE <= notes <= 2 * NOTES_BEFORE
        assert cut < events[-1].cursor  # the response is left to resume
        placed.add(cut)
        again = Timeline("drop_twice", DEFAULT_TIMING, stream_kind("mcp"), seed=seed, attempt=1)
        first = after(events, cut - 1)[0]
        (head, none), (_tail, pause) = again.frame(first.frame)
        assert none is None
        assert pause is not None
        assert pause.action == DROP
        assert head == f"id: s1-{first.cursor}\n".encode()  # its id arrived, its event not
    assert len(placed) > 1  # seeded


@pytest.mark.asyncio
async def test_a_stream_the_chaos_proxy_drops_twice_is_resumed_from_the_mock() -> None:
    """The proxy performs the drop (``--chaos-fault drop_twice``) on the mock's clean tool
    call; the mock keeps every stream with ids, so the client's GETs resume it, and the
    proxy, joining each resume to its origin, cuts the first resume and not the second."""
    import asyncio
    import os
    import sys

    from sse_proxy.tools.stack import proxy_stack
    from tests.support.recordings import CLIENTS

    async with proxy_stack(None, mode="chaos", chaos_fault="drop_twice") as stack:
        env = {
            **os.environ,
            "SSE_PROXY_STREAM_URL": stack.url + "/mcp",
            "SSE_PROXY_MCP_TOOL": mcp.TOOL,
            "SSE_PROXY_MCP_ARGS": json.dumps(mcp.TOOL_ARGS),
        }
        proc = await asyncio.create_subprocess_exec(
            sys.executable,
            "-m",
            f"{CLIENTS}.mcp_raw",
            "--resume",
            env=env,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
        )
        out, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 0, err.decode()
    assert out.decode() == fixtures.MESSAGE
    assert err.decode().count("broke") == 2  # the call's stream, then the first resume
