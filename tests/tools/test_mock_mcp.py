"""The mock upstream's MCP server over real loopback sockets, raw and with the official SDK.

Raw requests check the HTTP side as the Streamable HTTP specification states it (status
codes, session header, 202s, the 2026-07-28 envelope); the SSE answers are read with the
test suite's own parser (the oracle), not the proxy's; and the Python SDK (``mcp``), both
its probing ``Client`` and its stateless mode, must get the canonical answer.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from sse_proxy.names import DIALECT_BODIES
from sse_proxy.tools import fixtures
from sse_proxy.tools.fixtures import mcp
from sse_proxy.tools.mock_upstream import MCP_SERVER, mock_upstream, start_mock_upstream
from tests.support.oracle import parse

ACCEPT = {"Accept": "application/json, text/event-stream"}
MODERN_META = {
    "io.modelcontextprotocol/protocolVersion": "2026-07-28",
    "io.modelcontextprotocol/clientCapabilities": {},
}


@pytest_asyncio.fixture
async def url() -> AsyncIterator[str]:
    async with mock_upstream() as base:
        yield base + "/mcp"


def rpc(method: str, rid: object = 1, **params: Any) -> dict[str, Any]:
    return {"jsonrpc": "2.0", "id": rid, "method": method, "params": params}


def call(rid: object = 1, token: object = None, **args: Any) -> dict[str, Any]:
    meta = {} if token is None else {"_meta": {"progressToken": token}}
    return rpc("tools/call", rid, name=mcp.TOOL, arguments=args, **meta)


async def post(url: str, body: object, **headers: str) -> tuple[int, dict[str, str], bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json=body, headers={**ACCEPT, **headers}) as resp,
    ):
        return resp.status, dict(resp.headers), await resp.read()


def messages(body: bytes) -> list[dict[str, Any]]:
    """The JSON-RPC messages of an SSE body, read with the suite's own parser (a priming
    event, empty data, is none)."""
    return [json.loads(e.data) for e in parse(body).events if e.data]


async def session(url: str, version: str = "2025-11-25") -> str:
    status, headers, body = await post(url, rpc("initialize", 0, protocolVersion=version))
    assert status == 200
    assert json.loads(body)["result"]["protocolVersion"] == version
    sid = headers["Mcp-Session-Id"]
    assert all(0x21 <= ord(c) <= 0x7E for c in sid)
    return sid


@pytest.mark.asyncio
async def test_the_handshake_then_a_tool_call_that_streams_the_fixture(url: str) -> None:
    sid = await session(url)
    for note in (
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 0, "result": {}},
    ):
        status, _, body = await post(url, note, **{"Mcp-Session-Id": sid})
        assert (status, body) == (202, b"")
    status, _, body = await post(url, rpc("tools/list", 2), **{"Mcp-Session-Id": sid})
    assert json.loads(body)["result"]["tools"] == [mcp.TOOL_DEFINITION]
    headers = {"Mcp-Session-Id": sid, "MCP-Protocol-Version": "2025-11-25"}
    status, got, body = await post(url, call(3, "tok", progress=2), **headers)
    assert (status, got["Content-Type"].split(";")[0]) == (200, "text/event-stream")
    fields = mcp.StreamFields("s1", priming=True, ids=True, retry=mcp.DEFAULT_RETRY_MS)
    want = mcp.McpCall(id=3, progress_token="tok", progress=2, revision="2025-11-25", sse=fields)
    assert body == fixtures.clean_stream("mcp", request=want)
    events = parse(body).events  # 2025-11-25: priming (id, retry, empty data), ids on all
    assert (events[0].id, events[0].retry, events[0].data) == ("s1-0", 500, "")
    assert [e.id for e in events] == [f"s1-{n}" for n in range(len(events))]
    sent = messages(body)
    assert [m.get("method") for m in sent].count("notifications/progress") == 2
    assert all(
        m["params"]["progressToken"] == "tok"
        for m in sent
        if m.get("method") == "notifications/progress"
    )
    response = sent[-1]
    assert response["id"] == 3
    assert (
        "".join(c["text"] for c in response["result"]["content"] if c["type"] == "text")
        == fixtures.MESSAGE
    )


@pytest.mark.asyncio
async def test_the_sse_fields_are_the_revisions_and_the_options_change_them(url: str) -> None:
    """Event ids are unique in a session and name their stream; each field can be turned
    off or on, per request, whatever the revision; a bad option is a one-line 400."""

    async def events(version: str, sid: str | None, options: str = "") -> list[Any]:
        headers = {"MCP-Protocol-Version": version, "X-Mock-Mcp": options}
        if sid is not None:
            headers["Mcp-Session-Id"] = sid
        body = call(1, "t", progress=1)
        if version == "2026-07-28":
            body["params"]["_meta"].update(MODERN_META)
            headers.update({"Mcp-Method": "tools/call", "Mcp-Name": mcp.TOOL})
        status, _, raw = await post(url, body, **headers)
        assert status == 200, raw
        return parse(raw).events

    sid = await session(url)
    first, second = await events("2025-11-25", sid), await events("2025-11-25", sid)
    assert [e.id for e in first][:2] + [e.id for e in second][:2] == [
        "s1-0",
        "s1-1",
        "s2-0",
        "s2-1",
    ]
    quiet = await events("2025-11-25", sid, "priming=off, retry=200")
    assert (quiet[0].id, quiet[0].retry, bool(quiet[0].data)) == ("s3-1", 200, True)
    bare = await events("2025-11-25", sid, "ids=off,retry=off")
    assert (bare[0].data, bare[0].retry) == ("", None)  # the priming event alone has an id
    assert {e.id for e in bare} == {"s4-0"}
    old = await session(url, "2025-06-18")
    assert {e.id for e in await events("2025-06-18", old)} == {None}
    assert (await events("2025-06-18", old, "priming=on"))[0].data == ""  # the bug, on demand
    modern = await events("2026-07-28", None)
    assert ({e.id for e in modern}, {e.retry for e in modern}) == ({None}, {None})
    assert (await events("2026-07-28", None, "ids=on"))[0].id == "r2-1"  # its second stream
    status, _, raw = await post(url, call(1), **{"X-Mock-Mcp": "priming=maybe"})
    assert (status, json.loads(raw)["error"]["message"]) == (
        400,
        "priming must be on or off, not 'maybe'",
    )


@pytest.mark.asyncio
async def test_subscriptions_listen_is_acknowledged_and_cancellations_recorded() -> None:
    runner, base = await start_mock_upstream()
    try:
        headers = {
            **ACCEPT,
            "MCP-Protocol-Version": "2026-07-28",
            "Mcp-Method": "subscriptions/listen",
        }
        listen = rpc("subscriptions/listen", "L1", _meta=MODERN_META)
        async with (
            aiohttp.ClientSession() as http,
            http.post(base + "/mcp", json=listen, headers=headers) as resp,
        ):
            assert resp.headers["Content-Type"] == "text/event-stream"
            first = await resp.content.readuntil(b"\n\n")
        ack = json.loads(parse(first).events[0].data)
        assert ack["method"] == "notifications/subscriptions/acknowledged"
        assert ack["params"]["_meta"]["io.modelcontextprotocol/subscriptionId"] == "L1"
        note = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": 7}}
        assert (await post(base + "/mcp", note))[0] == 202
        assert runner.app[MCP_SERVER].cancelled_ids == [7]
    finally:
        await runner.cleanup()


@pytest.mark.asyncio
async def test_the_example_request_gets_the_canonical_bytes_and_no_progress_unasked(
    url: str,
) -> None:
    status, _, body = await post(url, DIALECT_BODIES["mcp"])
    assert (status, body) == (200, fixtures.clean_stream("mcp"))
    status, _, body = await post(url, call(5))  # no progressToken: no progress
    assert "notifications/progress" not in body.decode()
    assert messages(body)[-1]["id"] == 5


@pytest.mark.asyncio
async def test_sessions_gets_and_deletes_as_the_specification_says(url: str) -> None:
    sid = await session(url, "2025-06-18")
    async with aiohttp.ClientSession() as http:
        async with http.get(
            url, headers={"Accept": "text/event-stream", "Mcp-Session-Id": sid}
        ) as resp:
            assert (resp.status, resp.headers["Allow"]) == (405, "POST, DELETE")
        async with http.delete(url, headers={"Mcp-Session-Id": sid}) as resp:
            assert resp.status == 200
        async with http.delete(url, headers={"Mcp-Session-Id": sid}) as resp:
            assert resp.status == 404
    status, _, body = await post(url, call(1), **{"Mcp-Session-Id": sid})
    assert status == 404
    assert json.loads(body)["error"]["code"] == -32001
    status, _, body = await post(url, rpc("initialize", 0, protocolVersion="1999-01-01"))
    assert json.loads(body)["result"]["protocolVersion"] == mcp.LATEST_LEGACY


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("body", "headers", "status", "code"),
    [
        (
            rpc("server/discover", 1, _meta=MODERN_META),
            {"MCP-Protocol-Version": "2026-07-28", "X-Mock-Mcp": "era=legacy"},
            400,
            -32601,
        ),
        (
            rpc(
                "server/discover",
                1,
                _meta={"io.modelcontextprotocol/protocolVersion": "2026-07-28"},
            ),
            {"MCP-Protocol-Version": "2026-07-28"},
            400,
            -32602,
        ),
        (rpc("server/discover"), {}, 400, -32601),
        (call(1), {"MCP-Protocol-Version": "2099-01-01"}, 400, -32022),
        ([call(1)], {}, 400, -32600),
        ({"id": 1, "method": "tools/call"}, {}, 400, -32600),
        (rpc("tools/call", 1, name="nope"), {}, 200, -32602),
        (call(1, progress=99), {}, 200, -32602),
        (call(1, extra=1), {}, 200, -32602),
        (rpc("resources/list"), {}, 200, -32601),
        (
            rpc("tools/call", 1, name=mcp.TOOL, _meta={**MODERN_META}),
            {"MCP-Protocol-Version": "2025-11-25"},
            400,
            -32020,
        ),
        (
            rpc("tools/list", 1, _meta={"io.modelcontextprotocol/protocolVersion": "2026-07-28"}),
            {"MCP-Protocol-Version": "2026-07-28"},
            400,
            -32602,
        ),
        (
            rpc("resources/list", 1, _meta=MODERN_META),
            {"MCP-Protocol-Version": "2026-07-28"},
            404,
            -32601,
        ),
    ],
)
async def test_requests_it_cannot_answer_get_jsonrpc_errors(
    url: str, body: object, headers: dict[str, str], status: int, code: int
) -> None:
    got, _, raw = await post(url, body, **headers)
    assert got == status
    assert json.loads(raw)["error"]["code"] == code
    async with (
        aiohttp.ClientSession() as http,
        http.post(url, data=b"{not json", headers=ACCEPT) as resp,
    ):
        assert resp.status == 400
        assert (await resp.json())["error"]["code"] == -32700


@pytest.mark.asyncio
async def test_the_stateless_revision_is_answered_statelessly(url: str) -> None:
    headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "tools/list"}
    status, got, body = await post(url, rpc("tools/list", 1, _meta=MODERN_META), **headers)
    result = json.loads(body)["result"]
    assert (status, result["resultType"], "Mcp-Session-Id" in got) == (200, "complete", False)
    headers = {
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": mcp.TOOL,
    }
    quiet = rpc(
        "tools/call", 2, name=mcp.TOOL, arguments={}, _meta={**MODERN_META, "progressToken": 1}
    )
    status, _, body = await post(url, quiet, **headers)
    sent = messages(body)
    assert [m.get("method") for m in sent[:-1]] == ["notifications/progress"] * 4  # no logs unasked
    assert sent[-1]["result"]["resultType"] == "complete"
    loud = rpc(
        "tools/call",
        3,
        name=mcp.TOOL,
        _meta={**MODERN_META, "io.modelcontextprotocol/logLevel": "debug"},
    )
    status, _, body = await post(url, loud, **headers)
    assert [m.get("method") for m in messages(body)].count("notifications/message") == 4
    status, _, body = await post(url, quiet, **{**headers, "Mcp-Name": "other"})
    assert (status, json.loads(body)["error"]["code"]) == (400, -32020)


@pytest.mark.asyncio
async def test_server_discover_lists_both_eras_unless_told_legacy(url: str) -> None:
    headers = {"MCP-Protocol-Version": "2026-07-28", "Mcp-Method": "server/discover"}
    status, got, body = await post(url, rpc("server/discover", 1, _meta=MODERN_META), **headers)
    result = json.loads(body)["result"]
    assert (status, "Mcp-Session-Id" in got) == (200, False)
    assert result["resultType"] == "complete"
    assert result["supportedVersions"][0] == "2026-07-28"
    assert "2025-11-25" in result["supportedVersions"]
    assert result["capabilities"]["tools"] == {"listChanged": False}
    assert (type(result["ttlMs"]), result["cacheScope"]) == (int, "public")
    assert result["_meta"]["io.modelcontextprotocol/serverInfo"] == mcp.SERVER_INFO
    status, _, body = await post(
        url + "?mcp=era%3Dlegacy", rpc("server/discover", 2, _meta=MODERN_META), **headers
    )
    assert (status, json.loads(body)["error"]["code"]) == (400, -32601)
    with pytest.raises(ValueError, match="era must be"):
        mcp.McpOptions.parse("era=modern")


@pytest.mark.asyncio
async def test_the_mock_faults_break_the_tool_call_the_mcp_way(url: str) -> None:
    for fault in ("error_event", "no_terminal", "invalid_utf8"):
        status, _, body = await post(url, call(4, "t"), **{"X-Mock-Fault": fault})
        want = mcp.McpCall(id=4, progress_token="t")
        assert body == fixtures.faulty_stream(fault, "mcp", request=want), fault
    status, _, body = await post(url, call(4, "t"), **{"X-Mock-Fault": "error_event"})
    assert status == 200  # the error is the stream's last message, not the HTTP status
    assert messages(body)[-1] == {
        "jsonrpc": "2.0",
        "id": 4,
        "error": {"code": -32603, "message": "Internal error"},
    }
    with pytest.raises(aiohttp.ClientPayloadError):
        await post(url, call(4, "t"), **{"X-Mock-Fault": "reset"})


@pytest.mark.asyncio
async def test_a_harness_puts_its_own_stream_in_and_reads_the_calls() -> None:
    seen: list[mcp.McpCall] = []

    def stream_for(asked: mcp.McpCall) -> tuple[bytes, bool]:
        seen.append(asked)
        return fixtures.clean_stream("mcp", fixtures.SHORT_TOKENS, request=asked), False

    runner, base = await start_mock_upstream(mcp_stream=stream_for)
    try:
        status, _, body = await post(base + "/mcp", call("x", 9, progress=1))
        assert (status, messages(body)[-1]["id"]) == (200, "x")
        assert (
            runner.app[MCP_SERVER].calls
            == seen
            == [mcp.McpCall(id="x", progress_token=9, progress=1)]
        )
    finally:
        await runner.cleanup()


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("mode", "era"), [("auto", "legacy"), ("auto", "dual"), ("2026-07-28", "dual")]
)
async def test_the_official_python_sdk_gets_the_answer(url: str, mode: str, era: str) -> None:
    """The probing ``Client`` against a handshake-era server (server/discover refused, then
    initialize, a GET, tools/list, DELETE) and against this dual-era one (the probe finds
    2026-07-28: stateless, no session), and the pinned one, with progress: the text
    content is the canonical answer."""
    from mcp import Client

    seen: list[tuple[float, float | None, str | None]] = []

    async def on_progress(progress: float, total: float | None, message: str | None) -> None:
        seen.append((progress, total, message))

    runner, base = await start_mock_upstream()
    try:
        async with Client(f"{base}/mcp?mcp=era%3D{era}", mode=mode) as client:
            result = await client.call_tool(
                mcp.TOOL, dict(mcp.TOOL_ARGS), progress_callback=on_progress
            )
            server = runner.app[MCP_SERVER]
            revisions = [c.revision for c in server.calls]
            sessions = len(server.sessions)
    finally:
        await runner.cleanup()
    assert "".join(c.text for c in result.content if c.type == "text") == fixtures.MESSAGE
    assert [p[0] for p in seen] == [1, 2, 3, 4]
    assert not result.is_error
    assert (revisions, sessions) == (
        (["2025-11-25"], 1) if era == "legacy" else (["2026-07-28"], 0)
    )
