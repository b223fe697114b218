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


def drive_observed(spec: ChaosSpec, chunks: list[bytes]) -> list[Write]:
    """The planner as the proxy runs it: each read observed first (frame ends, and the
    dialect its variants ask for), then planned."""
    observer = StreamReassembler()
    planner = ChaosPlanner(spec, dialect=lambda: observer.dialect)
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
                        frags[len(frags)] = [fc["name"], json.dumps(fc["args"])]
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
        got = joined(drive_observed(ChaosSpec((name,), 5), chunked(body, seed, 9)))
        assert got == want, f"read split seed {seed}"


def test_variants_combine_with_rewrites_and_cuts() -> None:
    """``azure+include_usage+crlf+random``: the shapes, then the syntax, then the cuts."""
    body = fixtures.clean_stream("openai", SAMPLE)
    spec = parse_chaos_header("strategy=random+crlf+include_usage+azure; seed=4", default_seed=1)
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
