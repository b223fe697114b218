"""The MCP dialect: JSON-RPC over SSE, checked against the request the stream answers.

The expectations are independent of the core: the messages are built here with plain JSON,
the text is what the result's ``text`` items join to, and the fixture's is the canonical
answer. Every rule is tried both ways (broken and not), with and without the request.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sse_proxy.core import StreamReassembler
from sse_proxy.core.dialects.registry import detect, dialect_for_headers, dialect_for_path
from sse_proxy.core.rpcrequest import RpcRequest, id_key
from sse_proxy.tools import fixtures
from sse_proxy.tools.fixtures import mcp as fixture
from tests.support.cuts import every_cut, run, seeded_splits

CALL = {
    "jsonrpc": "2.0",
    "id": 7,
    "method": "tools/call",
    "params": {"name": "search", "arguments": {"q": "secret"}, "_meta": {"progressToken": "t"}},
}
REQUEST = RpcRequest.from_http("POST", {"MCP-Protocol-Version": "2025-11-25"}, CALL)


def ev(obj: Any, *, event: str | None = "message", id: str | None = None) -> bytes:
    data = obj if isinstance(obj, str) else json.dumps(obj, ensure_ascii=False)
    head = (f"id: {id}\n" if id else "") + (f"event: {event}\n" if event else "")
    return f"{head}data: {data}\n\n".encode()


def progress(n: Any, token: Any = "t") -> dict[str, Any]:
    params = {"progressToken": token, "progress": n, "total": 3}
    return {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}


def log(level: Any = "info", data: Any = "étape 🦊") -> dict[str, Any]:
    params = {"level": level, "logger": "x", "data": data}
    return {"jsonrpc": "2.0", "method": "notifications/message", "params": params}


def result(rid: Any = 7, *texts: str, is_error: bool = False) -> dict[str, Any]:
    content: list[dict[str, Any]] = [{"type": "text", "text": t} for t in texts]
    content.insert(1, {"type": "image", "data": "AAAA", "mimeType": "image/png"})
    return {"jsonrpc": "2.0", "id": rid, "result": {"content": content, "isError": is_error}}


STREAM = (
    ev(log())
    + ev(progress(1))
    + ev(progress(2))
    + ev(log("debug", {"k": "日本"}))
    + ev(result(7, "Hé", "llo 🙂", " 日本"))
)


def feed(
    data: bytes, request: RpcRequest | None = REQUEST, **kw: Any
) -> tuple[StreamReassembler, list[str]]:
    r = StreamReassembler(kw.pop("dialect", None), rpc_request=request, **kw)
    alerts = [a.name for a in r.feed(data).alerts]
    alerts += [a.name for a in r.close().alerts]
    return r, alerts


def reasons(data: bytes, request: RpcRequest | None = REQUEST) -> list[tuple[str, str]]:
    r = StreamReassembler(rpc_request=request)
    out = [*r.feed(data).alerts, *r.close().alerts]
    return [(a.name, getattr(a, "reason", "")) for a in out]


# -- what is read -------------------------------------------------------------------------


def test_a_tool_call_stream_is_detected_read_and_summed_up() -> None:
    r, alerts = feed(STREAM)
    assert (r.dialect, r.text, alerts) == ("mcp", "Héllo 🙂 日本", [])
    summary = r.summary()["mcp"]
    assert summary == {
        "method": "tools/call",
        "tool": "search",
        "request_id": "7",
        "protocol_version": "2025-11-25",
        "outcome": "result",
        "error_code": None,
        "progress": 2,
        "logs": 2,
        "notifications": 0,
        "server_requests": 0,
        "responses": 1,
        "primed": False,
        "retry_ms": None,
        "event_ids": 0,
        "resumed": False,
    }
    assert "secret" not in json.dumps(summary)  # the tool's arguments are never kept
    meta = r.stream_meta()
    assert (meta.response_id, meta.finish_reasons) == ("7", ["result"])


def test_the_result_is_the_same_at_every_cut_and_in_any_reads() -> None:
    want = feed(STREAM)[0].text
    for cut, pieces in every_cut(STREAM):
        res = run(pieces, rpc_request=REQUEST)
        assert (res.text, res.alerts, res.dialect) == (want, (), "mcp"), f"cut at {cut}"
    for seed in range(20):
        res = run(seeded_splits(STREAM, 9, seed), rpc_request=REQUEST)
        assert (res.text, res.alerts) == (want, ())


def test_the_fixture_carries_the_canonical_answer_at_every_cut_of_the_short_one() -> None:
    r, alerts = feed(fixtures.clean_stream("mcp"), None)
    assert (r.text, alerts) == (fixtures.MESSAGE, [])
    assert r.summary()["mcp"]["progress"] == 4
    short = fixtures.clean_stream("mcp", fixtures.SHORT_TOKENS)
    for cut, pieces in every_cut(short):
        res = run(pieces)
        assert (res.text, res.alerts) == (fixtures.SHORT_MESSAGE, ()), f"cut at {cut}"


def test_a_stream_built_for_a_request_answers_it_and_only_it() -> None:
    call = fixture.McpCall(id="req-9", progress_token=5, progress=3)
    body = fixtures.clean_stream("mcp", request=call)
    asked = RpcRequest.from_http(
        "POST",
        {},
        {
            "jsonrpc": "2.0",
            "id": "req-9",
            "method": "tools/call",
            "params": {"_meta": {"progressToken": 5}},
        },
    )
    r, alerts = feed(body, asked)
    assert (r.text, alerts, r.summary()["mcp"]["progress"]) == (fixtures.MESSAGE, [], 3)
    other = RpcRequest.from_http("POST", {}, {"jsonrpc": "2.0", "id": 9, "method": "tools/call"})
    assert ("mcp.unexpected_message", "unknown_id") in reasons(body, other)
    assert ("sse.truncated", "no_terminal_marker") in reasons(body, other)


def test_priming_events_are_legal_counted_and_detected_through() -> None:
    """An id and empty data (and retry) first: no alert, not even before detection."""
    primed = b"id: st1:0\nretry: 500\ndata:\n\n" + STREAM
    for request in (REQUEST, None):
        r, alerts = feed(primed, request)
        assert (r.dialect, r.text, alerts) == ("mcp", "Héllo 🙂 日本", [])
        summary = r.summary()["mcp"]
        assert (summary["primed"], summary["retry_ms"], summary["event_ids"]) == (True, 500, 1)
    r, alerts = feed(primed, REQUEST, hint="mcp")
    assert (r.text, alerts, r.summary()["mcp"]["primed"]) == ("Héllo 🙂 日本", [], True)


def test_event_ids_are_followed_once_the_stream_has_them() -> None:
    body = b"id: a:0\ndata:\n\n" + ev(progress(1), id="a:1") + ev(result(7, "x"), id="a:2")
    r, alerts = feed(body)
    assert alerts == []
    assert r.details()["event_id_list"] == ["a:0", "a:1", "a:2"]


def test_a_tool_error_is_an_outcome_and_a_jsonrpc_error_an_error_event() -> None:
    r, alerts = feed(ev(result(7, "no such city", is_error=True)))
    assert (alerts, r.text, r.summary()["mcp"]["outcome"]) == ([], "no such city", "tool_error")
    error = {"jsonrpc": "2.0", "id": 7, "error": {"code": -32602, "message": "Unknown tool"}}
    r = StreamReassembler(rpc_request=REQUEST)
    out = [*r.feed(ev(progress(1)) + ev(error)).alerts, *r.close().alerts]
    assert [a.name for a in out] == ["sse.error_event"]  # it ends the stream: not truncated
    assert (out[0].error_type, out[0].message) == ("-32602", "Unknown tool")  # type: ignore[attr-defined]
    summary = r.summary()["mcp"]
    assert (summary["outcome"], summary["error_code"]) == ("error", -32602)


def test_a_get_stream_owes_no_response_and_may_not_carry_one() -> None:
    get = RpcRequest.from_http("GET", {"Mcp-Session-Id": "s"})
    assert feed(ev(log()) + ev(log()), get)[1] == []  # ends without a response: fine
    assert ("mcp.unexpected_message", "response_on_get") in reasons(ev(result(7, "x")), get)
    resumed = RpcRequest.from_http("GET", {"Mcp-Session-Id": "s", "Last-Event-ID": "a:1"})
    r, alerts = feed(ev(result(7, "x"), id="a:2"), resumed)
    assert (alerts, r.summary()["mcp"]["resumed"]) == ([], True)
    assert r.details()["event_id_list"] == ["a:2"]


def test_server_requests_and_notifications_are_counted() -> None:
    ping = {"jsonrpc": "2.0", "id": "s1", "method": "ping"}
    cancelled = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {}}
    body = ev(ping) + ev(cancelled) + ev(result(7, "x"))
    r, alerts = feed(body)
    summary = r.summary()["mcp"]
    assert (alerts, summary["server_requests"], summary["notifications"]) == ([], 1, 1)
    modern = RpcRequest.from_http("POST", {"MCP-Protocol-Version": "2026-07-28"}, CALL)
    assert ("mcp.unexpected_message", "server_request") in reasons(body, modern)


# -- what breaks clients --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("payload", "reason"),
    [
        ('"just a string"', "not_object"),
        ("42", "not_object"),
        ('{"jsonrpc": "1.0", "method": "notifications/progress"}', "not_jsonrpc"),
        ('{"method": "notifications/progress"}', "not_jsonrpc"),
        ('{"jsonrpc": "2.0"}', "no_kind"),
        ('{"jsonrpc": "2.0", "id": 7, "result": {}, "error": {}}', "no_kind"),
        ('{"jsonrpc": "2.0", "method": 5}', "no_kind"),
        ('{"jsonrpc": "2.0", "id": true, "result": {}}', "bad_id"),
        ('{"jsonrpc": "2.0", "id": {"a": 1}, "result": {}}', "bad_id"),
        ('{"jsonrpc": "2.0", "result": {}}', "bad_id"),
        ('{"jsonrpc": "2.0", "id": [1], "method": "ping"}', "bad_id"),
        (
            '[{"jsonrpc": "2.0", "method": "notifications/message", "params": {"level": "info"}}]',
            "batch",
        ),
        ("[]", "batch"),
    ],
)
def test_a_data_that_is_not_one_jsonrpc_message_is_reported(payload: str, reason: str) -> None:
    body = ev(log()) + ev(payload) + ev(result(7, "x"))
    found = reasons(body)
    assert ("mcp.invalid_message", reason) in found, found
    assert found.count(("mcp.invalid_message", reason)) == 1
    assert ("mcp.invalid_message", reason) in reasons(body, None)


def test_not_json_is_invalid_json_and_empty_data_is_not() -> None:
    assert feed(ev("{oops") + ev(result(7, "x")))[1] == ["sse.invalid_json"]
    assert feed(ev("") + ev(result(7, "x")))[1] == []


def test_batches_are_read_where_the_revision_has_them() -> None:
    batch = json.dumps([log(), progress(1)])
    old = RpcRequest.from_http("POST", {"MCP-Protocol-Version": "2025-03-26"}, CALL)
    r, alerts = feed(ev(batch) + ev(result(7, "x")), old)
    assert (alerts, r.summary()["mcp"]["progress"], r.summary()["mcp"]["logs"]) == ([], 1, 1)
    both = json.dumps([result(7, "a"), result(8, "b")])
    asked = RpcRequest.from_http("POST", {}, [CALL, {**CALL, "id": 8}])
    r, alerts = feed(ev(both), asked)
    assert (alerts, r.text, r.summary()["mcp"]["requests"]) == ([], "ab", 2)
    assert ("mcp.invalid_message", "batch") in reasons(ev(batch) + ev(result(7, "x")))


def test_responses_that_answer_nobody_twice_or_late_are_reported() -> None:
    assert reasons(ev(result(8, "x"))) == [
        ("mcp.unexpected_message", "unknown_id"),
        ("sse.truncated", "no_terminal_marker"),
    ]
    assert reasons(ev(result("7", "x")))[0] == ("mcp.unexpected_message", "unknown_id")
    assert reasons(ev(result(7, "a")) + ev(result(7, "b"))) == [
        ("mcp.unexpected_message", "after_response"),
        ("mcp.unexpected_message", "duplicate_response"),
    ]
    assert reasons(ev(result(7, "a")) + ev(log())) == [("mcp.unexpected_message", "after_response")]
    r = StreamReassembler(rpc_request=REQUEST)
    alert = r.feed(ev(result("x" * 300, "a"))).alerts[0]
    assert alert.reason == "bad_id"  # type: ignore[attr-defined]
    r = StreamReassembler(rpc_request=REQUEST)
    alert = r.feed(ev(result("z" * 100, "a"))).alerts[0]
    assert alert.id == '"' + "z" * 64 + '"…'  # type: ignore[attr-defined]
    assert feed(ev(result(7.0, "x")))[1] == []  # the same number


def test_without_the_request_the_first_response_ends_the_stream() -> None:
    assert feed(ev(log()) + ev(result(3, "x")), None)[1] == []
    assert reasons(ev(log()), None) == [("sse.truncated", "no_terminal_marker")]
    assert reasons(ev(result(3, "x")) + ev(result(4, "y")), None) == [
        ("mcp.unexpected_message", "after_response"),
    ]


def test_priming_to_a_client_older_than_priming_is_reported() -> None:
    primed = b"id: 0\ndata:\n\n" + ev(result(7, "x"))
    old = RpcRequest.from_http("POST", {"MCP-Protocol-Version": "2025-06-18"}, CALL)
    assert reasons(primed, old) == [("mcp.unexpected_message", "priming_unsupported")]
    assert reasons(primed) == []


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (ev(progress(1, token="other")), "progress_token"),
        (ev(progress(1, token=None)), "progress_token"),
        (ev(progress(2)) + ev(progress(2)), "progress_order"),
        (ev(progress(2)) + ev(progress(1.5)), "progress_order"),
        (ev(progress("1")), "progress_value"),
        (ev({"jsonrpc": "2.0", "method": "notifications/progress"}), "progress_token"),
        (ev(log("verbose")), "log_level"),
        (ev(log(["info"])), "log_level"),
    ],
)
def test_notifications_that_break_their_rules_are_reported(body: bytes, reason: str) -> None:
    found = reasons(body + ev(result(7, "x")))
    assert ("mcp.notification_invalid", reason) in found, found
    assert (
        feed(ev(progress(1)) + ev(progress(2.5)) + ev(log("emergency")) + ev(result(7, "x")))[1]
        == []
    )


def test_a_request_that_asked_for_no_progress_gets_none() -> None:
    quiet = RpcRequest.from_http("POST", {}, {**CALL, "params": {"name": "search"}})
    assert ("mcp.notification_invalid", "progress_token") in reasons(
        ev(progress(1)) + ev(result(7, "x")), quiet
    )


# -- hostile JSON-RPC -----------------------------------------------------------------------


@pytest.mark.parametrize(
    "payload",
    [
        "[" * 100_000 + "]" * 100_000,
        '{"jsonrpc":"2.0","id":' + "[" * 5000 + "]" * 5000 + ',"result":{}}',
        '{"jsonrpc":"2.0","id":' + "9" * 6000 + ',"result":{}}',
        '{"jsonrpc":"2.0","id":' + "9" * 400 + ',"result":{"content":[]}}',
        '{"jsonrpc":"2.0","id":"' + "x" * 500_000 + '","result":{}}',
        '{"jsonrpc":"2.0","method":"notifications/message","params":{"level":"info","data":"'
        + "é" * 300_000
        + '"}}',
        "[" + ",".join(['{"jsonrpc":"2.0","method":"x"}'] * 30_000) + "]",
        "[" + ",".join(["1"] * 200_000) + "]",
        '{"jsonrpc":"2.0","id":7,"result":{"content":['
        + ",".join(['{"type":"text","text":"a"}'] * 50_000)
        + "]}}",
    ],
)
def test_hostile_jsonrpc_gets_alerts_never_a_crash(payload: str) -> None:
    data = ev(payload)
    for request in (REQUEST, None):
        r = StreamReassembler(rpc_request=request, hint="mcp")
        alerts = [*r.feed(data).alerts, *r.close().alerts]
        assert r.dialect == "mcp"
        assert len(alerts) <= 260  # a batch's items are read up to a bound, not without one
        json.dumps(r.summary())  # every summary field can be logged


def test_a_bare_json_batch_of_nothing_but_noise_is_read_up_to_a_bound() -> None:
    items = json.dumps([{"jsonrpc": "1.0"}] * 10_000)
    r, alerts = feed(ev(items), REQUEST, hint="mcp")
    assert alerts.count("mcp.invalid_message") == 257  # the batch, then 256 items
    assert r.text == ""


# -- telling MCP apart ------------------------------------------------------------------------


def test_detection_by_content_path_and_headers() -> None:
    assert detect("message", json.dumps(progress(1))) == "mcp"
    assert detect("message", json.dumps(result(1, "x"))) == "mcp"
    assert detect("message", json.dumps([log()])) == "mcp"
    assert detect("message", "") is None
    assert detect("message", '{"jsonrpc": "2.0"}') is None
    assert detect("message", "[1, 2]") == "text"
    assert dialect_for_path("/mcp") == "mcp"
    assert dialect_for_path("/v1/chat/completions") != "mcp"
    from multidict import CIMultiDict

    assert dialect_for_headers(CIMultiDict({"mcp-session-id": "abc"})) == "mcp"
    assert dialect_for_headers(CIMultiDict({"MCP-PROTOCOL-VERSION": "2025-11-25"})) == "mcp"
    assert dialect_for_headers(CIMultiDict({"content-type": "application/json"})) is None


def test_the_request_is_read_from_its_body_and_headers() -> None:
    modern = {
        **CALL,
        "params": {
            "name": "search",
            "_meta": {"io.modelcontextprotocol/protocolVersion": "2026-07-28", "progressToken": 3},
        },
    }
    rpc = RpcRequest.from_http("post", {"Mcp-Session-Id": "s"}, modern)
    assert (rpc.http_method, rpc.protocol_version, rpc.session, rpc.modern) == (
        "POST",
        "2026-07-28",
        True,
        True,
    )
    (call,) = rpc.calls
    assert (call.key, call.id, call.method, call.tool, call.progress_token) == (
        (False, 7),
        "7",
        "tools/call",
        "search",
        (False, 3),
    )
    notification = RpcRequest.from_http(
        "POST", {}, {"jsonrpc": "2.0", "method": "notifications/initialized"}
    )
    assert not notification.expects_response
    assert id_key(True) is None
    assert id_key(1) == id_key(1.0) != id_key("1")
    assert (
        RpcRequest.from_http("POST", {}, [CALL] * 100).calls
        == (RpcRequest.from_http("POST", {}, CALL).calls[0],) * 64
    )
