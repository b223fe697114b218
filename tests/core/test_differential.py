"""The core against the oracle, on hostile input, at every cut of small cases and at random.

:mod:`tests.support.oracle` reads the whole stream at once, the way the WHATWG spec describes it
(decode, then split lines, then fields). The core is fed the same bytes in reads: whole,
byte by byte, at every one- and two-cut split of short hostile fixtures, and at seeded
k-way splits of generated streams, for every dialect, with the default limits and with
tiny ones. Both must give the same events (type, data, id, retry, ordinal, block start),
the same reassembled text, the same alerts (kinds, byte offsets, event indexes, counts)
and the same frame ends; and a read that ends with a blank line's CR, and only such a read,
reports that offset as its tentative frame end. Every failure message carries the stream,
the cuts, the dialect and the limits (and the split seed), so it can be replayed with
:func:`tests.support.differential.compare`.

The planners are checked against the same oracle: their output bytes are their input
bytes, and every frame boundary they write at is one the oracle agrees with.

The last section holds the known defects of the old core as regression tests.
"""

from __future__ import annotations

import itertools
import json
import subprocess
import sys
from collections.abc import Sequence

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sse_proxy.core import Limits, ReplacementChar, StreamReassembler
from sse_proxy.rechunk.planner import (
    ChaosPlanner,
    FramesPlanner,
    PassthroughPlanner,
    Planner,
    Write,
)
from sse_proxy.rechunk.spec import STRATEGIES, ChaosSpec
from tests.support.cuts import bytewise, run
from tests.support.differential import compare, random_split, split_at
from tests.support.oracle import DEFAULT_LIMIT, DETAIL_LIMIT, DIALECTS, decode, parse, reference

FFFD = "\ufffd"
SMALL = (7, 24)  # (max_line, max_frame): tiny enough that the short fixtures outgrow them
LIMITS = {"default": (DEFAULT_LIMIT, DEFAULT_LIMIT), "small": SMALL}

DIFF = settings(
    max_examples=120,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)


def _check(stream: bytes, pieces: Sequence[bytes], dialect: str, limits: tuple[int, int]) -> None:
    diff = compare(stream, pieces, dialect, max_line=limits[0], max_frame=limits[1])
    assert diff is None, diff


def _check_splits(stream: bytes, dialect: str, limits: tuple[int, int], seed: int, k: int) -> None:
    """Whole, byte by byte (when short) and in ``k`` reads cut by ``seed``."""
    _check(stream, [stream], dialect, limits)
    if len(stream) <= 160:
        _check(stream, bytewise(stream), dialect, limits)
    pieces = random_split(stream, k, seed)
    for quiet in (False, True):
        diff = compare(
            stream, pieces, dialect, max_line=limits[0], max_frame=limits[1], quiet=quiet
        )
        assert diff is None, f"split seed={seed} k={k}\n{diff}"


# -- the oracle itself ----------------------------------------------------------------------


def test_oracle_decodes_like_the_standard_decoder() -> None:
    """Maximal subparts (one U+FFFD each), offsets per character, bad starts exact."""
    raw = b"a\xe2\x82\xff\xf0\x9f\x99\x82\xed\xa0\x80\xef\xbf\xbd\xc3"
    text, positions, bad = decode(raw)
    assert text == raw.decode("utf-8", "replace")
    assert positions == [0, 1, 3, 4, 8, 9, 10, 11, 14, 15]
    assert bad == {1, 3, 8, 9, 10, 14}


@pytest.mark.parametrize(
    ("stream", "expected"),
    [
        (b"data: x\n\n", [("message", "x", None, None)]),
        (b"\xef\xbb\xbfdata: x\n\n", [("message", "x", None, None)]),
        (b"\xef\xbb\xbf\xef\xbb\xbfdata: x\n\n", []),  # a second BOM is part of the name
        (b"data:  x\n\n", [("message", " x", None, None)]),  # only one space is optional
        (b"data: x\r\n", []),  # one CRLF is one line ending, not a blank line
        (b"data: x\r\r", [("message", "x", None, None)]),
        (b"data: x\n", []),  # incomplete block: discarded
        (b"data\n\n", [("message", "", None, None)]),
        (b"data:a\ndata:b\n\n", [("message", "a\nb", None, None)]),
        (b"id: 1\n\ndata: x\n\n", [("message", "x", "1", None)]),
        (b"id: 1\nid: a\x00b\ndata: x\n\n", [("message", "x", "1", None)]),
        (
            b"retry: 5\ndata: x\n\ndata: y\n\n",
            [("message", "x", None, 5), ("message", "y", None, None)],
        ),
        (b"retry: 5x\nretry:\ndata: x\n\n", [("message", "x", None, None)]),
        (
            b"event: e\n: c\ndata: x\n\ndata: y\n\n",
            [("e", "x", None, None), ("message", "y", None, None)],
        ),
        (b"data: \xff\n\n", [("message", FFFD, None, None)]),
    ],
)
def test_oracle_reads_the_spec(stream: bytes, expected: list[tuple[object, ...]]) -> None:
    assert [(e.type, e.data, e.id, e.retry) for e in parse(stream).events] == expected


def test_oracle_alerts_and_frame_ends() -> None:
    stream = b"data: \xff\xef\xbf\xbd\r\n\r\n: \xc3\n\ndata: {"
    ref = reference(stream, "openai")
    assert ref.frame_ends == (14, 19)
    assert ref.crlf_frame_ends == (14,)
    assert sorted(ref.alerts) == sorted(
        [
            ("replacement_char", "invalid_utf8", 6, 0, 1),
            ("replacement_char", "upstream_literal", 7, 0, 1),
            ("replacement_char", "invalid_utf8", 16, 1, 1),
            ("invalid_json", 6, 0),
            ("unterminated_frame", 7, 19),
            ("truncated", "no_terminal_marker", "openai", 26),
            ("crlf_framing", 2, 2, 0, True),
        ]
    )


def test_oracle_limits() -> None:
    stream = b"data: 12345678\n\nid: 1\nid: 2\nid: 3\n\ndata: ok\n\nzzzzzzzzzz"
    parsed = parse(stream, max_line=8, max_frame=12)
    assert [e.data for e in parsed.events] == ["ok"]
    assert parsed.alerts == [
        ("oversized_frame", "line", 8, 0),
        ("oversized_frame", "frame", 12, 16),
        ("oversized_frame", "line", 8, len(stream) - 10),
    ]


def test_oracle_counts_a_flood_past_the_detail_limit() -> None:
    n = DETAIL_LIMIT + 5
    stream = b"data: " + b"\xef\xbf\xbd\xff" * n + b"\n\n"
    alerts = parse(stream).alerts
    inv = [a for a in alerts if a[1] == "invalid_utf8"]
    lit = [a for a in alerts if a[1] == "upstream_literal"]
    assert [a[4] for a in inv] == [1] * DETAIL_LIMIT + [5]
    assert [a[4] for a in lit] == [1] * DETAIL_LIMIT + [5]
    assert inv[DETAIL_LIMIT][2] == 6 + 4 * DETAIL_LIMIT + 3
    assert lit[DETAIL_LIMIT][2] == 6 + 4 * DETAIL_LIMIT


def test_oracle_dialect_text() -> None:
    chat = b'data: {"choices":[{"index":1,"delta":{"content":"b"}},{"delta":{"content":"a"}}]}\n\n'
    assert reference(chat + b"data: [DONE]\n\n", "openai").text == "a"
    resp = b'data: {"type":"response.output_text.delta","output_index":1,"delta":"y"}\n\n'
    resp += b'data: {"type":"response.output_text.delta","delta":"x"}\n\n'
    assert reference(resp, "responses").text == "xy"
    anth = b"event: content_block_delta\n"
    anth += b'data: {"index":2,"delta":{"type":"text_delta","text":"q"}}\n\n'
    anth += b'data: {"type":"content_block_start","content_block":{"text":"p"}}\n\n'
    assert reference(anth, "anthropic").text == "pq"
    assert reference(b"data: a\n\ndata:  b\n\ndata: [DONE]\n\n", "text").text == "a b"
    escaped = b'data: {"choices":[{"delta":{"content":"\\\\ufffd \\ufffd"}}]}\n\n'
    ref = reference(escaped, "openai")
    assert ref.text == "\\ufffd " + FFFD
    at = escaped.rindex(b"\\ufffd")
    assert ("replacement_char", "upstream_literal", at, 0, 1) in ref.alerts


# -- exhaustive: every 1- and 2-cut split of short hostile fixtures --------------------------

FIXTURES: dict[str, bytes] = {
    "char_split_across_events": b"data: \xe2\x82\n\ndata: \xac\n\n",
    "char_split_three_events": b"data: \xe2\n\ndata: \x82\n\ndata: \xac\n\n",
    "bom_crlf": b"\xef\xbb\xbfdata: x\r\n\r\n",
    "bom_prefix_only": b"\xef\xbbdata: a\n\n",
    "cr_mix": b"data: a\r\rdata: b\r\n\r\n\n",
    "emoji_cr": b"data: \xf0\x9f\x99\x82\r\n\n: \xff\r",
    "nul_id_nocolon": b"id: \x00\nid: 7\ndata:x\n\ndata\n\n",
    "literal_fffd_retry": b"retry: 12\ndata: \xef\xbf\xbd\n\n",
    "bad_event_unterminated": b"event: \xffx\ndata: 1\n\ndata: 2\n",
    "run_of_frames": b"data: 1\n\ndata: 2\n\ndata: 3\n\n",
    "overlong_surrogate": b"data: \xc0\xaf\xed\xa0\x80\n\n",
    "long_line": b"data: abcdefghijklmnop\n\ndata: z\n\n",
    "many_tiny_lines": b"a\nb\n:\nd\n\n\n\r\r\n",
    "chat_split_char": b'data: {"choices":[{"delta":{"content":"\xc3"}}]}\n\ndata: \xa9\n\n',
}


@pytest.mark.parametrize("limits", list(LIMITS), ids=str)
@pytest.mark.parametrize("dialect", DIALECTS)
@pytest.mark.parametrize("name", list(FIXTURES))
def test_every_one_and_two_cut_split_agrees_with_the_oracle(
    name: str, dialect: str, limits: str
) -> None:
    stream = FIXTURES[name]
    max_line, max_frame = LIMITS[limits]
    ref = reference(stream, dialect, max_line=max_line, max_frame=max_frame)
    n = len(stream)
    splits: list[list[int]] = [[]] + [[a] for a in range(1, n)]
    splits += [[a, b] for a, b in itertools.combinations(range(1, n), 2)]
    failures: list[str] = []
    for cuts in splits:
        # the passthrough hot path too, at every single cut (alerts and text length)
        for quiet in (False, True) if len(cuts) < 2 else (False,):
            diff = compare(
                stream,
                split_at(stream, cuts),
                dialect,
                max_line=max_line,
                max_frame=max_frame,
                ref=ref,
                quiet=quiet,
            )
            if diff is not None:
                failures.append(diff)
    assert not failures, f"{len(failures)} of {len(splits)} splits disagree; first:\n" + "\n".join(
        failures[:2]
    )


# -- random: hostile streams at seeded k-way splits ------------------------------------------

ATOMS: tuple[bytes, ...] = (
    b"data: ",
    b"data:",
    b"data",
    b"event: ",
    b"event:message_stop",
    b"id: ",
    b"id",
    b"retry: ",
    b"retry: 1000",
    b"9" * 30,
    b": comment",
    b":",
    b"\n",
    b"\r",
    b"\r\n",
    b"\n\n",
    b"\r\n\r\n",
    b"\r\r",
    b"\n\r",
    b"\x00",
    b"\xef\xbb\xbf",
    b"\xef\xbb",
    b"\xef\xbf\xbd",
    b"\xc0\xaf",
    b"\xe0\x80\xaf",
    b"\xed\xa0\x80",
    b"\xe6\x97",
    b"\xa5",
    b"\xf0\x9f\x99",
    b"\x82",
    b"\xf4\x90\x80\x80",
    b"\xff",
    b"\x80",
    "日本語 🙂 café".encode(),
    b"x",
    b" ",
    b"[DONE]",
    b"\\ufffd",
    b'{"choices":[{"index":0,"delta":{"content":"',
    b'{"choices":[{"delta":{"content":"a"}}]}',
    b'{"error":{"message":"',
    b'{"type":"response.output_text.delta","delta":"',
    b'{"type":"response.completed"}',
    b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"',
    b'{"type":"message_stop"}',
    b'{"type":"error","error":{"type":"x","message":"busy"}}',
    b'"}}]}',
    b'"}}',
    b'"}',
    b"{",
    b"}",
    b'"',
)

hostile_streams = st.lists(st.sampled_from(ATOMS), max_size=40).map(b"".join)
dialects = st.sampled_from(DIALECTS)
limit_pairs = st.one_of(
    st.just((DEFAULT_LIMIT, DEFAULT_LIMIT)),
    st.tuples(st.integers(1, 40), st.integers(1, 120)),
)
seeds = st.integers(0, 2**32 - 1)
ks = st.integers(2, 16)


@DIFF
@given(stream=st.binary(max_size=300), dialect=dialects, limits=limit_pairs, seed=seeds, k=ks)
def test_random_bytes_agree_with_the_oracle(
    stream: bytes, dialect: str, limits: tuple[int, int], seed: int, k: int
) -> None:
    _check_splits(stream, dialect, limits, seed, k)


@DIFF
@given(stream=hostile_streams, dialect=dialects, limits=limit_pairs, seed=seeds, k=ks)
@example(b"data: \xe2\x82\n\ndata: \xac\n\n", "text", (DEFAULT_LIMIT, DEFAULT_LIMIT), 0, 2)
def test_sse_shaped_hostile_streams_agree_with_the_oracle(
    stream: bytes, dialect: str, limits: tuple[int, int], seed: int, k: int
) -> None:
    _check_splits(stream, dialect, limits, seed, k)


@st.composite
def json_frames(draw: st.DrawFn) -> bytes:
    """Well-formed frames of every JSON dialect whose strings hold hostile bytes."""
    hostile = st.lists(
        st.sampled_from(
            (
                b"a",
                b" ",
                b"\xc3\xa9",
                b"\xc3",
                b"\xa9",
                b"\xff",
                b"\xef\xbf\xbd",
                b"\\ufffd",
                b"\\\\ufffd",
                b"\\n",
                b"\xf0\x9f\x99\x82",
                b"\xf0\x9f",
            )
        ),
        max_size=6,
    ).map(b"".join)
    nl = draw(st.sampled_from((b"\n", b"\r\n", b"\r")))
    out = []
    for _ in range(draw(st.integers(0, 6))):
        s = draw(hostile)
        body = draw(
            st.sampled_from(
                (
                    b'{"choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":null}]}',
                    b'{"choices":[{"index":1,"delta":{"content":"%s","reasoning_content":"r"}}]}',
                    b'{"type":"response.output_text.delta","output_index":0,"delta":"%s"}',
                    b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"%s"}}',
                    b'{"type":"content_block_start","index":1,"content_block":{"type":"text","text":"%s"}}',
                    b'{"id":"%s","choices":[{"delta":{"content":"c"}}]}',
                    b"%s",
                )
            )
        ).replace(b"%s", s)
        event = draw(st.sampled_from((b"", b"event: content_block_delta" + nl)))
        out.append(event + b"data: " + body + nl + nl)
    out.append(
        draw(st.sampled_from((b"", b"data: [DONE]\n\n", b'data: {"type":"message_stop"}\n\n')))
    )
    return b"".join(out)


@DIFF
@given(stream=json_frames(), dialect=dialects, seed=seeds, k=ks)
def test_json_dialect_streams_agree_with_the_oracle(
    stream: bytes, dialect: str, seed: int, k: int
) -> None:
    _check_splits(stream, dialect, (DEFAULT_LIMIT, DEFAULT_LIMIT), seed, k)


@st.composite
def long_fields(draw: st.DrawFn) -> tuple[bytes, tuple[int, int]]:
    """Fields far longer than tiny limits, of valid, invalid and line-ending-free units."""
    unit = draw(st.sampled_from((b"x", b"\xff", "日".encode(), b"\x00", b"\xef\xbf\xbd", b"9")))
    field = draw(st.sampled_from((b"data: ", b"retry: ", b": ", b"id: ", b"")))
    nl = draw(st.sampled_from((b"\n", b"\r\n", b"\r")))
    n = draw(st.integers(0, 400))
    tail = draw(st.sampled_from((b"", b"data: ok" + nl + nl, b"data: ok")))
    head = draw(st.sampled_from((b"", b"data: a" + nl)))
    stream = head + field + unit * n + nl + nl + tail
    return stream, (draw(st.integers(1, 64)), draw(st.integers(1, 256)))


@DIFF
@given(case=long_fields(), dialect=dialects, seed=seeds, k=ks)
def test_huge_fields_against_small_limits_agree_with_the_oracle(
    case: tuple[bytes, tuple[int, int]], dialect: str, seed: int, k: int
) -> None:
    stream, limits = case
    _check_splits(stream, dialect, limits, seed, k)


@DIFF
@given(
    lines=st.lists(
        st.sampled_from((b"", b"a", b":", b"data:", b"data: 1", b"id", b"\xff")), max_size=120
    ),
    endings=st.lists(st.sampled_from((b"\n", b"\r", b"\r\n")), min_size=1, max_size=8),
    dialect=dialects,
    seed=seeds,
    k=ks,
)
def test_many_tiny_lines_agree_with_the_oracle(
    lines: list[bytes], endings: list[bytes], dialect: str, seed: int, k: int
) -> None:
    stream = b"".join(line + endings[i % len(endings)] for i, line in enumerate(lines))
    _check_splits(stream, dialect, (DEFAULT_LIMIT, DEFAULT_LIMIT), seed, k)


# -- token arrival: one frame per read, as LLM APIs send them ----------------------------

OPENAI_BODIES: tuple[bytes, ...] = (
    b'{"id":"c1","model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}',
    b'{"id":"c1","choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":null}]}',
    b'{"choices":[{"index":0,"delta":{"content":"%s"}}]}',
    b'{"choices":[{"index":1,"delta":{"content":"%s"}}]}',
    b'{"choices":[{"index":0,"delta":{"reasoning_content":"%s"}}]}',
    b'{"choices":[{"index":0,"delta":{"content":"%s","tool_calls":[{"index":0}]}}]}',
    b'{"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}',
    b'{"choices":[],"usage":{"prompt_tokens":1,"completion_tokens":2}}',
    b'{"choices":[{"index":0,"delta":{"content":"%s"}},{"index":1,"delta":{}}]}',
    b'{"choices":[{"index":0,"delta":{"content":null}}]}',
    # the common chunk's edges, which its typed decode must send the general way
    b'{"choices":[{"index":0,"delta":{"content":"%s"}}],"usage":{"completion_tokens":3}}',
    b'{"choices":[{"index":0,"delta":{"content":"%s","reasoning":"r"}}]}',
    b'{"choices":[{"index":0,"delta":{"content":"%s","reasoning_content":"r"}}]}',
    b'{"choices":[{"index":0,"delta":{"content":"%s"},"finish_reason":"length"}]}',
    b'{"choices":[{"index":0,"delta":null}]}',
    b'{"choices":[{"index":0.0,"delta":{"content":"%s"}}]}',
    b'{"choices":[{"index":0,"delta":{"content":5}}]}',
    b'{"choices":[{"index":0,"delta":{"content":"%s","tool_calls":null,"role":"assistant"}}]}',
    b'{"choices":[{"delta":{"content":"%s","reasoning_content":null},"finish_reason":null}],'
    b'"usage":null}',
    b'{"choices":[{"index":0,"delta":{"content":"%s"}}],"choices":[]}',
    b'{"choices":"%s"}',
    b'{"choices":[{"delta":{"content":"%s"',
    b"%s",
    b"[DONE]",
    b"",
)
PIECES = st.sampled_from(
    (b"a", b" ", b"\xc3\xa9", b"\xc3", b"\xff", b"\xef\xbf\xbd", b"\\ufffd", b"\\u00e9",
     b"\xf0\x9f\x99\x82", b"\xf0\x9f", b"\\n", b'\\"', b"\r")
)  # fmt: skip


@st.composite
def token_frames(draw: st.DrawFn) -> list[bytes]:
    """A stream as tokens arrive: each read one `data:` frame, hostile strings inside."""
    frames = []
    for _ in range(draw(st.integers(0, 8))):
        body = draw(st.sampled_from(OPENAI_BODIES))
        frames.append(b"data: " + body.replace(b"%s", b"".join(draw(st.lists(PIECES, max_size=4)))))
    return [f + b"\n\n" for f in frames]


@pytest.mark.parametrize("body", OPENAI_BODIES, ids=lambda b: b[:60].decode("latin-1"))
def test_each_chunk_shape_between_common_chunks_agrees_with_the_oracle(body: bytes) -> None:
    """Every shape above between common chunks, after the role chunk: the fast paths (one
    chunk per read, and a run of them in one read) must hand it to the general path
    exactly when the oracle reads it differently from a plain content delta."""
    role, plain = OPENAI_BODIES[0], OPENAI_BODIES[2].replace(b"%s", b"a")
    bodies = (role, plain, body.replace(b"%s", b"x"), plain, plain)
    frames = [b"data: " + b + b"\n\n" for b in bodies]
    stream = b"".join(frames)
    reasons, output_tokens, extras = _openai_meta(bodies)
    for pieces in (frames, [stream], [stream[:-1], stream[-1:]]):
        for quiet in (False, True):
            diff = compare(stream, pieces, "openai", quiet=quiet)
            assert diff is None, diff
        core = StreamReassembler("openai")
        for piece in pieces:
            core.feed(piece)
        core.close(upstream_error=False, abandoned=False)
        meta = core.stream_meta()  # what the text and alerts do not show: a chunk's meta
        assert (meta.finish_reasons, meta.output_tokens) == (reasons, output_tokens), body
        got = {
            c["index"]: (c["reasoning_content"], bool(c["tool_calls"]))
            for c in core.details()["choices"]
        }
        assert {i: got.get(i, ("", False)) for i in extras} == extras, body


def _openai_meta(
    bodies: Sequence[bytes],
) -> tuple[list[str], int | None, dict[int, tuple[str, bool]]]:
    """From the spec's JSON: each choice's last finish reason (by index), the last usage's
    completion tokens, and each choice's reasoning text and whether it has tool calls."""
    last: dict[int, str] = {}
    extras: dict[int, tuple[str, bool]] = {}
    tokens = None
    for body in bodies:
        try:
            obj = json.loads(body)
        except ValueError:
            continue
        if type(obj) is not dict:
            continue
        usage = obj.get("usage")
        if type(usage) is dict and type(usage.get("completion_tokens")) is int:
            tokens = usage["completion_tokens"]
        choices = obj.get("choices")
        for ch in choices if type(choices) is list else ():
            if type(ch) is not dict:
                continue
            index = ch.get("index", 0)
            index = index if type(index) is int else 0
            if type(ch.get("finish_reason")) is str and ch["finish_reason"]:
                last[index] = ch["finish_reason"]
            delta = ch.get("delta")
            if type(delta) is dict:
                reasoning, calls = extras.get(index, ("", False))
                for key in ("reasoning_content", "reasoning"):
                    if type(delta.get(key)) is str:
                        reasoning += delta[key]
                calls = calls or (
                    type(delta.get("tool_calls")) is list and bool(delta["tool_calls"])
                )
                extras[index] = (reasoning, calls)
    return [last[i] for i in sorted(last)], tokens, extras


@DIFF
@given(frames=token_frames(), dialect=dialects)
def test_one_frame_per_read_agrees_with_the_oracle(frames: list[bytes], dialect: str) -> None:
    """The per-read fast path (a read that is exactly one frame) against the oracle, with
    and without events and frame ends; a stray CR must send the read the general way. And
    the same frames in one read: the batch path's run of common chunks."""
    stream = b"".join(frames)
    for quiet in (False, True):
        diff = compare(stream, frames, dialect, quiet=quiet)
        assert diff is None, diff
        diff = compare(stream, [stream], dialect, quiet=quiet)
        assert diff is None, diff


def test_one_frame_per_read_takes_the_fast_path_and_keeps_every_token() -> None:
    """Token reads go the fast path (the framer says so) and lose nothing: the text is the
    oracle's, a role chunk, a usage-only chunk and a finish chunk included."""
    frames = [b"data: " + OPENAI_BODIES[7] + b"\n\n", b"data: " + OPENAI_BODIES[0] + b"\n\n"]
    tokens = ["The", " quick", " br", "ø", "wn 🙂", " fox"]
    for tok in tokens:
        body = OPENAI_BODIES[2].replace(b"%s", json.dumps(tok, ensure_ascii=False)[1:-1].encode())
        frames.append(b"data: " + body + b"\n\n")
    frames += [b"data: " + OPENAI_BODIES[6] + b"\n\n", b"data: [DONE]\n\n"]
    r = StreamReassembler("openai", emit_events=False, frame_ends=False, keep_text=True)
    whole = [r._parser.feed(f) for f in frames]
    assert whole[2:] == [True] * (len(frames) - 2), whole  # the first two set the stream up
    assert r.text == "".join(tokens) == reference(b"".join(frames), "openai").text
    assert r.events_dispatched == len(frames)


# JSON "\ufffd" escapes: each one that lands in the message text is one upstream_literal
# alert at the escape's own stream offset (the minimal shapes the random search found).
ESCAPES: dict[str, bytes] = {
    "raw_fffd_elsewhere_hides_the_escape": (
        b'data: {"id":"\xff","choices":[{"delta":{"content":"\\ufffd"}}]}\n\ndata: [DONE]\n\n'
    ),
    "escape_on_the_second_data_line": (
        b'data: {"choices":[{"delta":\ndata: {"content":"\\ufffd"}}]}\n\ndata: [DONE]\n\n'
    ),
    "invalid_byte_before_the_escape": (
        b'data: {"choices":[{"delta":{"content":"\xc3\\ufffd"}}]}\n\ndata: [DONE]\n\n'
    ),
    "escaped_backslash_before_the_escape": (
        b'data: {"choices":[{"delta":{"content":"\\\\ufffd\\ufffd"}}]}\n\ndata: [DONE]\n\n'
    ),
    "escape_flood_over_two_fields": (  # past DETAIL_LIMIT per payload: one counted alert
        b'data: {"choices":[{"delta":{"content":"'
        + b"\\ufffd" * 20
        + b'","reasoning_content":"'
        + b"\\ufffd" * 5
        + b'"}}]}\n\ndata: [DONE]\n\n'
    ),
    "anthropic_raw_fffd_elsewhere_hides_the_escape": (
        b'data: {"type":"content_block_delta","index":0,"x":"\xff",'
        b'"delta":{"type":"text_delta","text":"\\ufffd"}}\n\ndata: {"type":"message_stop"}\n\n'
    ),
}


@pytest.mark.parametrize("name", list(ESCAPES))
def test_json_escaped_replacement_chars_are_reported_where_they_are(name: str) -> None:
    stream = ESCAPES[name]
    dialect = "anthropic" if name.startswith("anthropic") else "openai"
    for pieces in ([stream], bytewise(stream)):
        _check(stream, pieces, dialect, (DEFAULT_LIMIT, DEFAULT_LIMIT))


# -- planners -------------------------------------------------------------------------------


def _drive(planner: Planner, pieces: Sequence[bytes]) -> list[Write]:
    """Feed reads with the frame ends the core reports for them, as the shell does."""
    r = StreamReassembler("none")
    writes: list[Write] = []
    for piece in pieces:
        writes += planner.plan(piece, r.feed(piece).frame_ends)
    r.close()
    return writes + planner.flush()


def _boundaries(writes: Sequence[Write]) -> list[int]:
    return list(itertools.accumulate(len(w.data) for w in writes))


def _check_planners(stream: bytes, pieces: Sequence[bytes], where: str) -> None:
    ends = set(reference(stream, "none").frame_ends) | {len(stream)}
    out = _drive(PassthroughPlanner(), pieces)
    assert b"".join(w.data for w in out) == stream, f"passthrough {where}"
    out = _drive(FramesPlanner(), pieces)
    assert b"".join(w.data for w in out) == stream, f"frames {where}"
    assert all(w.data for w in out), f"frames: empty write {where}"
    wrong = [b for b in _boundaries(out) if b not in ends]
    assert not wrong, f"frames: writes end at {wrong}, not frame ends {sorted(ends)} {where}"
    for name in STRATEGIES:
        out = _drive(ChaosPlanner(ChaosSpec((name,), 7)), pieces)
        assert b"".join(w.data for w in out) == stream, f"chaos {name} {where}"
    out = _drive(ChaosPlanner(ChaosSpec(("coalesce",), 7, frames_per_write=2)), pieces)
    wrong = [b for b in _boundaries(out) if b not in ends]
    assert not wrong, f"coalesce: writes end at {wrong}, not frame ends {sorted(ends)} {where}"


@DIFF
@given(stream=hostile_streams, seed=seeds, k=ks)
@example(b"\n\r\n", 0, 2)  # reads b"\n\r" + b"\n": coalesce wrote at the tentative end 2
def test_planners_keep_bytes_and_write_only_at_oracle_frame_ends(
    stream: bytes, seed: int, k: int
) -> None:
    _check_planners(stream, random_split(stream, k, seed), f"split seed={seed} k={k}")


@pytest.mark.parametrize("name", ["bom_crlf", "cr_mix", "emoji_cr", "many_tiny_lines"])
def test_planners_at_every_cut_of_short_fixtures(name: str) -> None:
    stream = FIXTURES[name]
    for cut in range(1, len(stream)):  # single cuts first: the shortest failure shows
        _check_planners(stream, split_at(stream, [cut]), f"cut {cut}")
    for cuts in itertools.combinations(range(1, len(stream)), 2):
        _check_planners(stream, split_at(stream, cuts), f"cuts {cuts}")


# -- known defects of the old core ----------------------------------------------------------

SPLIT_CHAR = b"data: \xe2\x82\n\ndata: \xac\n\n"  # 19 bytes; E2 82 AC is the euro sign


@pytest.mark.parametrize("how", ["whole", "bytewise"])
@pytest.mark.parametrize("quiet", [False, True], ids=["events", "passthrough_path"])
def test_a_character_split_across_two_text_events_is_two_replacements(
    how: str, quiet: bool
) -> None:
    """Each event's data is decoded on its own: E2 82 then AC is two losses, never a euro,
    however the reads fall (one read used to give a euro, with no alert)."""
    pieces = [SPLIT_CHAR] if how == "whole" else bytewise(SPLIT_CHAR)
    kw: dict[str, object] = (
        {"emit_events": False, "frame_ends": False, "keep_text": True} if quiet else {}
    )
    res = run(pieces, "text", **kw)
    assert res.text == FFFD + FFFD
    got = [
        (a.cause, a.byte_offset, a.event_index)
        for a in res.alerts
        if isinstance(a, ReplacementChar)
    ]
    assert got == [("invalid_utf8", 6, 0), ("invalid_utf8", 16, 1)]
    if not quiet:
        assert [e.data for e in res.events] == [FFFD, FFFD]


@pytest.mark.parametrize("as_text", [False, True], ids=["events", "text"])
def test_check_on_a_character_split_across_two_text_events_does_not_crash(as_text: bool) -> None:
    """`sse-proxy check --dialect text` on those 19 bytes: two alerts, no traceback."""
    args = ["--text"] if as_text else []
    proc = subprocess.run(
        [sys.executable, "-m", "sse_proxy", "check", "--dialect", "text", *args],
        input=SPLIT_CHAR,
        capture_output=True,
        timeout=60,
        check=False,
    )
    err = proc.stderr.decode("utf-8", "backslashreplace")
    assert "Traceback" not in err, err
    assert proc.returncode == 1, err  # warnings were found
    logs = [json.loads(line) for line in err.splitlines() if line.strip()]
    assert logs[-1]["event"] == "stream.summary", err
    assert logs[-1]["alerts"] == {"sse.replacement_char": 2}, logs[-1]
    fffd = [
        (x["byte_offset"], x["event_index"]) for x in logs if x["event"] == "sse.replacement_char"
    ]
    assert fffd == [(6, 0), (16, 1)]
    out = proc.stdout.decode("utf-8")
    if as_text:
        assert out.rstrip("\n") == FFFD + FFFD
    else:
        assert [json.loads(line)["data"] for line in out.splitlines()] == [FFFD, FFFD]


INVALID_RUN = 4000  # correctness only; the 1,000,000-byte speed case is bench/worst_case.py


@pytest.mark.parametrize("dialect", ["text", "none"])
@pytest.mark.parametrize("read", [None, 1000, 7])
def test_a_long_line_of_invalid_bytes_is_every_replacement_accounted_for(
    dialect: str, read: int | None
) -> None:
    """0xFF is never valid UTF-8: each byte is one maximal subpart and one U+FFFD. As
    ``ReplacementChar`` documents, the first DETAIL_LIMIT of a line are an alert each (at
    their own offsets) and the rest one alert, at the next one, carrying their count: every
    U+FFFD is accounted for, in linear time."""
    stream = b"data: " + b"\xff" * INVALID_RUN + b"\n\n"
    step = read or len(stream)
    pieces = [stream[i : i + step] for i in range(0, len(stream), step)]
    res = run(pieces, dialect)
    got = [a for a in res.alerts if isinstance(a, ReplacementChar)]
    detail = DETAIL_LIMIT
    assert [(a.cause, a.byte_offset, a.event_index, a.count) for a in got] == [
        ("invalid_utf8", 6 + i, 0, 1) for i in range(detail)
    ] + [("invalid_utf8", 6 + detail, 0, INVALID_RUN - detail)]
    assert [e.data for e in res.events] == [FFFD * INVALID_RUN]
    assert res.text == (FFFD * INVALID_RUN if dialect == "text" else "")
    assert compare(stream, pieces, dialect) is None


def test_check_on_a_long_line_of_invalid_bytes_counts_every_replacement() -> None:
    """The README: alerts of one kind are rate-limited per stream (10 in full, then
    counted in the summary); the summary keeps the exact count of U+FFFD."""
    stream = b"data: " + b"\xff" * INVALID_RUN + b"\n\n"
    proc = subprocess.run(
        [sys.executable, "-m", "sse_proxy", "check", "--dialect", "text", "--text"],
        input=stream,
        capture_output=True,
        timeout=120,
        check=False,
    )
    err = proc.stderr.decode("utf-8", "backslashreplace")
    assert "Traceback" not in err, err[-2000:]
    logs = [json.loads(line) for line in err.splitlines() if line.strip()]
    assert sum(1 for x in logs if x["event"] == "sse.replacement_char") == 10
    assert logs[-1]["alerts"] == {"sse.replacement_char": INVALID_RUN}
    assert proc.stdout.decode("utf-8").rstrip("\n") == FFFD * INVALID_RUN


def test_limits_are_honoured_the_same_way_by_both() -> None:
    """A sanity anchor for the limit semantics both sides follow (not a defect test)."""
    stream = b"data: 12345678\n\nid: 1\nid: 2\nid: 3\n\ndata: ok\n\n"
    res = run([stream], "none", limits=Limits(max_line=8, max_frame=12))
    assert [e.data for e in res.events] == ["ok"]
    assert compare(stream, [stream], "none", max_line=8, max_frame=12) is None


_RUN_BREAKERS = [b"data:x", b"datum: x", b"id: 7", b"retry: 10", b": comment", b"data:  x", b""]


@pytest.mark.parametrize("breaker", _RUN_BREAKERS, ids=repr)
@pytest.mark.parametrize("where", [1, 2, 5])
@pytest.mark.parametrize("typed", [False, True], ids=["data-frames", "typed-frames"])
@pytest.mark.parametrize("sep", [b"\n", b"\r\n", b"\r"], ids=["lf", "crlf", "cr"])
def test_a_run_of_frames_broken_by_one_line_agrees_with_the_oracle(
    breaker: bytes, where: int, typed: bool, sep: bytes
) -> None:
    """A read of look-alike frames (``data: X``, or ``event: E`` + ``data: X``) in which one
    frame's line is not of the run's shape: the run check must see it wherever it is (the
    fast paths test the whole read at once), and the read agrees with the oracle, in one
    piece and cut before the odd frame."""
    frames = []
    for n in range(7):
        data = b'data: {"choices":[{"index":0,"delta":{"content":"t%d"}}]}' % n
        lines = [b"event: message", data] if typed else [data]
        if n == where:
            lines[-1 if not typed or where != 5 else 0] = breaker
        frames.append(sep.join(lines) + sep + sep)
    stream = b"".join(frames)
    cut = len(b"".join(frames[:where]))
    for pieces in ([stream], [stream[:cut], stream[cut:]]):
        diff = compare(stream, pieces, "openai")
        assert diff is None, diff


# One frame of a read of `data: X` frames that the whole-read shortcut must not take as it
# is (each needs the field rules, or an alert), and the limits under which it shows.
_WHOLE_READ_BREAKERS: dict[str, tuple[bytes, tuple[int, int]]] = {
    "line over max_line": (b'data: "' + b"x" * 80 + b'"\n\n', (64, 4096)),
    "frame over max_frame": (b'data: "' + b"x" * 40 + b'"\n\n', (4096, 48)),
    "invalid utf-8": (b'data: {"a":"\xff\xc3"}\n\n', (DEFAULT_LIMIT, DEFAULT_LIMIT)),
    "literal U+FFFD": (b'data: "\xef\xbf\xbd"\n\n', (DEFAULT_LIMIT, DEFAULT_LIMIT)),
    "two data lines": (b"data: {\ndata: }\n\n", (DEFAULT_LIMIT, DEFAULT_LIMIT)),
    "an extra blank line": (b"data: 1\n\n\n", (DEFAULT_LIMIT, DEFAULT_LIMIT)),
    "no space after the colon": (b"data:2\n\n", (DEFAULT_LIMIT, DEFAULT_LIMIT)),
    "a typed frame": (b"event: e\ndata: 3\n\n", (DEFAULT_LIMIT, DEFAULT_LIMIT)),
    "a comment": (b": hi\n\n", (DEFAULT_LIMIT, DEFAULT_LIMIT)),
    "a CR": (b"data: 4\r\n\r\n", (DEFAULT_LIMIT, DEFAULT_LIMIT)),
    "an escaped U+FFFD": (
        b'data: {"choices":[{"index":0,"delta":{"content":"\\ufffd"}}]}\n\n',
        (DEFAULT_LIMIT, DEFAULT_LIMIT),
    ),
    "a finish chunk": (
        b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n',
        (DEFAULT_LIMIT, DEFAULT_LIMIT),
    ),
    "none: clean, multi-byte": (
        'data: {"choices":[{"index":0,"delta":{"content":"ø東🙂"}}]}\n\n'.encode(),
        (DEFAULT_LIMIT, DEFAULT_LIMIT),
    ),
}


@pytest.mark.parametrize("breaker", list(_WHOLE_READ_BREAKERS))
@pytest.mark.parametrize("where", [1, 3, 6])
@pytest.mark.parametrize("dialect", ["openai", "none", "anthropic"])
def test_a_read_of_whole_frames_at_rest_agrees_with_the_oracle(
    breaker: str, where: int, dialect: str
) -> None:
    """Reads of several ``data: X`` frames that start between frames (a reader behind its
    upstream gets tens of tokens a read) are taken whole when their LFs are all frame
    ends; one frame that is not of that shape, or that needs an alert, anywhere in the
    read sends it the general way. Every cut that leaves the odd frame inside a read of
    whole frames, with events and without, agrees with the oracle."""
    odd, (max_line, max_frame) = _WHOLE_READ_BREAKERS[breaker]
    frames = [
        b'data: {"choices":[{"index":0,"delta":{"content":" t%d"}}]}\n\n' % n for n in range(7)
    ]
    frames[where] = odd
    stream = b"".join(frames)
    ends = list(itertools.accumulate(map(len, frames)))
    for first in range(1, where + 1):  # the first read: whole frames up to the odd one
        cut = ends[first - 1]
        for pieces in ([stream[:cut], stream[cut:]], [stream[:cut], *frames[first:]]):
            for quiet in (False, True):
                diff = compare(
                    stream, pieces, dialect, max_line=max_line, max_frame=max_frame, quiet=quiet
                )
                assert diff is None, diff


def test_a_read_of_whole_frames_at_rest_is_taken_whole() -> None:
    """The shortcut is taken (the framer says so) for a read of common chunks at rest, and
    loses nothing: text, events and frame ends are the oracle's."""
    frames = [b'data: {"choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}\n\n']
    tokens = ["The", " quick", " br", "ø", "wn 🙂", " fox"]
    body = b'data: {"choices":[{"index":0,"delta":{"content":"%s"}}]}\n\n'
    frames += [body % json.dumps(t, ensure_ascii=False)[1:-1].encode() for t in tokens]
    stream = b"".join(frames)
    ref = reference(stream, "openai")
    for quiet in (False, True):
        r = StreamReassembler("openai", emit_events=not quiet, frame_ends=not quiet)
        first = r._parser.feed(frames[0])
        r._drain()
        whole = r._parser.feed(b"".join(frames[1:]))
        assert (first, whole) == (False, True)
        assert r.text == "".join(tokens) == ref.text
        assert r.events_dispatched == len(frames)
        out = r._drain()
        if not quiet:
            assert [e.data for e in out.events] == [e.data for e in ref.events][1:]
            assert [e.start for e in out.events] == list(itertools.accumulate(map(len, frames)))[
                :-1
            ]
            assert list(out.frame_ends) == list(itertools.accumulate(map(len, frames)))[1:]


@pytest.mark.parametrize("cut", [None, 900, 2000])
def test_a_run_is_taken_whole_up_to_its_odd_chunk_and_after_detection(
    cut: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A short stream read whole (or in two reads): detection decides the dialect at the
    first event, the rest of the run is offered to it whole, and a finish chunk and
    ``[DONE]`` at its end go one by one without taking the common chunks before them
    along. The text is the oracle's; the general path sees the three odd events only."""
    from sse_proxy.core.dialects.openai_chat import OpenAIChatAccumulator

    one_by_one: list[str] = []
    accept = OpenAIChatAccumulator.accept

    def counting(self: OpenAIChatAccumulator, etype: str, data: str, i: int, off: int) -> None:
        one_by_one.append(data)
        accept(self, etype, data, i, off)

    monkeypatch.setattr(OpenAIChatAccumulator, "accept", counting)
    body = b'data: {"id":"c","choices":[{"index":0,"delta":{"content":"%s"}}]}\n\n'
    frames = [b'data: {"id":"c","choices":[{"index":0,"delta":{"role":"assistant"}}]}\n\n']
    frames += [body % (b" t%d" % i) for i in range(64)]
    frames += [b'data: {"choices":[{"index":0,"delta":{},"finish_reason":"stop"}]}\n\n']
    frames += [b"data: [DONE]\n\n"]
    stream = b"".join(frames)
    pieces = [stream] if cut is None else [stream[:cut], stream[cut:]]
    for quiet in (True, False):
        one_by_one.clear()
        diff = compare(stream, pieces, "openai", quiet=quiet)
        assert diff is None, diff
        odd = 4 if cut is not None else 3  # a cut mid-frame: that frame goes the general way
        assert len(one_by_one) <= odd, one_by_one
