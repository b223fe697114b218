"""The canonical fixtures: text properties, builder output, faults and realistic read splits.

Streams are parsed here with the suite's independent reference parser (:mod:`tests.support.oracle`),
so a bug in the proxy's own framing cannot hide a bug in the fixtures (or the other way round).
"""

from __future__ import annotations

import codecs
import json
import re
from typing import Any

import pytest

from sse_proxy.tools import fixtures
from sse_proxy.tools.fixtures import MESSAGE, SHORT_MESSAGE, SHORT_TOKENS, TOKENS, mcp
from tests.support import oracle


def parse_events(data: bytes) -> list[tuple[str, str]]:
    """(type, data) per dispatched event; a trailing unterminated frame is discarded."""
    return [(e.type, e.data) for e in oracle.parse(data).events]


def _json(data: str) -> Any:
    try:
        return json.loads(data)
    except ValueError:
        return None


def deltas(dialect: str, data: bytes, choice: int = 0) -> list[str]:
    """The text deltas of one stream, in order, read the way each vendor documents."""
    out: list[str] = []
    for etype, payload in parse_events(data):
        if dialect == "text":
            if etype == "message" and payload != "[DONE]":
                out.append(payload)
            continue
        obj = _json(payload)
        if not isinstance(obj, dict):
            continue
        if dialect == "openai":
            for ch in obj.get("choices") or []:
                content = ch["delta"].get("content")
                if ch["index"] == choice and content:
                    out.append(content)
        elif dialect == "gemini":
            for cand in obj.get("candidates") or []:
                for part in cand["content"]["parts"]:
                    if part.get("text") and not part.get("thought"):
                        out.append(part["text"])
        elif dialect == "mcp":  # the result's text items: the answer comes whole in it
            result = obj.get("result")
            if isinstance(result, dict):
                out += [c["text"] for c in result["content"] if c["type"] == "text"]
        elif dialect == "responses" and etype == "response.output_text.delta":
            out.append(obj["delta"])
        elif etype == "content_block_delta" and obj["delta"]["type"] == "text_delta":
            out.append(obj["delta"]["text"])
    return out


def _byte_lengths(text: str) -> set[int]:
    return {len(ch.encode()) for ch in text}


def test_message_sizes() -> None:
    """The long message spans many reads; the short one fits every-cut loops."""
    assert 300 <= len(MESSAGE) <= 600
    assert 40 <= len(SHORT_MESSAGE.encode()) <= 60


@pytest.mark.parametrize("text", [MESSAGE, SHORT_MESSAGE], ids=["long", "short"])
def test_message_has_multibyte_chars(text: str) -> None:
    """Both messages hold 1-, 2-, 3- and 4-byte characters and the quick brown fox."""
    assert _byte_lengths(text) == {1, 2, 3, 4}
    assert "The quick brown" in text


def test_tokens_are_llm_like() -> None:
    """The deltas carry the shapes naive reassembly breaks: spaces, sub-words, split emoji."""
    assert TOKENS[:4] == ("The", " quick", " brown", " fox")
    assert "The quick brown fox" in MESSAGE
    assert any(t.strip() == "" and t for t in TOKENS), "a delta of spaces only"
    assert any(t.endswith(" ") and t.strip() for t in TOKENS), "a delta ending in a space"
    assert tuple(TOKENS[TOKENS.index(" Fran") + i].strip() for i in range(3)) == (
        "Fran",
        "ç",
        "ais",
    )
    thumbs = TOKENS.index(" 👍")
    assert TOKENS[thumbs + 1] == "🏽", "an emoji modifier sequence split across deltas"
    assert any("\n" in t for t in TOKENS)


@pytest.mark.parametrize("newline", fixtures.NEWLINES, ids=["lf", "crlf", "cr"])
@pytest.mark.parametrize("dialect", fixtures.DIALECTS)
def test_builders_carry_every_token(dialect: str, newline: str) -> None:
    """Each dialect's stream decodes strictly and yields every token in order, any newline."""
    data = fixtures.clean_stream(dialect, newline=newline)
    data.decode("utf-8")  # strict: the clean streams are valid UTF-8
    # (MCP's text comes whole, in a few content items: runs of the tokens)
    want = mcp.runs(TOKENS) if dialect == "mcp" else list(TOKENS)
    assert deltas(dialect, data) == want
    other = {"\n", "\r\n", "\r"} - {newline}
    stripped = data.replace(newline.encode(), b"")
    assert not any(nl.encode() in stripped for nl in other), "one line ending throughout"
    assert data.endswith(newline.encode() * 2)
    assert fixtures.expected_text(dialect) == MESSAGE


def test_builders_are_deterministic() -> None:
    """The same call returns the same bytes, so recordings and seeds stay comparable."""
    for dialect in fixtures.DIALECTS:
        assert fixtures.clean_stream(dialect) == fixtures.clean_stream(dialect)
    assert fixtures.openai_chat_stream() == fixtures.clean_stream("openai")
    assert fixtures.openai_responses_stream() == fixtures.clean_stream("responses")
    assert fixtures.anthropic_stream() == fixtures.clean_stream("anthropic")
    assert fixtures.raw_text_stream() == fixtures.clean_stream("text")
    assert fixtures.gemini_stream() == fixtures.clean_stream("gemini")


def test_openai_chunks_match_the_vendor_shape() -> None:
    """Role chunk first, compact unescaped JSON, finish chunk, then the [DONE] sentinel."""
    data = fixtures.openai_chat_stream(SHORT_TOKENS)
    events = parse_events(data)
    first = json.loads(events[0][1])
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"]["role"] == "assistant"
    assert json.loads(events[-2][1])["choices"][0]["finish_reason"] == "stop"
    assert events[-1] == ("message", "[DONE]")
    assert "🦊".encode() in data, "ensure_ascii=False: characters go out as UTF-8"
    assert b'": ' not in data, "compact separators"
    assert b'", "' not in data, "compact separators"
    assert b"[DONE]" not in fixtures.openai_chat_stream(SHORT_TOKENS, include_done=False)


def test_openai_two_choices_interleave() -> None:
    """With choices=2 both indices stream the whole text, interleaved chunk by chunk."""
    data = fixtures.openai_chat_stream(SHORT_TOKENS, choices=2)
    assert deltas("openai", data, choice=0) == list(SHORT_TOKENS)
    assert deltas("openai", data, choice=1) == list(SHORT_TOKENS)
    indices = [json.loads(d)["choices"][0]["index"] for _, d in parse_events(data)[:-1]]
    assert indices[:4] == [0, 1, 0, 1]


def test_openai_reasoning_and_tool_call() -> None:
    """Reasoning deltas precede the content; tool-call fragments rebuild the arguments."""
    args = '{"city": "Zürich", "days": [1, 2]}'
    data = fixtures.openai_chat_stream(
        SHORT_TOKENS, reasoning=("Let me", " think"), tool_call=("get_weather", args)
    )
    reasoning: list[str] = []
    content: list[str] = []
    frags: list[str] = []
    names: list[str] = []
    for _, payload in parse_events(data)[:-1]:
        delta = json.loads(payload)["choices"][0]["delta"]
        if delta.get("reasoning_content"):
            assert not content, "reasoning comes first"
            reasoning.append(delta["reasoning_content"])
        if delta.get("content"):
            content.append(delta["content"])
        for call in delta.get("tool_calls") or []:
            names += [call["function"]["name"]] if "name" in call["function"] else []
            frags.append(call["function"]["arguments"])
    assert "".join(reasoning) == "Let me think"
    assert "".join(content) == SHORT_MESSAGE
    assert names == ["get_weather"]
    assert len(frags) > 3
    assert "".join(frags) == args
    assert json.loads(parse_events(data)[-2][1])["choices"][0]["finish_reason"] == "tool_calls"


def test_responses_stream_shape_and_function_call() -> None:
    """Responses events are typed, sequence-numbered, and end with response.completed."""
    args = '{"q": "日本語"}'
    data = fixtures.openai_responses_stream(SHORT_TOKENS, function_call=("search", args))
    events = parse_events(data)
    objs = [json.loads(d) for _, d in events]
    assert [o["sequence_number"] for o in objs] == list(range(len(objs)))
    assert all(o["type"] == etype for (etype, _), o in zip(events, objs, strict=True))
    kinds = [etype for etype, _ in events]
    for kind in (
        "response.created",
        "response.output_item.added",
        "response.content_part.added",
        "response.output_text.done",
    ):
        assert kind in kinds
    assert kinds[-1] == "response.completed"
    delta = next(o for o in objs if o["type"] == "response.output_text.delta")
    assert {"delta", "item_id", "output_index", "content_index"} <= delta.keys()
    frags = [o["delta"] for o in objs if o["type"] == "response.function_call_arguments.delta"]
    assert "".join(frags) == args
    assert deltas("responses", data) == list(SHORT_TOKENS)


def test_anthropic_stream_shape_tool_use_and_thinking() -> None:
    """Anthropic frames carry event lines, a ping, thinking, text and input_json deltas."""
    data = fixtures.anthropic_stream(SHORT_TOKENS, tool_use=("calc", '{"x": 1}'), thinking="Hm")
    events = parse_events(data)
    kinds = [etype for etype, _ in events]
    assert kinds[0] == "message_start"
    assert kinds[-1] == "message_stop"
    assert "ping" in kinds
    assert "message_delta" in kinds
    assert "content_block_stop" in kinds
    by_type: dict[str, list[str]] = {}
    for etype, payload in events:
        if etype == "content_block_delta":
            d = json.loads(payload)["delta"]
            value = d.get("text", d.get("partial_json", d.get("thinking", "")))
            by_type.setdefault(d["type"], []).append(value)
    assert "".join(by_type["text_delta"]) == SHORT_MESSAGE
    assert "".join(by_type["thinking_delta"]) == "Hm"
    assert json.loads("".join(by_type["input_json_delta"])) == {"x": 1}
    assert b"event: message_start\n" in data


def test_raw_text_keeps_the_space_after_the_colon() -> None:
    """A leading-space token is written with two spaces; newlines become extra data lines."""
    data = fixtures.raw_text_stream(("The", " quick", "a\nb", "\n"), newline="\r\n")
    assert data == (
        b"data: The\r\n\r\ndata:  quick\r\n\r\ndata: a\r\ndata: b\r\n\r\ndata: \r\ndata: \r\n\r\n"
    )
    assert [d for _, d in parse_events(data)] == ["The", " quick", "a\nb", "\n"]
    assert fixtures.raw_text_stream(("x",), include_done=True).endswith(b"data: [DONE]\n\n")


def test_bad_arguments_raise() -> None:
    """Unknown dialects, faults and newlines are refused with ValueError."""
    with pytest.raises(ValueError, match="newline"):
        fixtures.openai_chat_stream(newline="\n\r")
    with pytest.raises(ValueError, match="unknown fault"):
        fixtures.faulty_stream("nope")
    with pytest.raises(ValueError, match="unknown dialect"):
        fixtures.faulty_stream("crlf", "klingon")
    with pytest.raises(ValueError, match="choices"):
        fixtures.openai_chat_stream(choices=0)


def test_fault_tables_agree() -> None:
    """Every fault has a description and the alerts it must trigger."""
    assert set(fixtures.FAULTS) == set(fixtures.FAULT_ALERTS)
    for kind, description in fixtures.FAULTS.items():
        assert description.strip(), kind
        assert fixtures.faulty_stream(kind) != fixtures.clean_stream(), kind


def test_expected_alerts_per_dialect() -> None:
    """The text dialect cannot report a missing terminal marker or broken JSON; others can."""
    assert fixtures.expected_alerts("openai") == ()
    assert fixtures.expected_alerts("anthropic", "truncated") == ("sse.truncated",)
    assert fixtures.expected_alerts("text", "truncated") == ()
    assert fixtures.expected_alerts("text", "invalid_json") == ()
    assert fixtures.expected_alerts("text", "unterminated") == ("sse.unterminated_frame",)


@pytest.mark.parametrize("dialect", fixtures.DIALECTS)
@pytest.mark.parametrize("kind", sorted(fixtures.FAULTS))
def test_faulty_streams_reassemble_to_expected_text(kind: str, dialect: str) -> None:
    """A spec-following reader gets exactly expected_text() from every faulty stream."""
    data = fixtures.faulty_stream(kind, dialect)
    assert data == fixtures.faulty_stream(kind, dialect)
    text = "".join(deltas(dialect, data))
    assert text == fixtures.expected_text(dialect, kind)
    if kind in ("literal_fffd", "invalid_utf8", "json_escape_fffd"):
        assert "\ufffd" in text
    elif dialect == "mcp" and fixtures.KINDS[kind].ending:
        assert text == ""  # the stream lost its response, and the text with it
    elif kind != "invalid_json" or dialect in ("text", "mcp"):
        assert len(text) >= len(MESSAGE) - 2


@pytest.mark.parametrize("dialect", ["openai", "responses", "anthropic"])
def test_fault_bytes_look_as_described(dialect: str) -> None:
    """Each fault's bytes show exactly the defect its name promises, in the JSON dialects."""
    clean = fixtures.clean_stream(dialect)
    fffd = "\ufffd".encode()
    assert fffd not in clean

    literal = fixtures.faulty_stream("literal_fffd", dialect)
    assert fffd in literal
    literal.decode("utf-8")

    broken = fixtures.faulty_stream("invalid_utf8", dialect)
    with pytest.raises(UnicodeDecodeError):
        broken.decode("utf-8")
    assert b"\xff" in broken
    fox = "🦊".encode()
    assert broken.count(fox) == clean.count(fox) - 1, "only the delta is hit, not summaries"

    escaped = fixtures.faulty_stream("json_escape_fffd", dialect)
    assert b"\\ufffd" in escaped
    assert fffd not in escaped

    crlf = fixtures.faulty_stream("crlf", dialect)
    assert crlf == fixtures.clean_stream(dialect, newline="\r\n")

    mixed = fixtures.faulty_stream("mixed_newlines", dialect)
    assert b"\r\n" in mixed
    assert re.search(rb"\r[^\n]", mixed)
    assert re.search(rb"[^\r]\n", mixed)

    truncated = fixtures.faulty_stream("truncated", dialect)
    assert clean.startswith(truncated)
    assert truncated.endswith(b"\n\n")
    last = parse_events(truncated)[-1]
    assert last[1] != "[DONE]"
    assert last[0] not in ("message_stop", "response.completed")

    unterminated = fixtures.faulty_stream("unterminated", dialect)
    assert not unterminated.endswith(b"\n")
    assert unterminated.rsplit(b"\n\n", 1)[1].startswith((b"data: {", b"event: "))

    invalid = fixtures.faulty_stream("invalid_json", dialect)
    payloads = [d for _, d in parse_events(invalid) if d != "[DONE]"]
    assert sum(_json(d) is None for d in payloads) == 1

    oversized = fixtures.faulty_stream("oversized", dialect)
    assert max(map(len, oversized.split(b"\n"))) > fixtures.OVERSIZED_BYTES


def test_unterminated_openai_ends_mid_frame() -> None:
    """The unterminated OpenAI stream stops inside a data line, with no [DONE]."""
    data = fixtures.faulty_stream("unterminated", "openai")
    assert data.endswith(b'\n\ndata: {"choi')
    assert b"[DONE]" not in data


def test_split_reads_is_lossless_and_seeded() -> None:
    """Reads join back to the input, respect the size bounds and repeat per seed."""
    data = fixtures.clean_stream("anthropic")
    pieces = fixtures.split_reads(data, 7, min_size=3, max_size=17)
    assert b"".join(pieces) == data
    assert all(3 <= len(p) <= 17 for p in pieces[:-1])
    assert 1 <= len(pieces[-1]) <= 17
    assert pieces == fixtures.split_reads(data, 7, min_size=3, max_size=17)
    assert pieces != fixtures.split_reads(data, 8, min_size=3, max_size=17)
    assert fixtures.split_reads(b"", 1) == []
    with pytest.raises(ValueError, match="min_size"):
        fixtures.split_reads(data, 1, min_size=0)


@pytest.mark.parametrize("seed", range(5))
def test_split_reads_cut_characters(seed: int) -> None:
    """Stateless per-read decoding corrupts the text (negative control); stateful does not."""
    data = fixtures.raw_text_stream()
    pieces = fixtures.split_reads(data, seed)
    stateless = "".join(p.decode("utf-8", "replace") for p in pieces)
    assert stateless != data.decode("utf-8"), "the reads must cut multi-byte characters"
    decoder = codecs.getincrementaldecoder("utf-8")()
    stateful = "".join(decoder.decode(p) for p in pieces) + decoder.decode(b"", final=True)
    assert stateful == data.decode("utf-8")
    assert "".join(d for _, d in parse_events(stateful.encode())) == MESSAGE


def test_short_message_breaks_stateless_decoding_at_some_cut() -> None:
    """At every cut of the short fixture a stateful decoder survives and a naive one fails."""
    raw = SHORT_MESSAGE.encode()
    broken = []
    for cut in range(1, len(raw)):
        decoder = codecs.getincrementaldecoder("utf-8")()
        stateful = decoder.decode(raw[:cut]) + decoder.decode(raw[cut:], final=True)
        assert stateful == SHORT_MESSAGE, cut
        naive = raw[:cut].decode("utf-8", "replace") + raw[cut:].decode("utf-8", "replace")
        if naive != SHORT_MESSAGE:
            broken.append(cut)
    assert len(broken) == 1 + 2 + 3  # one cut inside é, two inside —, three inside 🦊


def test_pattern_bytes() -> None:
    """The pass-through pattern is deterministic, exact in length and uses every byte value."""
    data = fixtures.pattern_bytes(10_000)
    assert len(data) == 10_000
    assert data == fixtures.pattern_bytes(10_000)
    assert set(data) == set(range(256))
    assert fixtures.pattern_bytes(0) == b""
    assert data[:100] == fixtures.pattern_bytes(100)
