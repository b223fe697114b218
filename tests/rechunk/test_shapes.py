"""Shape and token variants as pure transforms: valid streams, the same message, each about
one chunk; the chaos planner gives the same bytes whatever the reads, and combines them.

The message is read back with the test suite's oracle (tests/support/oracle.py) and a few
lines of plain JSON here, never with the core: the variants are checked against the core in
tests/core/test_variants.py.
"""

from __future__ import annotations

import json
import random
import unicodedata
from typing import Any

import pytest

from sse_proxy.core import StreamReassembler
from sse_proxy.errors import ChaosSpecError
from sse_proxy.rechunk.planner import ChaosPlanner, Write
from sse_proxy.rechunk.shapes.rewriter import (
    SHAPE_STAGES,
    TOKEN_STAGES,
    VARIANT_DIALECTS,
    ShapeRewriter,
    apply_variants,
    split_frames,
)
from sse_proxy.rechunk.shapes.tokens import _graphemes
from sse_proxy.rechunk.spec import (
    SHAPE_VARIANTS,
    TOKEN_VARIANTS,
    VARIANTS,
    ChaosSpec,
    parse_chaos_header,
    parse_strategy_names,
)
from sse_proxy.tools import fixtures
from sse_proxy.tools.fixtures.content import TOOL_CALLS
from sse_proxy.tools.fixtures.streams import DELTA_DIALECTS, TOOL_DIALECTS, tool_stream
from sse_proxy.tools.fixtures.variants import VARIANTS as PROVENANCE
from tests.rechunk.test_planner import chunked, joined
from tests.support.oracle import parse, reference


def _applies(name: str) -> list[tuple[str, bool]]:
    """(dialect, tool fixture?) pairs a variant changes something in."""
    dialect = VARIANT_DIALECTS[name]
    dialects = [dialect] if dialect else list(DELTA_DIALECTS)
    tools = PROVENANCE[name].tools
    out = []
    for d in dialects:
        if not tools:
            out.append((d, False))
        if d in TOOL_DIALECTS:
            out.append((d, True))
    return out


CASES = [(n, d, t) for n in VARIANTS for d, t in _applies(n)]
IDS = [f"{n}-{d}{'-tools' if t else ''}" for n, d, t in CASES]
SAMPLE = (*fixtures.SHORT_TOKENS, " Zoe\u0308", ",", " 👩\u200d💻", " 🇨🇭", " 👋🏿", ".")
"""A short answer with every kind of delta the variants re-cut (clusters included)."""
SAMPLE_TEXT = "".join(SAMPLE)


def _body(dialect: str, tools: bool, tokens: tuple[str, ...] = SAMPLE) -> bytes:
    return tool_stream(dialect, tokens) if tools else fixtures.clean_stream(dialect, tokens)


def drive_observed(
    spec: ChaosSpec, chunks: list[bytes], request: dict[str, Any] | None = None
) -> list[Write]:
    """The planner as the proxy runs it: each read observed first (frame ends, and the
    dialect its variants ask for), then planned."""
    observer = StreamReassembler()
    planner = ChaosPlanner(spec, dialect=lambda: observer.dialect, request=request)
    writes: list[Write] = []
    for chunk in chunks:
        writes += planner.plan(chunk, observer.feed(chunk).frame_ends)
    observer.close()
    return writes + planner.flush()


def _calls(dialect: str, stream: bytes) -> list[tuple[str, Any]]:
    """The tool calls of a stream, read with plain JSON (names and parsed arguments)."""
    frags: dict[Any, list[Any]] = {}
    for ev in parse(stream).events:
        if dialect == "text" or not ev.data.startswith("{"):
            continue
        obj = json.loads(ev.data)
        if dialect == "openai":
            for choice in obj.get("choices") or []:
                if choice.get("index", 0) != 0:
                    continue
                for tc in (choice.get("delta") or {}).get("tool_calls") or []:
                    call = frags.setdefault(tc["index"], [None, ""])
                    fn = tc.get("function") or {}
                    call[0] = fn.get("name") or call[0]
                    call[1] += fn.get("arguments") or ""
        elif dialect == "anthropic":
            block = obj.get("content_block") or {}
            if block.get("type") == "tool_use":
                frags[obj["index"]] = [block["name"], ""]
            delta = obj.get("delta") or {}
            if delta.get("type") == "input_json_delta" and obj["index"] in frags:
                frags[obj["index"]][1] += delta["partial_json"]
        elif dialect == "responses":
            item = obj.get("item") or {}
            if obj.get("type") == "response.output_item.added" and item["type"] == "function_call":
                frags[item["id"]] = [item["name"], ""]
            if obj.get("type") == "response.function_call_arguments.delta":
                frags[obj["item_id"]][1] += obj["delta"]
        elif dialect == "gemini":
            for cand in obj.get("candidates") or []:
                for part in (cand.get("content") or {}).get("parts") or []:
                    if "functionCall" in part:
                        fc = part["functionCall"]
                        frags[len(frags)] = [fc["name"], json.dumps(fc.get("args", {}))]
    return [(n, json.loads(a)) for n, a in frags.values()]


def test_every_variant_has_a_stage_and_its_provenance_in_order() -> None:
    assert tuple(SHAPE_STAGES) == SHAPE_VARIANTS
    assert tuple(TOKEN_STAGES) == TOKEN_VARIANTS
    assert tuple(PROVENANCE) == VARIANTS
    for name, variant in PROVENANCE.items():
        assert variant.sources, name
        assert variant.severity in ("real", "spec"), name
        for source in variant.sources:
            assert source.startswith("https://") or "/" in source.split("#")[0], source


@pytest.mark.parametrize(("name", "dialect", "tools"), CASES, ids=IDS)
def test_each_variant_is_a_valid_stream_with_the_same_message(
    name: str, dialect: str, tools: bool
) -> None:
    body = _body(dialect, tools)
    out = apply_variants([name], body, dialect, seed=3)
    data = b"".join(frame for frame, _ in out)
    assert data != body, "the variant changed nothing"
    assert [k for _, k in out if k] == [name], "exactly one chunk is the variant's"
    ref = reference(data, dialect)
    assert ref.text == SAMPLE_TEXT
    assert not [a for a in ref.alerts if a[0] != "crlf_framing"], ref.alerts
    if tools:
        expected = [(n, json.loads(a)) for n, a in TOOL_CALLS]
        assert _calls(dialect, data) == expected
    assert apply_variants([name], body, dialect, seed=3) == out, "the same seed, the same bytes"


@pytest.mark.parametrize("dialect", fixtures.DIALECTS)
def test_a_variant_of_another_dialect_changes_nothing(dialect: str) -> None:
    body = fixtures.clean_stream(dialect)
    others = [n for n in SHAPE_VARIANTS if VARIANT_DIALECTS[n] != dialect]
    assert b"".join(f for f, _ in apply_variants(others, body, dialect)) == body


def test_retokenize_depends_on_the_seed_and_keeps_the_text() -> None:
    body = fixtures.clean_stream("anthropic", SAMPLE)
    streams = {
        b"".join(f for f, _ in apply_variants(["retokenize"], body, "anthropic", s)) for s in (1, 2)
    }
    assert len(streams) == 2
    for data in streams:
        assert reference(data, "anthropic").text == SAMPLE_TEXT


def test_graphemes_cuts_inside_every_cluster_of_the_answer() -> None:
    """The fixture's clusters: a combining mark, a ZWJ sequence, a flag, a skin tone."""
    for cluster in ("e\u0308", "👩\u200d💻", "🇨🇭", "👋🏿", "👍🏽"):
        assert cluster in fixtures.MESSAGE
        pieces = _graphemes(cluster)
        assert "".join(pieces) == cluster
        assert len(pieces) > 1, cluster
    assert _graphemes("🇨🇭🇯🇵") == ["🇨", "🇭🇯", "🇵"]  # inside each flag, not between
    assert _graphemes("café") == ["café"]  # a precomposed é is one code point: no cut
    data = b"".join(
        f
        for f, _ in apply_variants(["graphemes"], fixtures.clean_stream("openai", SAMPLE), "openai")
    )
    deltas = [
        d["content"]
        for ev in parse(data).events
        if ev.data.startswith("{")
        for c in json.loads(ev.data)["choices"]
        if (d := c.get("delta") or {}).get("content")
    ]
    starts = [d[0] for d in deltas]
    assert "\u0308" in starts
    assert "\u200d" in starts
    assert "🏿" in starts
    assert "🇭" in starts
    assert any(unicodedata.category(s) == "Mn" for s in starts)


def test_openai_shapes_are_what_the_providers_send() -> None:
    body = fixtures.clean_stream("openai", SAMPLE)

    def chunks(name: str) -> list[Any]:
        data = b"".join(f for f, _ in apply_variants([name], body, "openai"))
        return [json.loads(e.data) if e.data != "[DONE]" else e.data for e in parse(data).events]

    azure = chunks("azure")
    assert azure[0]["choices"] == []
    assert azure[0]["prompt_filter_results"]
    assert (azure[0]["id"], azure[0]["model"]) == ("", "")
    assert all("content_filter_results" in c["choices"][0] for c in azure[1:-1])
    usage = chunks("include_usage")
    assert usage[-2]["choices"] == []
    assert usage[-2]["usage"]["completion_tokens"] > 0
    assert usage[-1] == "[DONE]"
    assert all(c["usage"] is None for c in usage[:-2])
    reasoning = chunks("reasoning_content")
    assert reasoning[1]["choices"][0]["delta"]["content"] is None
    assert reasoning[1]["choices"][0]["delta"]["reasoning_content"]
    assert chunks("role_only")[0]["choices"][0]["delta"] == {"role": "assistant"}
    last = chunks("finish_with_text")[-2]["choices"][0]
    assert last["finish_reason"] == "stop"
    assert last["delta"]["content"]
    assert {c["choices"][0]["index"] for c in chunks("choices_n2")[:-1]} == {0, 1}
    assert all("id" not in c for c in chunks("no_ids")[:-1])
    comments = apply_variants(["openrouter_comments"], body, "openai")[0][0]
    assert comments == b": OPENROUTER PROCESSING\n\n"


def test_anthropic_blocks_are_renumbered_after_inserted_ones() -> None:
    body = fixtures.clean_stream("anthropic", SAMPLE)
    for names in (["thinking"], ["server_tool"], ["thinking", "text_blocks", "citations"]):
        data = b"".join(f for f, _ in apply_variants(names, body, "anthropic"))
        starts = [
            json.loads(e.data)["index"]
            for e in parse(data).events
            if e.type == "content_block_start"
        ]
        assert starts == list(range(len(starts))), (names, starts)
        assert reference(data, "anthropic").text == SAMPLE_TEXT


def test_responses_sequence_numbers_and_output_indices_stay_consistent() -> None:
    body = fixtures.clean_stream("responses", SAMPLE)
    names = ["reasoning_summary", "output_items", "annotations", "in_progress_repeated", "chars"]
    data = b"".join(f for f, _ in apply_variants(names, body, "responses"))
    events = [json.loads(e.data) for e in parse(data).events]
    assert [e["sequence_number"] for e in events] == list(range(len(events)))
    added = [e["output_index"] for e in events if e["type"] == "response.output_item.added"]
    assert added == [0, 1, 2]
    final = events[-1]["response"]["output"]
    assert [o["type"] for o in final] == ["web_search_call", "reasoning", "message"]
    assert reference(data, "responses").text == SAMPLE_TEXT


def test_gemini_finish_alone_and_parts_without_text() -> None:
    body = fixtures.clean_stream("gemini", SAMPLE)
    data = b"".join(f for f, _ in apply_variants(["finish_alone", "no_text_part"], body, "gemini"))
    objs = [json.loads(e.data) for e in parse(data).events]
    assert "content" not in objs[-1]["candidates"][0]
    assert objs[-1]["candidates"][0]["finishReason"] == "STOP"
    assert any(
        p == {"thoughtSignature": p.get("thoughtSignature")}
        for o in objs
        for p in (o["candidates"][0].get("content") or {}).get("parts") or []
    )


@pytest.mark.parametrize(("name", "dialect", "tools"), CASES, ids=IDS)
def test_the_planner_gives_the_same_bytes_whatever_the_reads(
    name: str, dialect: str, tools: bool
) -> None:
    """What the test-client shows as the chunk is what the client got: the proxy's planner
    turns any read split of the upstream into exactly the bytes of :func:`apply_variants`."""
    body = _body(dialect, tools)
    want = b"".join(f for f, _ in apply_variants([name], body, dialect, seed=5))
    for seed in (1, 2):
        got = joined(drive_observed(ChaosSpec((name,), 5, force=True), chunked(body, seed, 9)))
        assert got == want, f"read split seed {seed}"


def test_variants_combine_with_rewrites_and_cuts() -> None:
    """``azure+include_usage+crlf+random``: the shapes, then the syntax, then the cuts."""
    body = fixtures.clean_stream("openai", SAMPLE)
    spec = parse_chaos_header(
        "strategy=random+crlf+include_usage+azure; seed=4; force=1", default_seed=1
    )
    assert spec.variants == ("azure", "include_usage")
    assert spec.rewrites == ("crlf",)
    assert not spec.rechunk_only
    writes = drive_observed(spec, chunked(body, 3, 5))
    data = joined(writes)
    assert len(writes) > 10
    ref = reference(data, "openai")
    assert ref.text == SAMPLE_TEXT
    assert ref.line_endings["crlf"]
    assert not ref.line_endings["lf"]
    objs = [json.loads(e.data) for e in parse(data).events if e.data != "[DONE]"]
    assert objs[0]["prompt_filter_results"]
    assert objs[-1]["choices"] == []


def test_a_bom_stays_in_front_when_a_variant_inserts_a_first_chunk() -> None:
    body = b"\xef\xbb\xbf" + fixtures.clean_stream("openai", fixtures.SHORT_TOKENS)
    rewriter = ShapeRewriter(["azure"], 1, dialect="openai")
    out = b"".join(rewriter.rewrite(f) for f in [body[: body.index(b"\n\n") + 2]])
    assert out.startswith(b'\xef\xbb\xbfdata: {"choices":[]')


def test_names_parse_like_the_rewrites_and_unknown_ones_get_a_suggestion() -> None:
    assert parse_strategy_names("Azure, thinking+CHARS") == ("azure", "thinking", "chars")
    assert ChaosSpec.from_options("chars+random", 1).rechunkers == ("random",)
    with pytest.raises(ChaosSpecError, match="did you mean 'include_usage'") as info:
        parse_strategy_names("include_usge")
    assert len(str(info.value)) < 300
    with pytest.raises(ChaosSpecError, match="unknown variant"):
        ShapeRewriter(["nope"], 1)


def test_an_unknown_stream_passes_unchanged() -> None:
    """Not an LLM dialect: the variants leave every byte alone (no false rewrite)."""
    rng = random.Random(3)
    body = b"".join(b"event: tick\ndata: %d\n\n" % rng.randrange(100) for _ in range(20))
    out = b"".join(f for f, _ in apply_variants(["azure", "thinking", "thoughts"], body, "text"))
    assert out == body
    unknown = ShapeRewriter(["azure", "chars"], 1, dialect=lambda: "unknown")
    assert b"".join(unknown.rewrite(f) for f in split_frames(body)) + unknown.flush() == body


CONDITIONAL = {
    "include_usage": "stream_options.include_usage: true",
    "choices_n2": "n > 1",
    "tool_args_whole": "tools",
    "tool_args_chars": "tools",
    "tool_interleaved": "tools",
    "tool_args_with_id": "tools",
    "thinking": "thinking (thinking.type: enabled)",
    "citations": "citations (a document with citations.enabled: true)",
    "server_tool": "a web_search tool",
    "empty_partial_json": "tools",
    "reasoning_summary": "reasoning.summary",
    "output_items": "a web_search or file_search tool",
    "annotations": "a web_search or file_search tool",
    "thoughts": "generationConfig.thinkingConfig.includeThoughts: true",
    "function_calls_one_chunk": "tools",
    "late_item_done": "tools",
    "function_call_no_args": "tools",
    "signature_apart": "tools",
}
"""The variants providers send only when the request asks, and what it must ask for."""

ASKING: dict[str, dict[str, Any]] = {
    "include_usage": {"stream_options": {"include_usage": True}},
    "choices_n2": {"n": 2},
    "thinking": {"thinking": {"type": "enabled", "budget_tokens": 1024}},
    "citations": {
        "messages": [
            {
                "role": "user",
                "content": [
                    {
                        "type": "document",
                        "source": {"type": "text", "media_type": "text/plain", "data": "x"},
                        "citations": {"enabled": True},
                    }
                ],
            }
        ]
    },
    "server_tool": {"tools": [{"type": "web_search_20250305", "name": "web_search"}]},
    "reasoning_summary": {"reasoning": {"effort": "low", "summary": "auto"}},
    "output_items": {"tools": [{"type": "web_search_preview"}]},
    "annotations": {"tools": [{"type": "file_search", "vector_store_ids": ["vs_1"]}]},
    "thoughts": {"generationConfig": {"thinkingConfig": {"includeThoughts": True}}},
}
"""A request that asks for each (the tool-call ones: the fixture's own tool request)."""


def _asking(name: str, dialect: str) -> dict[str, Any]:
    from sse_proxy.tools.fixtures.tools import tool_request_body

    asking: dict[str, Any] = ASKING.get(name) or tool_request_body(dialect)
    return asking


def test_every_variant_declares_what_makes_it_possible() -> None:
    from sse_proxy.rechunk.shapes.rewriter import VARIANT_REQUIRES

    declared = {n: r.what for n, r in VARIANT_REQUIRES.items() if r is not None}
    assert declared == {n: w for n, w in CONDITIONAL.items() if n in VARIANT_REQUIRES}
    for name in ("azure", "openrouter_comments", "vllm_usage", "reasoning_content", "ping"):
        assert VARIANT_REQUIRES[name] is None, name  # sent whatever the request says


@pytest.mark.parametrize(
    ("name", "dialect", "tools"),
    [c for c in CASES if c[0] in CONDITIONAL],
    ids=[i for c, i in zip(CASES, IDS, strict=True) if c[0] in CONDITIONAL],
)
def test_a_conditional_variant_is_served_only_to_a_request_that_asks(
    name: str, dialect: str, tools: bool
) -> None:
    """The stream of a request that does not ask is the upstream's; one that asks gets the
    variant; forced, every request gets it, and the rewriter says which were forced."""
    body = _body(dialect, tools)
    forced = apply_variants([name], body, dialect, seed=3)
    for request in (None, {}, {"model": "m", "stream": True}, {"n": "2", "tools": {}}):
        rewriter = ShapeRewriter([name], 3, dialect=dialect, request=request)
        data = b"".join(rewriter.rewrite(f) for f in split_frames(body)) + rewriter.flush()
        assert data == body, request
        assert rewriter.not_applicable == {name: CONDITIONAL[name]}
        assert rewriter.fields() == {"variants_not_applicable": {name: CONDITIONAL[name]}}
    asking = apply_variants([name], body, dialect, seed=3, request=_asking(name, dialect))
    if name != "choices_n2":  # n: 2 is served by the upstream itself: nothing is added
        assert asking == forced
    rewriter = ShapeRewriter([name], 3, dialect=dialect, request={}, force=True)
    data = b"".join(rewriter.rewrite(f) for f in split_frames(body)) + rewriter.flush()
    assert data == b"".join(f for f, _ in forced)
    assert rewriter.fields() == {"variants_forced": {name: CONDITIONAL[name]}}


def test_a_request_for_two_choices_gets_the_upstreams_own_choice_1() -> None:
    """With ``n: 2`` the upstream interleaves both choices: the variant adds no third."""
    body = fixtures.openai_chat_stream(SAMPLE, choices=2)
    out = b"".join(f for f, _ in apply_variants(["choices_n2"], body, "openai", request={"n": 2}))
    assert out == body


def test_the_planner_asks_for_the_request_when_the_dialect_is_known() -> None:
    asked: list[str] = []

    def request() -> dict[str, Any]:
        asked.append("asked")
        return {"n": 2}

    body = fixtures.clean_stream("openai", SAMPLE)
    spec = ChaosSpec(("choices_n2", "chars"), 1)
    observer = StreamReassembler()
    planner = ChaosPlanner(spec, dialect=lambda: observer.dialect, request=request)
    writes = planner.plan(body, observer.feed(body).frame_ends) + planner.flush()
    assert asked == ["asked"]
    assert planner.shapes is not None
    assert planner.shapes.fields() == {}  # asked for: neither left out nor forced
    assert reference(joined(writes), "openai").text == SAMPLE_TEXT


def test_force_is_a_header_key_and_round_trips() -> None:
    spec = parse_chaos_header("strategy=choices_n2; seed=2; force=yes", default_seed=1)
    assert spec.force is True
    assert spec.header_value() == "strategy=choices_n2; seed=2; force=1"
    assert parse_chaos_header(spec.header_value(), default_seed=None) == spec
    assert parse_chaos_header("choices_n2; force=0", default_seed=1, force=True).force is False
    assert parse_chaos_header("choices_n2", default_seed=1, force=True).force is True
    with pytest.raises(ChaosSpecError, match="chaos force must be 1 or 0"):
        parse_chaos_header("choices_n2; force=maybe", default_seed=1)
