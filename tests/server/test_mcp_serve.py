"""`sse-proxy serve` in front of an MCP server: one summary per tool call, with the official
Python SDK as the client, a real serve process and the mock's MCP server.

The handshake, the tool list and the session's end are JSON answers (``proxy.request``);
each ``tools/call`` streams, and its ``stream.summary`` carries the ``mcp`` object: the
method, the tool, the request id, the progress and log counts, the outcome and when the
first progress and the response came. A broken call is logged as broken, in MCP's terms.
"""

from __future__ import annotations

import asyncio
import json
from typing import Any

import pytest

from sse_proxy.tools import fixtures
from sse_proxy.tools.fixtures import mcp
from sse_proxy.tools.mock_upstream import mock_upstream
from tests.support.cli import ServeProcess


async def _calls(url: str, progress: list[bool]) -> list[Any]:
    """One session of the SDK's probing client, one tool call per item (with a progress
    callback, or without: then the request asks for no progress); the results or errors.
    The mock is a handshake-era server to it (``era=legacy``): the probe is refused, and the
    client falls back to 2025-11-25 (sessions, priming, ids)."""
    from mcp import Client
    from mcp.shared.exceptions import MCPError

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        pass

    out: list[Any] = []
    url += ("&" if "?" in url else "?") + "mcp=era%3Dlegacy"
    async with Client(url) as client:
        for ask in progress:
            try:
                result = await client.call_tool(
                    mcp.TOOL, dict(mcp.TOOL_ARGS), progress_callback=on_progress if ask else None
                )
            except MCPError as exc:
                out.append(exc)
            else:
                out.append("".join(c.text for c in result.content if c.type == "text"))
    return out


def _summaries(lines: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [e for e in lines if e.get("event") == "stream.summary"]


@pytest.mark.asyncio
async def test_serve_logs_one_summary_per_tool_call() -> None:
    async with mock_upstream() as upstream:
        with ServeProcess("--upstream", upstream, "--port", "0", "--log-format", "json") as serve:
            (started,) = await asyncio.to_thread(serve.wait_for, "proxy.started")
            got = await _calls(started["listen"] + "/mcp", [True, False])
            assert got == [fixtures.MESSAGE] * 2
            await asyncio.to_thread(serve.wait_for, "stream.summary", 2)
            log = serve.stop()
    lines = [json.loads(x) for x in log.splitlines() if x.strip()]
    first, second = _summaries(lines)
    for summary, progress in ((first, 4), (second, 0)):
        assert (summary["dialect"], summary["verdict"], summary["path"]) == ("mcp", "ok", "/mcp")
        assert summary["text_length"] == len(fixtures.MESSAGE)
        found = summary["mcp"]
        assert found["method"] == "tools/call"
        assert found["tool"] == mcp.TOOL
        assert found["protocol_version"] == mcp.LATEST_LEGACY
        assert (found["outcome"], found["error_code"]) == ("result", None)
        assert (found["progress"], found["logs"], found["responses"]) == (progress, 4, 1)
        # 2025-11-25: a priming event, retry, an id on each of the call's events
        events = 1 + 4 + progress + 1
        assert (found["primed"], found["retry_ms"], found["event_ids"]) == (True, 500, events)
        assert found["result_ms"] is not None
        if progress:
            assert 0 < found["first_progress_ms"] <= found["result_ms"]
        else:
            assert found["first_progress_ms"] is None
    assert first["mcp"]["request_id"] != second["mcp"]["request_id"]
    # the handshake, the tool list and the rest are JSON: no summary of their own
    assert [e["path"] for e in lines if e.get("event") == "proxy.request"]
    assert not [e for e in lines if e.get("level") in ("warning", "error")], lines
    assert fixtures.MESSAGE[:20] not in log  # the result's text is message text: not logged


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("fault", "reason", "alert", "outcome"),
    [
        ("error_event", "error_event", "sse.error_event", "error"),
        ("no_terminal", "truncated", "sse.truncated", None),
    ],
)
async def test_a_broken_tool_call_is_logged_broken(
    fault: str, reason: str, alert: str, outcome: str | None
) -> None:
    async with mock_upstream() as upstream:
        with ServeProcess("--upstream", upstream, "--port", "0", "--log-text") as serve:
            (started,) = await asyncio.to_thread(serve.wait_for, "proxy.started")
            (got,) = await _calls(started["listen"] + f"/mcp?fault={fault}", [True])
            assert not isinstance(got, str)  # the SDK raised: the call failed
            (summary,) = await asyncio.to_thread(serve.wait_for, "stream.summary")
            serve.stop()
    assert (summary["verdict"], summary["verdict_reason"], summary["level"]) == (
        "broken",
        reason,
        "warning",
    )
    assert summary["alerts"] == {alert: 1}
    assert summary["mcp"]["outcome"] == outcome
    assert summary["mcp"]["progress"] == 4
    assert summary["text"] == ""  # --log-text: the text it carried (none: it lost the result)


async def _raw_call(url: str, version: str, options: str) -> None:
    """A handshake in ``version``, then one tool call whose stream has ``options``."""
    import aiohttp

    accept = {"Accept": "application/json, text/event-stream"}
    init = {"protocolVersion": version, "capabilities": {}, "clientInfo": {"name": "t"}}
    body = {"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": init}
    async with aiohttp.ClientSession() as http:
        async with http.post(url, json=body, headers=accept) as resp:
            session = resp.headers["Mcp-Session-Id"]
        headers = {
            **accept,
            "Mcp-Session-Id": session,
            "MCP-Protocol-Version": version,
            "X-Mock-Mcp": options,
        }
        call = {"name": mcp.TOOL, "arguments": {}}
        body = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": call}
        async with http.post(url, json=body, headers=headers) as resp:
            await resp.read()


@pytest.mark.asyncio
async def test_a_priming_event_alerts_only_to_a_client_older_than_priming() -> None:
    """2025-11-25 primes: nothing to say; 2025-06-18 clients parse the empty data as JSON."""
    cases = [("2025-11-25", ""), ("2025-06-18", "priming=on"), ("2025-06-18", "")]
    async with mock_upstream() as upstream:
        with ServeProcess("--upstream", upstream, "--port", "0", "--log-format", "json") as serve:
            (started,) = await asyncio.to_thread(serve.wait_for, "proxy.started")
            for version, options in cases:
                await _raw_call(started["listen"] + "/mcp", version, options)
            summaries = await asyncio.to_thread(serve.wait_for, "stream.summary", len(cases))
            log = serve.stop()
    got = [(s["mcp"]["primed"], s["alerts"], s["mcp"]["protocol_version"]) for s in summaries]
    assert got == [
        (True, {}, "2025-11-25"),
        (True, {"mcp.unexpected_message": 1}, "2025-06-18"),
        (False, {}, "2025-06-18"),
    ]
    lines = [json.loads(x) for x in log.splitlines() if x.strip()]
    (alert,) = [e for e in lines if e.get("event") == "mcp.unexpected_message"]
    assert (alert["reason"], alert["event_index"]) == ("priming_unsupported", 0)


def test_an_mcp_summary_on_a_terminal_names_the_tool_and_its_progress() -> None:
    from sse_proxy.obs.console import ConsoleLines

    line = ConsoleLines(color=False)(
        None,
        "info",
        {
            "event": "stream.summary",
            "verdict": "ok",
            "method": "POST",
            "path": "/mcp",
            "upstream_status": 200,
            "model": None,
            "mcp": {"tool": "stream_text", "method": "tools/call", "progress": 4},
            "ttft_ms": 6.2,
            "duration_ms": 6.6,
        },
    )
    assert line.startswith("ok       POST /mcp 200 stream_text progress=4 ttft=6ms"), line


def test_the_request_context_reads_the_jsonrpc_request_of_the_body() -> None:
    from multidict import CIMultiDict

    from sse_proxy.server.context import RequestContext

    headers = CIMultiDict({"mcp-protocol-version": "2025-11-25", "Last-Event-ID": "a:3"})
    ctx = RequestContext.from_headers(headers, "default", "POST")
    ctx.read_body(json.dumps({**json.loads(json.dumps(_CALL)), "id": "x"}).encode())
    rpc = ctx.rpc_request
    assert rpc is not None
    assert (rpc.protocol_version, rpc.calls[0].id, rpc.calls[0].tool) == (
        "2025-11-25",
        '"x"',
        mcp.TOOL,
    )
    get = RequestContext.from_headers(headers, "default", "GET").rpc_request
    assert get is not None
    assert (get.http_method, get.last_event_id, get.expects_response) == ("GET", "a:3", False)
    llm = RequestContext.from_headers(headers, "default", "POST")
    llm.read_body(b'{"model": "gpt-4o-mini", "stream": true}')
    assert (llm.rpc_request, llm.request_model) == (None, "gpt-4o-mini")


_CALL = {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": mcp.TOOL}}
