"""The proxy knows the shapes real providers send: every dialect accumulator assembles every
shape and token variant exactly, at every cut of the chunk the variant is about.

The expectations are independent of the core: the message is the fixture's, the finish
reason the dialect's own, the usage what the variant stream carries (read here with plain
JSON), the tool calls the fixture's; and the differential oracle reads the same streams.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from sse_proxy.core import Alert, Level, StreamReassembler, ToolSchemas
from sse_proxy.rechunk.shapes.rewriter import apply_variants
from sse_proxy.tools import fixtures
from sse_proxy.tools.fixtures.content import TOOL_CALLS
from sse_proxy.tools.fixtures.tools import tool_request_body
from tests.rechunk.test_shapes import CASES, IDS, SAMPLE, SAMPLE_TEXT, _body
from tests.support.cuts import run
from tests.support.differential import compare
from tests.support.oracle import parse

FINISH = {"openai": "stop", "responses": "completed", "anthropic": "end_turn", "gemini": "STOP"}
TOOL_FINISH = {**FINISH, "openai": "tool_calls", "anthropic": "tool_use"}
REASONING = {
    "reasoning_content": "Let me think about this for a moment…",
    "reasoning": "Let me think about this for a moment…",
    "thinking": "Let me think about this for a moment…",
    "reasoning_summary": "**Weighing the request**\n\nThe user wants a reply.",
    "thoughts": "**Weighing the request**\n\nThe user wants a reply.",
}


def _variant(name: str, dialect: str, tools: bool) -> tuple[bytes, bytes]:
    """(the variant stream, its key chunk)."""
    out = apply_variants([name], _body(dialect, tools), dialect, seed=2)
    key = next(frame for frame, k in out if k == name)
    return b"".join(f for f, _ in out), key


def _usage(dialect: str, data: bytes) -> tuple[int | None, int | None]:
    """(input, output) tokens as the stream last reported them, read with plain JSON."""
    found: tuple[int | None, int | None] = (None, None)
    for ev in parse(data).events:
        if not ev.data.startswith("{"):
            continue
        obj = json.loads(ev.data)
        if dialect == "openai" and obj.get("usage"):
            found = (obj["usage"]["prompt_tokens"], obj["usage"]["completion_tokens"])
        elif dialect == "anthropic" and obj.get("type") == "message_start":
            usage = obj["message"]["usage"]
            found = (usage["input_tokens"], usage["output_tokens"])
        elif dialect == "anthropic" and obj.get("type") == "message_delta":
            found = (found[0], obj["usage"]["output_tokens"])
        elif dialect == "gemini" and obj.get("usageMetadata"):
            usage = obj["usageMetadata"]
            found = (usage.get("promptTokenCount"), usage.get("candidatesTokenCount"))
    return found


def _head(dialect: str, data: bytes) -> tuple[str | None, str | None]:
    """(model, response id): the first non-empty ones the stream sends, read with JSON."""
    model = rid = None
    for ev in parse(data).events:
        if not ev.data.startswith("{"):
            continue
        obj = json.loads(ev.data)
        src = {
            "openai": obj,
            "anthropic": obj.get("message") or {},
            "responses": obj.get("response") or {},
            "gemini": {"model": obj.get("modelVersion"), "id": obj.get("responseId")},
        }[dialect]
        model = model or src.get("model") or None
        rid = rid or src.get("id") or None
    return model, rid


def _calls(dialect: str, details: dict[str, Any]) -> list[tuple[str, Any]]:
    """The core's assembled tool calls, as (name, parsed arguments)."""
    if dialect == "openai":
        calls = [(c["name"], c["arguments"]) for c in details["choices"][0]["tool_calls"]]
    elif dialect == "anthropic":
        calls = [
            (b["tool"]["name"], b["tool"]["input_json"])
            for b in details["blocks"]
            if b["type"] == "tool_use"
        ]
    elif dialect == "responses":
        calls = [(c["name"], c["arguments"]) for c in details["function_calls"]]
    else:
        fcs = details["candidates"][0]["function_calls"]
        return [(c["name"], {} if c["args"] is None else c["args"]) for c in fcs]  # none: {}
    return [(n, json.loads(a)) for n, a in calls]


@pytest.mark.parametrize(("name", "dialect", "tools"), CASES, ids=IDS)
def test_the_accumulator_assembles_every_variant_exactly(
    name: str, dialect: str, tools: bool
) -> None:
    """Same text, finish reason, usage and tool calls; no alert at all, schemas checked."""
    data, _ = _variant(name, dialect, tools)
    schemas = ToolSchemas.from_request(tool_request_body(dialect)) if tools else None
    r = StreamReassembler(tool_schemas=schemas)  # detected, as the proxy does
    alerts: list[Alert] = []
    for piece in fixtures.split_reads(data, 7):
        alerts += r.feed(piece).alerts
    alerts += r.close().alerts
    assert r.dialect == dialect
    assert r.text == SAMPLE_TEXT
    assert [a for a in alerts if a.level is Level.WARNING] == []
    if dialect == "text":
        return
    meta = r.stream_meta()
    finish = (TOOL_FINISH if tools else FINISH)[dialect]
    assert meta.finish_reasons == [finish] * (2 if name == "choices_n2" else 1)
    assert (meta.input_tokens, meta.output_tokens) == _usage(dialect, data)
    assert (meta.response_model, meta.response_id) == _head(dialect, data)
    if name in REASONING:
        assert r.reasoning[0] == REASONING[name]
    if tools:
        assert _calls(dialect, r.details()) == [(n, json.loads(a)) for n, a in TOOL_CALLS]


@pytest.mark.parametrize(("name", "dialect", "tools"), CASES, ids=IDS)
def test_every_cut_inside_the_variants_chunk_gives_the_same_result(
    name: str, dialect: str, tools: bool
) -> None:
    """The house style at the bytes that matter: every two-way cut inside the chunk the
    variant is about (and its frame's blank line), the same text and the same alerts."""
    data, key = _variant(name, dialect, tools)
    whole = run([data], dialect)
    start = data.index(key)
    failures = []
    for cut in range(max(1, start - 2), min(len(data), start + len(key) + 1)):
        res = run([data[:cut], data[cut:]], dialect)
        if (res.text, res.alerts) != (whole.text, whole.alerts):
            failures.append(cut)
    assert not failures, f"cuts that change the result: {failures[:10]}"


@pytest.mark.parametrize(("name", "dialect", "tools"), CASES, ids=IDS)
def test_the_oracle_reads_every_variant_as_the_core_does(
    name: str, dialect: str, tools: bool
) -> None:
    data, _ = _variant(name, dialect, tools)
    for seed in (1, 2):
        pieces = fixtures.split_reads(data, seed, max_size=97)
        diff = compare(data, pieces, dialect)
        assert diff is None, diff


def test_the_sample_has_every_kind_of_delta() -> None:
    assert SAMPLE_TEXT.startswith(fixtures.SHORT_MESSAGE)
    assert any(t.strip() != t for t in SAMPLE)
