"""Message accumulation per dialect on realistic streams, and every alert fired and not fired."""

from __future__ import annotations

import json
from typing import Any

import pytest

from sse_proxy.core import ErrorEvent, InvalidJson, ReplacementChar, ToolCallInvalid, Truncated
from tests.support.cuts import every_cut, names, openai_stream, run


def sse(*frames: tuple[str | None, Any], nl: str = "\n") -> bytes:
    out = []
    for event, payload in frames:
        data = payload if isinstance(payload, str) else json.dumps(payload, ensure_ascii=False)
        head = f"event: {event}{nl}" if event else ""
        out.append(f"{head}data: {data}{nl}{nl}")
    return "".join(out).encode()


def chat(delta: dict[str, Any], index: int = 0, finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-9",
        "object": "chat.completion.chunk",
        "model": "gpt-x",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish}],
    }


OPENAI_FULL = sse(
    (None, chat({"role": "assistant", "content": ""})),
    (None, chat({"reasoning_content": "Think"})),
    (None, chat({"reasoning_content": "ing…"})),
    (None, chat({"content": "Hé"})),
    (None, chat({"content": "llo"}, index=1)),
    (None, chat({"content": " 🙂"})),
    (
        None,
        chat(
            {
                "tool_calls": [
                    {
                        "index": 0,
                        "id": "call_1",
                        "type": "function",
                        "function": {"name": "get_weather", "arguments": ""},
                    }
                ]
            }
        ),
    ),
    (None, chat({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": "Pa'}}]})),
    (None, chat({"tool_calls": [{"index": 0, "function": {"arguments": 'ris"}'}}]})),
    (None, chat({"content": " world"}, index=1)),
    (None, chat({}, finish="tool_calls")),
    (None, {"id": "x", "object": "chat.completion.chunk", "choices": [], "usage": {"total": 3}}),
    (None, "[DONE]"),
)


def test_openai_chat_accumulates_every_choice_reasoning_and_tool_calls() -> None:
    res = run([OPENAI_FULL])
    assert res.dialect == "openai"
    assert res.text == "Hé 🙂"
    assert res.alerts == ()
    from sse_proxy.core import StreamReassembler

    r = StreamReassembler()
    r.feed(OPENAI_FULL)
    r.close()
    choices = r.details()["choices"]
    assert [c["content"] for c in choices] == ["Hé 🙂", "llo world"]
    assert choices[0]["reasoning_content"] == "Thinking…"
    assert choices[0]["tool_calls"] == [
        {"index": 0, "id": "call_1", "name": "get_weather", "arguments": '{"city": "Paris"}'}
    ]
    assert choices[0]["finish_reason"] == "tool_calls"


def test_openai_chat_same_result_at_every_cut() -> None:
    whole = run([OPENAI_FULL])
    for cut, pieces in every_cut(OPENAI_FULL):
        res = run(pieces)
        assert (res.text, res.alerts) == (whole.text, whole.alerts), f"split at byte {cut}"


def test_incomplete_tool_call_arguments_are_reported_at_the_end_only() -> None:
    data = sse(
        (None, chat({"tool_calls": [{"index": 0, "id": "c", "function": {"name": "f"}}]})),
        (None, chat({"tool_calls": [{"index": 0, "function": {"arguments": '{"a": '}}]})),
        (None, "[DONE]"),
    )
    res = run([data])
    (alert,) = res.alerts
    assert isinstance(alert, ToolCallInvalid)
    assert (alert.index, alert.tool, alert.reason) == (0, "f", "invalid_json")
    assert "{" not in alert.error, "the arguments' text is never in the alert"


def test_json_payload_over_several_data_lines_is_one_payload() -> None:
    data = b'data: {"choices":[{"index":0,\ndata: "delta":{"content":"hi"}}]}\n\ndata: [DONE]\n\n'
    res = run([data])
    assert res.text == "hi"
    assert res.alerts == ()


RESPONSES = sse(
    ("response.created", {"type": "response.created", "response": {"status": "in_progress"}}),
    (
        "response.output_item.added",
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"type": "message", "id": "msg_1"},
        },
    ),
    (
        "response.output_text.delta",
        {
            "type": "response.output_text.delta",
            "output_index": 0,
            "content_index": 0,
            "delta": "Bon",
        },
    ),
    (
        "response.output_text.delta",
        {
            "type": "response.output_text.delta",
            "output_index": 0,
            "content_index": 0,
            "delta": "jour 日本",
        },
    ),
    (
        "response.output_item.added",
        {
            "type": "response.output_item.added",
            "output_index": 1,
            "item": {"type": "function_call", "id": "fc_1", "call_id": "call_7", "name": "lookup"},
        },
    ),
    (
        "response.function_call_arguments.delta",
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": '{"q":'},
    ),
    (
        "response.function_call_arguments.delta",
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": '"x"}'},
    ),
    ("response.completed", {"type": "response.completed", "response": {"status": "completed"}}),
)


def test_openai_responses_text_and_function_call_arguments() -> None:
    res = run([RESPONSES])
    assert res.dialect == "responses"
    assert res.text == "Bonjour 日本"
    assert res.alerts == ()
    from sse_proxy.core import StreamReassembler

    r = StreamReassembler()
    r.feed(RESPONSES)
    r.close()
    assert r.details()["function_calls"] == [
        {"item": "fc_1", "call_id": "call_7", "name": "lookup", "arguments": '{"q":"x"}'}
    ]


def test_openai_responses_without_completed_is_truncated() -> None:
    cut = RESPONSES[: RESPONSES.index(b"event: response.completed")]
    res = run([cut])
    assert names(res.alerts) == ["sse.truncated"]


ANTHROPIC = sse(
    ("message_start", {"type": "message_start", "message": {"id": "msg_1", "content": []}}),
    (
        "content_block_start",
        {
            "type": "content_block_start",
            "index": 0,
            "content_block": {"type": "thinking", "thinking": ""},
        },
    ),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "thinking_delta", "thinking": "hm"},
        },
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 0}),
    (
        "content_block_start",
        {"type": "content_block_start", "index": 1, "content_block": {"type": "text", "text": ""}},
    ),
    ("ping", {"type": "ping"}),
    (
        "content_block_delta",
        {"type": "content_block_delta", "index": 1, "delta": {"type": "text_delta", "text": "Ça"}},
    ),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 1,
            "delta": {"type": "text_delta", "text": " va 👍🏽"},
        },
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 1}),
    (
        "content_block_start",
        {
            "type": "content_block_start",
            "index": 2,
            "content_block": {"type": "tool_use", "id": "toolu_1", "name": "calc", "input": {}},
        },
    ),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": '{"x"'},
        },
    ),
    (
        "content_block_delta",
        {
            "type": "content_block_delta",
            "index": 2,
            "delta": {"type": "input_json_delta", "partial_json": ": 1}"},
        },
    ),
    ("content_block_stop", {"type": "content_block_stop", "index": 2}),
    ("message_delta", {"type": "message_delta", "delta": {"stop_reason": "tool_use"}}),
    ("message_stop", {"type": "message_stop"}),
)


def test_anthropic_text_thinking_and_tool_input_per_block() -> None:
    res = run([ANTHROPIC])
    assert res.dialect == "anthropic"
    assert res.text == "Ça va 👍🏽"
    assert res.alerts == ()
    from sse_proxy.core import StreamReassembler

    r = StreamReassembler()
    r.feed(ANTHROPIC.replace(b"\n", b"\r\n"))
    r.close()
    blocks = r.details()["blocks"]
    assert blocks[0]["thinking"] == "hm"
    assert blocks[2]["tool"] == {"id": "toolu_1", "name": "calc", "input_json": '{"x": 1}'}
    assert r.details()["stop_reason"] == "tool_use"


def test_anthropic_error_event_is_reported_and_ends_the_stream() -> None:
    data = ANTHROPIC[: ANTHROPIC.index(b"event: content_block_stop")] + sse(
        ("error", {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}})
    )
    res = run([data])
    assert names(res.alerts) == ["sse.error_event"]
    assert isinstance(res.alerts[0], ErrorEvent)
    assert res.alerts[0].error_type == "overloaded_error"


def test_anthropic_without_message_stop_is_truncated() -> None:
    data = ANTHROPIC[: ANTHROPIC.index(b"event: message_stop")]
    res = run([data])
    assert names(res.alerts) == ["sse.truncated"]
    assert res.alerts[0].dialect == "anthropic"  # type: ignore[attr-defined]


def test_dialect_can_be_forced() -> None:
    data = b'data: {"x": 1}\n\n'
    assert run([data], "text").text == '{"x": 1}'
    assert run([data]).dialect == "unknown"


def test_path_hint_decides_when_detection_cannot() -> None:
    from sse_proxy.core import StreamReassembler

    r = StreamReassembler(hint="openai")
    r.feed(b"data: {oops\n\n")
    out = r.close()
    assert r.dialect == "openai"
    assert names(out.alerts) == ["sse.truncated"]


def test_a_first_event_of_spaces_only_is_text_not_invalid_json() -> None:
    """A raw stream resumed after a word starts with a delta of spaces: text, no alert."""
    res = run([b"id: 12\ndata:   \n\nid: 13\ndata: En\n\n"])
    assert res.dialect == "text"
    assert res.text == "  En"
    assert names(res.alerts) == []


# -- every alert kind, triggered and not triggered ------------------------------------------


def test_replacement_char_invalid_utf8_has_exact_offset_and_event_index() -> None:
    data = b"data: ok\n\ndata: a\xffb\xe6\x97\n\n"
    res = run([data], "text")
    alerts = [a for a in res.alerts if isinstance(a, ReplacementChar)]
    assert [(a.cause, a.byte_offset, a.event_index) for a in alerts] == [
        ("invalid_utf8", 17, 1),
        ("invalid_utf8", 19, 1),
    ]
    for cut, pieces in every_cut(data):
        assert run(pieces, "text").alerts == res.alerts, f"split at byte {cut}"


def test_replacement_char_upstream_literal_raw_bytes() -> None:
    data = "data: x\ufffdy\n\n".encode()
    (alert,) = run([data], "text").alerts
    assert isinstance(alert, ReplacementChar)
    assert (alert.cause, alert.byte_offset) == ("upstream_literal", 7)


def test_replacement_char_upstream_literal_json_escape() -> None:
    data = b'data: {"choices":[{"index":0,"delta":{"content":"a\\ufffdb"}}]}\n\ndata: [DONE]\n\n'
    res = run([data])
    assert res.text == "a\ufffdb"
    (alert,) = res.alerts
    assert isinstance(alert, ReplacementChar)
    assert alert.cause == "upstream_literal"
    assert data[alert.byte_offset : alert.byte_offset + 6] == b"\\ufffd"


def test_no_replacement_alert_for_clean_multibyte_text_cut_everywhere() -> None:
    data = openai_stream(["é", "日", "🙂"])
    for cut, pieces in every_cut(data):
        assert run(pieces).alerts == (), f"split at byte {cut}"


def test_invalid_json_fires_for_broken_payload_but_not_for_done_or_dataless_blocks() -> None:
    data = (
        openai_stream(["a"], done=False) + b"data: {nope\n\nevent: ping\n\n: c\n\ndata: [DONE]\n\n"
    )
    res = run([data])
    assert names(res.alerts) == ["sse.invalid_json"]
    assert isinstance(res.alerts[0], InvalidJson)
    assert res.alerts[0].event_index == 1
    assert run([openai_stream(["a"])]).alerts == ()


def test_truncated_fires_without_done_and_not_with_it() -> None:
    assert names(run([openai_stream(["a"], done=False)]).alerts) == ["sse.truncated"]
    assert run([openai_stream(["a"])]).alerts == ()


def test_truncated_fires_when_upstream_closes_mid_stream_even_for_raw_text() -> None:
    from sse_proxy.core import StreamReassembler

    r = StreamReassembler()
    r.feed(b"data: hello\n\n")
    out = r.close(upstream_error=True)
    (alert,) = out.alerts
    assert isinstance(alert, Truncated)
    assert alert.reason == "upstream_closed"


def test_raw_text_has_no_terminal_marker_so_a_clean_end_is_not_truncated() -> None:
    assert run([b"data: hello\n\n"]).alerts == ()


def test_every_alert_kind_has_its_contract_name_and_level() -> None:
    from sse_proxy.core import (
        CrlfFraming,
        OversizedFrame,
        UnterminatedFrame,
    )

    expected = {
        ReplacementChar: ("sse.replacement_char", "warning"),
        UnterminatedFrame: ("sse.unterminated_frame", "warning"),
        InvalidJson: ("sse.invalid_json", "warning"),
        Truncated: ("sse.truncated", "warning"),
        OversizedFrame: ("sse.oversized_frame", "warning"),
        ToolCallInvalid: ("sse.tool_call_invalid", "warning"),
    }
    for cls, (name, level) in expected.items():
        assert cls.name == name  # type: ignore[attr-defined]
        assert cls.level.fget(None) == level  # type: ignore[attr-defined]
    assert CrlfFraming(counts={}, mixed=False).level == "info"
    assert CrlfFraming(counts={}, mixed=True).level == "warning"


@pytest.mark.parametrize("payload", ["[1, 2]", "42", '"str"', "null", '{"choices": "x"}'])
def test_odd_but_valid_json_never_raises(payload: str) -> None:
    data = openai_stream(["a"], done=False) + f"data: {payload}\n\ndata: [DONE]\n\n".encode()
    assert run([data]).text == "a"


def test_numbers_beyond_a_double_are_valid_json_on_every_path() -> None:
    """JSON numbers have no size limit: a huge one is no invalid_json, whole or cut.

    (Found by the fuzzer: orjson refuses them per event while the batch path skips them.)
    """
    huge = "1" + "9" * 400
    frames = [
        json.dumps(chat({"content": t}))[:-1] + f',"created":{huge}}}' for t in ("a", "b", "c")
    ]
    data = "".join(f"data: {f}\n\n" for f in frames).encode() + b"data: [DONE]\n\n"
    whole = run([data])
    assert whole.text == "abc"
    assert whole.alerts == ()
    for cut, pieces in every_cut(data):
        res = run(pieces)
        assert (res.text, res.alerts) == ("abc", ()), f"split at byte {cut}"


def test_nan_and_infinity_stay_invalid_json() -> None:
    data = b'data: {"choices": [], "x": NaN}\n\ndata: [DONE]\n\n'
    assert names(run([data]).alerts) == ["sse.invalid_json"]


def test_abandoned_stream_gets_no_end_of_stream_verdicts() -> None:
    """close(abandoned=True): nobody let it finish, so no truncation or unterminated frame."""
    from sse_proxy.core import StreamReassembler

    data = openai_stream(["a", "b"], "\r\n", done=False) + b'data: {"choi'
    ended = StreamReassembler()
    ended.feed(data)
    assert names(ended.close().alerts) == [
        "sse.unterminated_frame",
        "sse.truncated",
        "sse.crlf_framing",
    ]
    left = StreamReassembler()
    left.feed(data)
    assert names(left.close(abandoned=True).alerts) == ["sse.crlf_framing"]
    assert left.text == "ab"


def _interaction(status: str) -> dict[str, Any]:
    return {"id": "v1_Chd1", "object": "interaction", "model": "gemini-2.5-flash", "status": status}


# Gemini Interactions as the API reference and the google-genai SDK's types describe it:
# typed events, each with an event_id; text in step.delta (content.delta before).
INTERACTIONS = sse(
    (
        "interaction.created",
        {
            "event_type": "interaction.created",
            "interaction": _interaction("in_progress"),
            "event_id": "e1",
        },
    ),
    (
        "step.start",
        {"event_type": "step.start", "index": 0, "step": {"type": "thought"}, "event_id": "e2"},
    ),
    (
        "step.delta",
        {
            "event_type": "step.delta",
            "index": 0,
            "delta": {"type": "thought_summary", "content": {"text": "hmm"}},
            "event_id": "e3",
        },
    ),
    (
        "step.start",
        {
            "event_type": "step.start",
            "index": 1,
            "step": {"type": "model_output"},
            "event_id": "e4",
        },
    ),
    (
        "step.delta",
        {
            "event_type": "step.delta",
            "index": 1,
            "delta": {"type": "text", "text": "Hé"},
            "event_id": "e5",
        },
    ),
    (
        "step.delta",
        {
            "event_type": "step.delta",
            "index": 1,
            "delta": {"type": "text", "text": "llo 日本 🦊"},
            "event_id": "e6",
        },
    ),
    ("step.stop", {"event_type": "step.stop", "index": 1, "event_id": "e7"}),
    (
        "interaction.completed",
        {
            "event_type": "interaction.completed",
            "interaction": {
                **_interaction("completed"),
                "usage": {"total_input_tokens": 4, "total_output_tokens": 3},
            },
            "event_id": "e8",
        },
    ),
)


def test_gemini_interactions_text_meta_and_last_event_id() -> None:
    from sse_proxy.core import StreamReassembler

    for dialect in (None, "gemini"):
        res = run([INTERACTIONS], dialect)
        assert res.dialect == "gemini"
        assert res.text == "Héllo 日本 🦊"
        assert res.alerts == ()
    r = StreamReassembler(hint="gemini")
    r.feed(INTERACTIONS)
    r.close()
    meta = r.stream_meta()
    assert (meta.response_id, meta.response_model) == ("v1_Chd1", "gemini-2.5-flash")
    assert (meta.input_tokens, meta.output_tokens, meta.finish_reasons) == (4, 3, ["completed"])
    assert r.details()["last_event_id"] == "e8"


def test_gemini_interactions_same_result_at_every_cut() -> None:
    whole = run([INTERACTIONS])
    for cut, pieces in every_cut(INTERACTIONS):
        res = run(pieces)
        assert (res.text, res.alerts) == (whole.text, whole.alerts), cut


def test_gemini_interactions_older_content_delta_and_a_resumed_stream() -> None:
    """A resumed stream starts after the cursor (no interaction.created); the API's earlier
    events named the delta content.delta."""
    resumed = sse(
        (
            "content.delta",
            {
                "event_type": "content.delta",
                "index": 0,
                "delta": {"type": "text", "text": "rest"},
                "event_id": "e9",
            },
        ),
        (
            "interaction.completed",
            {
                "event_type": "interaction.completed",
                "interaction": _interaction("completed"),
                "event_id": "e10",
            },
        ),
    )
    res = run([resumed])
    assert (res.dialect, res.text, res.alerts) == ("gemini", "rest", ())


def test_gemini_interactions_cut_or_failed() -> None:
    cut = INTERACTIONS[: INTERACTIONS.index(b"event: interaction.completed")]
    res = run([cut])
    assert res.text == "Héllo 日本 🦊"
    assert names(res.alerts) == ["sse.truncated"]
    error = sse(
        (
            "error",
            {"event_type": "error", "error": {"code": "UNAVAILABLE", "message": "overloaded"}},
        )
    )
    res = run([cut + error])
    assert names(res.alerts) == ["sse.error_event"]
