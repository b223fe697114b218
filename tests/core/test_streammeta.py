"""Stream metadata (model, id, finish reasons, usage): same names for every dialect, any cut."""

from __future__ import annotations

import json
import random

import pytest

from sse_proxy.core import StreamReassembler
from sse_proxy.core.streammeta import META_FIELDS, StreamMeta, meta_of
from sse_proxy.tools import fixtures


def _sse(*frames: tuple[str | None, object]) -> bytes:
    out = []
    for etype, obj in frames:
        data = obj if isinstance(obj, str) else json.dumps(obj)
        out.append((f"event: {etype}\n" if etype else "") + f"data: {data}\n\n")
    return "".join(out).encode()


def _chunk(delta: dict[str, object], finish: str | None = None, idx: int = 0) -> dict[str, object]:
    return {
        "id": "chatcmpl-abc",
        "object": "chat.completion.chunk",
        "model": "gpt-4o-2024-08-06",
        "choices": [{"index": idx, "delta": delta, "finish_reason": finish}],
    }


OPENAI = _sse(
    (None, _chunk({"role": "assistant", "content": ""})),
    (None, _chunk({"content": "Hello"})),
    (None, _chunk({"content": " world"})),
    (None, _chunk({"content": "!"}, idx=1)),
    (None, _chunk({}, "stop")),
    (None, _chunk({}, "length", idx=1)),
    (
        None,
        {
            "id": "chatcmpl-abc",
            "model": "gpt-4o-2024-08-06",
            "choices": [],
            "usage": {
                "prompt_tokens": 30,
                "completion_tokens": 7,
                "prompt_tokens_details": {"cached_tokens": 12},
                "completion_tokens_details": {"reasoning_tokens": 3},
            },
        },
    ),
    (None, "[DONE]"),
)
RESPONSES = _sse(
    (
        "response.created",
        {"type": "response.created", "response": {"id": "resp_1", "model": "o3-mini"}},
    ),
    (
        "response.output_text.delta",
        {
            "type": "response.output_text.delta",
            "output_index": 0,
            "content_index": 0,
            "delta": "Hi",
        },
    ),
    (
        "response.incomplete",
        {
            "type": "response.incomplete",
            "response": {
                "id": "resp_1",
                "model": "o3-mini",
                "status": "incomplete",
                "incomplete_details": {"reason": "max_output_tokens"},
                "usage": {
                    "input_tokens": 5,
                    "input_tokens_details": {"cached_tokens": 0},
                    "output_tokens": 9,
                    "output_tokens_details": {"reasoning_tokens": 8},
                },
            },
        },
    ),
)
ANTHROPIC = _sse(
    (
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": "msg_1",
                "model": "claude-sonnet-4",
                "usage": {"input_tokens": 40, "cache_read_input_tokens": 32, "output_tokens": 1},
            },
        },
    ),
    (
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    ),
    (
        "content_block_delta",
        {"type": "content_block_delta", "index": 0, "delta": {"type": "text_delta", "text": "Hi"}},
    ),
    (
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "max_tokens"},
            "usage": {"output_tokens": 17},
        },
    ),
    ("message_stop", {"type": "message_stop"}),
)


def _gemini(
    parts: list[dict[str, object]], usage: dict[str, int], finish: str | None = None, idx: int = 0
) -> dict[str, object]:
    cand: dict[str, object] = {"content": {"parts": parts, "role": "model"}, "index": idx}
    if finish is not None:
        cand["finishReason"] = finish
    return {
        "candidates": [cand],
        "usageMetadata": usage,
        "modelVersion": "gemini-2.5-flash",
        "responseId": "gR7x-abc",
    }


# Gemini 2.5 with thinking and a cached prompt, two candidates: usage in every chunk, the
# last one complete and final.
GEMINI = _sse(
    (None, _gemini([{"text": "Plan: greet.", "thought": True}], {"promptTokenCount": 40})),
    (None, _gemini([{"text": "Hello"}], {"promptTokenCount": 40, "candidatesTokenCount": 1})),
    (None, _gemini([{"text": "Hi"}], {"promptTokenCount": 40, "candidatesTokenCount": 2}, idx=1)),
    (
        None,
        _gemini([{"text": " world"}], {"promptTokenCount": 40, "candidatesTokenCount": 9}, "STOP"),
    ),
    (
        None,
        _gemini(
            [],
            {
                "promptTokenCount": 40,
                "candidatesTokenCount": 17,
                "cachedContentTokenCount": 32,
                "thoughtsTokenCount": 25,
                "totalTokenCount": 82,
            },
            "MAX_TOKENS",
            idx=1,
        ),
    ),
)

EXPECTED = {
    "openai": (
        OPENAI,
        StreamMeta("gpt-4o-2024-08-06", "chatcmpl-abc", ["stop", "length"], 30, 7, 12, 3),
    ),
    "responses": (
        RESPONSES,
        StreamMeta("o3-mini", "resp_1", ["max_output_tokens"], 5, 9, 0, 8),
    ),
    "anthropic": (
        ANTHROPIC,
        StreamMeta("claude-sonnet-4", "msg_1", ["max_tokens"], 40, 17, 32, None),
    ),
    "gemini": (
        GEMINI,
        StreamMeta("gemini-2.5-flash", "gR7x-abc", ["STOP", "MAX_TOKENS"], 40, 17, 32, 25),
    ),
}


def _run(data: bytes, reads: list[bytes], *, keep_text: bool) -> StreamMeta:
    r = StreamReassembler(emit_events=False, frame_ends=False, keep_text=keep_text)
    for piece in reads:
        r.feed(piece)
    r.close()
    return meta_of(r)


@pytest.mark.parametrize("dialect", sorted(EXPECTED))
def test_meta_is_the_same_at_every_cut(dialect: str) -> None:
    """Every two-way cut and seeded random splits give the same metadata."""
    data, expected = EXPECTED[dialect]
    for cut in range(len(data) + 1):
        got = _run(data, [data[:cut], data[cut:]], keep_text=False)
        assert got == expected, f"{dialect} cut at {cut}"
    for seed in range(50):
        rng = random.Random(seed)
        reads = fixtures.split_reads(data, seed, max_size=rng.choice((3, 40, 500)))
        assert _run(data, reads, keep_text=True) == expected, f"{dialect} seed {seed}"


@pytest.mark.parametrize("dialect", ["openai", "responses", "anthropic", "gemini"])
def test_fixture_streams_report_their_model(dialect: str) -> None:
    """The mock's own streams (batch path included for OpenAI) report model and id."""
    data = fixtures.clean_stream(dialect)
    meta = _run(data, fixtures.split_reads(data, 7, max_size=4096), keep_text=False)
    assert meta.response_model is not None
    assert meta.response_model in data.decode()
    assert meta.response_id is not None
    assert meta.response_id in data.decode()


def test_same_field_names_everywhere() -> None:
    """Raw text has no metadata, but the same names, all unknown."""
    data = fixtures.clean_stream("text")
    fields = _run(data, [data], keep_text=False).fields()
    assert tuple(fields) == META_FIELDS
    assert fields == dict.fromkeys(META_FIELDS) | {"finish_reasons": []}


def test_hostile_metadata_is_bounded() -> None:
    """A huge or non-string model is cut or ignored, never logged whole."""
    data = _sse(
        (
            None,
            {"model": "m" * 10_000, "id": 5, "choices": [{"index": 0, "delta": {"content": "x"}}]},
        ),
        (None, {"choices": [], "usage": {"prompt_tokens": -1, "completion_tokens": "7"}}),
        (None, "[DONE]"),
    )
    meta = _run(data, [data], keep_text=False)
    assert meta.response_model == "m" * 200
    assert meta.response_id is None
    assert meta.input_tokens is None
    assert meta.output_tokens is None


def test_gemini_helper_fills_the_same_fields() -> None:
    """The helper a gemini dialect calls maps Gemini's names onto the shared fields."""
    from sse_proxy.core.streammeta import gemini_usage

    meta = StreamMeta()
    gemini_usage(meta, {"modelVersion": "gemini-2.5-flash", "responseId": "r1"})
    gemini_usage(
        meta,
        {
            "modelVersion": "ignored-later",
            "usageMetadata": {
                "promptTokenCount": 9,
                "candidatesTokenCount": 4,
                "cachedContentTokenCount": 2,
                "thoughtsTokenCount": 30,
            },
        },
    )
    gemini_usage(meta, "not an object")
    assert meta == StreamMeta("gemini-2.5-flash", "r1", [], 9, 4, 2, 30)
