"""Tool calls checked as they end: their fragments must form JSON, their indices and ids must
agree, and their arguments must meet the schema the request declared
(``sse.tool_call_invalid``, with the call's index and the first error, never the arguments).
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sse_proxy.core import StreamReassembler, ToolCallInvalid, ToolSchemas
from sse_proxy.core.toolschema import MAX_TOOLS
from sse_proxy.tools import fixtures
from sse_proxy.tools.fixtures.content import TOOL_SCHEMAS
from sse_proxy.tools.fixtures.streams import TOOL_DIALECTS, dumps, serialize, tool_frames
from sse_proxy.tools.fixtures.tools import tool_request_body
from tests.support.cuts import every_cut

SECRET = "Kelvin-7d3f"
"""A value in bad arguments: it must never appear in an alert."""


def _alerts(data: bytes, dialect: str, schemas: ToolSchemas | None) -> list[Any]:
    r = StreamReassembler(dialect, tool_schemas=schemas)
    out = list(r.feed(data).alerts) + list(r.close().alerts)
    return [a for a in out if isinstance(a, ToolCallInvalid)]


def _schemas(dialect: str) -> ToolSchemas:
    found = ToolSchemas.from_request(tool_request_body(dialect))
    assert found is not None
    return found


BAD = (("get_weather", '{"city":"Zürich","unit":"' + SECRET + '"}'), fixtures.TOOL_CALLS[1])


@pytest.mark.parametrize("dialect", TOOL_DIALECTS)
def test_every_dialects_request_declares_the_schemas_it_is_checked_against(dialect: str) -> None:
    schemas = _schemas(dialect)
    assert len(schemas) == 3
    assert "get_weather" in schemas
    assert "get_time" in schemas
    assert schemas.check("get_location", {}) is None  # a tool without arguments
    assert schemas.check("get_time", {"timezone": "UTC"}) is None
    assert schemas.check("get_time", {}) is not None
    assert schemas.check("unknown", {"anything": 1}) is None  # no schema, nothing to say


@pytest.mark.parametrize("dialect", TOOL_DIALECTS)
def test_valid_calls_raise_nothing_and_a_schema_error_names_the_call(dialect: str) -> None:
    good = serialize(tool_frames(dialect, fixtures.SHORT_TOKENS), "\n")
    assert _alerts(good, dialect, _schemas(dialect)) == []
    bad = serialize(tool_frames(dialect, fixtures.SHORT_TOKENS, BAD), "\n")
    (alert,) = _alerts(bad, dialect, _schemas(dialect))
    assert (alert.reason, alert.tool) == ("schema", "get_weather")
    assert alert.index == {"openai": 0, "anthropic": 1, "responses": 1, "gemini": 0}[dialect]
    assert "enum" in alert.error
    assert "properties/unit" in alert.error
    assert SECRET not in json.dumps(alert.fields())
    assert alert.name == "sse.tool_call_invalid"
    assert _alerts(bad, dialect, None) == [], "without the request's schemas: JSON only"


def test_the_first_schema_error_is_about_the_schema_not_the_values() -> None:
    schemas = ToolSchemas(TOOL_SCHEMAS)
    missing = schemas.check("get_weather", {"unit": "celsius"})
    assert missing is not None
    assert 'required property "city" is missing' in missing
    extra = schemas.check("get_weather", {"city": "x", "unit": "celsius", SECRET: 1})
    assert extra is not None
    assert "does not declare" in extra
    assert SECRET not in extra
    wrong = schemas.check("get_weather", {"city": "x", "unit": "celsius", "days": SECRET})
    assert wrong is not None
    assert 'not of type "integer"' in wrong
    assert SECRET not in wrong


def test_gemini_openapi_schemas_and_unusable_schemas() -> None:
    body = {
        "tools": [
            {
                "functionDeclarations": [
                    {
                        "name": "f",
                        "parameters": {
                            "type": "OBJECT",
                            "properties": {"n": {"type": "INTEGER"}},
                            "required": ["n"],
                        },
                    },
                    {"name": "bad", "parameters": {"type": "no-such-type"}},
                    {"name": "remote", "parametersJsonSchema": {"$ref": "https://x.test/s"}},
                ]
            }
        ]
    }
    schemas = ToolSchemas.from_request(body)
    assert schemas is not None
    assert schemas.check("f", {"n": 1}) is None
    assert schemas.check("f", {"n": "one"}) is not None
    assert schemas.check("bad", {"n": 1}) is None  # a schema the API would refuse: skipped
    assert schemas.check("remote", {"n": 1}) is None  # never fetched
    assert ToolSchemas.from_request({"tools": "nope"}) is None
    assert ToolSchemas.from_request([1, 2]) is None
    many = {"tools": [{"name": f"t{i}", "input_schema": {}} for i in range(MAX_TOOLS + 5)]}
    found = ToolSchemas.from_request(many)
    assert found is not None
    assert len(found) == MAX_TOOLS


def _chat(delta: dict[str, Any], finish: str | None = None) -> bytes:
    obj = {"choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
    return f"data: {dumps(obj)}\n\n".encode()


def _call(index: Any, cid: str | None, name: str | None, args: str) -> dict[str, Any]:
    tc: dict[str, Any] = {"function": {"arguments": args}}
    if index is not None:
        tc["index"] = index
    if cid is not None:
        tc["id"] = cid
    if name is not None:
        tc["function"]["name"] = name
    return {"tool_calls": [tc]}


def test_two_calls_sharing_one_index_are_inconsistent() -> None:
    """Gemini's OpenAI-compatible endpoint, reported: every parallel call at index 0; a
    client that assembles by index merges them into one call of invalid JSON."""
    data = (
        _chat(_call(0, "call_a", "get_time", '{"timezone":"UTC"}'))
        + _chat(_call(0, "call_b", "get_time", '{"timezone":"CET"}'))
        + _chat({}, "tool_calls")
        + b"data: [DONE]\n\n"
    )
    (alert,) = _alerts(data, "openai", _schemas("openai"))
    assert alert.reason == "inconsistent"
    assert alert.index == 0
    assert "second call id" in alert.error
    for cut, pieces in every_cut(data):
        r = StreamReassembler("openai")
        got = [a for p in pieces for a in r.feed(p).alerts] + list(r.close().alerts)
        calls = [a for a in got if isinstance(a, ToolCallInvalid)]
        assert [(a.reason, a.index) for a in calls] == [("inconsistent", 0)], cut


def test_fragments_without_an_index_and_calls_without_a_name() -> None:
    data = (
        _chat(_call(None, "call_a", "get_time", '{"timezone":"UTC"}'))
        + _chat(_call(3, None, None, '{"x":1}'))
        + b"data: [DONE]\n\n"
    )
    alerts = _alerts(data, "openai", None)
    assert sorted((a.index, a.reason) for a in alerts) == [(0, "inconsistent"), (3, "inconsistent")]
    errors = " ".join(a.error for a in alerts)
    assert "without its index" in errors
    assert "never got a function name" in errors


def test_arguments_that_never_became_json_are_reported_once_at_the_finish() -> None:
    data = _chat(_call(0, "c", "get_time", '{"timezone": "U')) + _chat({}, "tool_calls")
    r = StreamReassembler("openai")
    mid = r.feed(data).alerts
    (alert,) = [a for a in mid if isinstance(a, ToolCallInvalid)]  # at the finish reason
    assert alert.reason == "invalid_json"
    assert alert.byte_offset > data.index(b"finish_reason")  # the chunk that ended it
    assert not any(isinstance(a, ToolCallInvalid) for a in r.close().alerts)


def test_responses_done_arguments_must_match_the_deltas() -> None:
    frames = tool_frames("responses", fixtures.SHORT_TOKENS)
    changed = []
    for event, data in frames:
        payload = data
        if event == "response.function_call_arguments.done" and '"get_time"' not in data:
            obj = json.loads(data)
            obj["arguments"] = obj["arguments"].replace("Zürich", "Bern")
            payload = dumps(obj)
        changed.append((event, payload))
    alerts = _alerts(serialize(changed, "\n"), "responses", None)
    assert [(a.reason, a.tool) for a in alerts] == [("inconsistent", "get_weather")]
    assert "differ" in alerts[0].error or "other arguments" in alerts[0].error


def test_anthropic_input_json_on_a_text_block_is_inconsistent() -> None:
    start = {"type": "content_block_start", "index": 0, "content_block": {"type": "text"}}
    delta = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "input_json_delta", "partial_json": "{}"},
    }
    frames = [
        ("message_start", dumps({"type": "message_start", "message": {"id": "m"}})),
        ("content_block_start", dumps(start)),
        ("content_block_delta", dumps(delta)),
        ("content_block_stop", dumps({"type": "content_block_stop", "index": 0})),
        ("message_stop", dumps({"type": "message_stop"})),
    ]
    (alert,) = _alerts(serialize(frames, "\n"), "anthropic", None)
    assert (alert.reason, alert.index) == ("inconsistent", 0)
    assert "text block" in alert.error


def test_gemini_args_are_checked_as_the_part_arrives() -> None:
    chunk = {
        "candidates": [
            {
                "content": {
                    "parts": [{"functionCall": {"name": "get_time", "args": {"tz": SECRET}}}]
                },
                "index": 0,
            }
        ]
    }
    data = f"data: {dumps(chunk)}\n\n".encode()
    r = StreamReassembler("gemini", tool_schemas=_schemas("gemini"))
    (alert,) = [a for a in r.feed(data).alerts if isinstance(a, ToolCallInvalid)]
    assert (alert.reason, alert.index, alert.tool) == ("schema", 0, "get_time")
    assert SECRET not in alert.error


def test_the_reassembler_takes_schemas_until_the_first_feed() -> None:
    bad = serialize(tool_frames("anthropic", fixtures.SHORT_TOKENS, BAD), "\n")
    r = StreamReassembler()  # detected later, as in the proxy
    r.tool_schemas = _schemas("anthropic")
    alerts = list(r.feed(bad).alerts) + list(r.close().alerts)
    assert [a.reason for a in alerts if isinstance(a, ToolCallInvalid)] == ["schema"]
