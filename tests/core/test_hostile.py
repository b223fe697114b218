"""Hostile input: the core never raises, never depends on the cut, never hides a U+FFFD.

Property tests over arbitrary bytes and over streams built from SSE-shaped pieces (fields,
comments, NULs, lone CR, CRLF, invalid and overlong UTF-8, encoded surrogates, BOMs, huge
``retry`` values, JSON-ish payloads, ``[DONE]``, lines far longer than small limits), each
fed whole, at arbitrary cuts and byte by byte, for every dialect. Plus the memory and time
bounds on a 5 MB line that never ends. The hand-run, longer version is ``fuzz/fuzz_core.py``.
"""

from __future__ import annotations

import itertools
import json
import time
import tracemalloc
from collections import Counter
from dataclasses import dataclass

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from sse_proxy.core import (
    Alert,
    Limits,
    Output,
    OversizedFrame,
    ReplacementChar,
    StreamReassembler,
    UnterminatedFrame,
)
from tests.support.cuts import Result, bytewise, every_cut, run

DIALECTS: tuple[str | None, ...] = (
    None,
    "openai",
    "responses",
    "anthropic",
    "gemini",
    "mcp",
    "text",
    "none",
)
HINTS = ("openai", "responses", "anthropic", "mcp", "text")
FFFD = "\ufffd"
MIB = 1 << 20

HOSTILE = settings(
    max_examples=300,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

# -- building blocks ------------------------------------------------------------------------

FIELDS = (b"data: ", b"data:", b"data", b"event: ", b"event:", b"id: ", b"id:", b"retry: ")
ENDINGS = (b"\n", b"\r", b"\r\n", b"\n\n", b"\r\n\r\n", b"\r\r", b"\n\r")
NASTY = (
    b"\x00",
    b"\r",  # lone CR
    b"\xc0\xaf",  # overlong "/"
    b"\xe0\x80\xaf",  # overlong "/", three bytes
    b"\xf0\x80\x80\xaf",  # overlong "/", four bytes
    b"\xed\xa0\x80",  # encoded high surrogate
    b"\xed\xbf\xbf",  # encoded low surrogate
    b"\xed\xa0\xbd\xed\xb8\x82",  # CESU-8 pair
    b"\xe6\x97",  # 日 truncated
    b"\xf0\x9f\x99",  # 🙂 truncated
    b"\xf4\x90\x80\x80",  # past U+10FFFF
    b"\xff",
    b"\x80",
    b"\xef\xbb\xbf",  # BOM (only the first one is stripped)
    b"\xef\xbf\xbd",  # an encoded U+FFFD: upstream lost that character itself
    b"\\ufffd",
    b"\\uFFFD",
    b"\\ud800",
    b"\\udc00",
    b"\\ud83d\\ude42",
    "日本語 🙂 café".encode(),
    b": comment",
    b":",
)
JSONISH = (
    b"[DONE]",
    b'{"choices":[{"index":0,"delta":{"content":"',
    b'{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"',
    b'{"error":{"message":"',
    b'{"type":"response.output_text.delta","delta":"',
    b'{"type":"response.function_call_arguments.delta","item_id":"x","delta":"',
    b'{"type":"response.completed"}',
    b'{"type":"content_block_delta","index":0,"delta":{"type":"text_delta","text":"',
    b'{"type":"content_block_start","index":1,"content_block":{"type":"tool_use","name":"f"}}',
    b'{"type":"message_stop"}',
    b'{"type":"error","error":{"type":"overloaded_error","message":"busy"}}',
    b'"}}]}',
    b'"}}',
    b'"}',
    b"{",
    b"}",
    b"[",
    b"]",
    b'"',
    b"null",
    b"1e999",
    b"-0",
    b"99999999999999999999999",
)
EVENT_TYPES = (
    b"message",
    b"error",
    b"ping",
    b"message_stop",
    b"content_block_delta",
    b"response.completed",
    b"response.output_text.delta",
)

atoms = st.one_of(
    st.sampled_from(FIELDS),
    st.sampled_from(ENDINGS),
    st.sampled_from(NASTY),
    st.sampled_from(JSONISH),
    st.sampled_from(EVENT_TYPES),
    st.binary(min_size=1, max_size=6),
    st.text(max_size=6).map(str.encode),
)


@st.composite
def huge_retry(draw: st.DrawFn) -> bytes:
    """``retry`` with thousands of digits, on both sides of int-from-str's 4300-digit limit."""
    digits = draw(st.sampled_from([1, 19, 20, 4300, 4301, 9000]))
    first = draw(st.sampled_from(b"0123456789"))
    return b"retry: " + bytes([first]) + b"9" * (digits - 1) + draw(st.sampled_from(ENDINGS))


@st.composite
def long_line(draw: st.DrawFn) -> bytes:
    """A line far longer than the small limits the tests draw, ended or not."""
    field = draw(st.sampled_from((b"data: ", b"event: ", b"id: ", b": ", b"")))
    body = draw(st.sampled_from((b"x", b"\xff", b"\x00", b"\xef\xbf\xbd", "日".encode())))
    n = draw(st.integers(20, 700))
    end = draw(st.sampled_from((b"", *ENDINGS)))
    return field + body * n + end


@st.composite
def frame(draw: st.DrawFn) -> bytes:
    """One roughly well-formed frame with a mutated payload."""
    lines = []
    if draw(st.booleans()):
        lines.append(b"event: " + draw(st.sampled_from(EVENT_TYPES)))
    if draw(st.booleans()):
        lines.append(b"id: " + draw(st.binary(max_size=4)))
    payload = b"".join(draw(st.lists(atoms, max_size=6)))
    lines.append(b"data: " + payload)
    nl = draw(st.sampled_from((b"\n", b"\r", b"\r\n")))
    return nl.join(lines) + nl + nl


sse_streams = st.lists(
    st.one_of(atoms, atoms, frame(), huge_retry(), long_line()), max_size=40
).map(b"".join)

texts = st.text(
    st.characters(codec="utf-8", exclude_characters="\r\n"), max_size=8
) | st.sampled_from(["\ufffd", "a\ufffdb", "日本", "🙂", " ", ""])


@st.composite
def dialect_stream(draw: st.DrawFn) -> bytes:
    """A plausible stream of one dialect, U+FFFD (raw or escaped) in any field, then mutated.

    Runs of well-formed ``data:`` frames are what the framer's batch fast path takes whole;
    the property is that it reports and extracts exactly what frame-by-frame parsing does.
    """
    dialect = draw(st.sampled_from(["openai", "responses", "anthropic", "text"]))
    ascii_only = draw(st.booleans())
    frames: list[str] = []
    for _ in range(draw(st.integers(0, 8))):
        text, other = draw(texts), draw(texts)
        obj: object
        if dialect == "openai":
            obj = {
                "id": other,
                "object": "chat.completion.chunk",
                "choices": [
                    {"index": draw(st.sampled_from([0, 0, 1])), "delta": {"content": text}}
                ],
            }
        elif dialect == "responses":
            obj = {"type": "response.output_text.delta", "item_id": other, "delta": text}
        elif dialect == "anthropic":
            obj = {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": text},
                other: 1,
            }
        else:
            obj = None
        frames.append(text if obj is None else json.dumps(obj, ensure_ascii=ascii_only))
    if draw(st.booleans()):
        frames.append(
            {
                "openai": "[DONE]",
                "responses": '{"type":"response.completed"}',
                "anthropic": '{"type":"message_stop"}',
                "text": "[DONE]",
            }[dialect]
        )
    nl = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    wire = bytearray("".join(f"data: {f}{nl}{nl}" for f in frames).encode())
    for _ in range(draw(st.integers(0, 3))):
        at = draw(st.integers(0, len(wire)))
        wire[at:at] = draw(atoms)
    return bytes(wire)


limits = st.one_of(
    st.none(),
    st.builds(Limits, max_line=st.integers(1, 80), max_frame=st.integers(1, 200)),
)


def split_at(data: bytes, cuts: list[int]) -> list[bytes]:
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(data)}), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def key(res: Result) -> tuple[object, ...]:
    """What must not depend on where reads were cut (frame_ends may: a CR ending a read
    dispatches at once, before anyone knows a LF follows)."""
    return (res.events, res.alerts, res.text, res.dialect)


def check_invariants(data: bytes, res: Result) -> None:
    total = len(data)
    n_fffd_alerts = sum(a.count for a in res.alerts if isinstance(a, ReplacementChar))
    assert res.text.count(FFFD) <= n_fffd_alerts
    assert sum(e.data.count(FFFD) for e in res.events) <= n_fffd_alerts
    for alert in res.alerts:
        offset = getattr(alert, "byte_offset", 0)
        assert 0 <= offset <= total, alert
        if isinstance(alert, UnterminatedFrame):
            assert 0 < alert.pending_bytes <= total - offset, alert
    starts = [e.start for e in res.events]
    assert starts == sorted(starts)
    assert all(0 <= s < total for s in starts)
    assert [e.ordinal for e in res.events] == list(range(len(res.events)))
    assert all(0 < end <= total for end in res.frame_ends)
    assert list(res.frame_ends) == sorted(res.frame_ends)


def assert_cut_independent(
    data: bytes, cuts: list[int], dialect: str | None, **kw: object
) -> Result:
    whole = run([data], dialect, **kw)
    check_invariants(data, whole)
    pieces = split_at(data, cuts)
    split = run(pieces, dialect, **kw)
    assert key(split) == key(whole), f"pieces={pieces!r}"
    if len(data) <= 300:
        assert key(run(bytewise(data), dialect, **kw)) == key(whole), "bytewise"
    # The proxy's passthrough hot path builds no events and keeps only the text's length;
    # alerts, dialect and that length must not change.
    quiet = StreamReassembler(
        dialect,
        emit_events=False,
        frame_ends=False,
        keep_text=False,
        **kw,  # type: ignore[arg-type]
    )
    alerts: list[Alert] = []
    for piece in pieces:
        out = quiet.feed(piece)
        assert out.events == ()
        alerts += out.alerts
    alerts += quiet.close().alerts
    assert (tuple(alerts), quiet.dialect) == (whole.alerts, whole.dialect)
    assert quiet.summary()["text_length"] == len(whole.text)
    return whole


# -- properties -----------------------------------------------------------------------------


@HOSTILE
@given(
    data=st.binary(max_size=1500),
    dialect=st.sampled_from(DIALECTS),
    cuts=st.lists(st.integers(0, 1500), max_size=12),
)
def test_arbitrary_bytes_never_raise_and_never_depend_on_the_cut(
    data: bytes, dialect: str | None, cuts: list[int]
) -> None:
    assert_cut_independent(data, cuts, dialect)


@HOSTILE
@given(
    data=sse_streams,
    dialect=st.sampled_from(DIALECTS),
    lim=limits,
    cuts=st.lists(st.integers(0, 4000), max_size=16),
)
@example(data=b"}\r\n", dialect="text", lim=None, cuts=[2]).via("preview lost the LF of a CRLF")
@example(data=b"\xff\n\\\r", dialect=None, lim=None, cuts=[3]).via("preview doubled held bytes")
@example(data=b": c\r\n", dialect="text", lim=Limits(max_line=39, max_frame=4), cuts=[4]).via(
    "frame limit counted a 1-byte CR now, a 2-byte CRLF whole"
)
@example(
    data=b"9" * 34 + b": cdata\\ud8",
    dialect=None,
    lim=Limits(max_line=34, max_frame=108),
    cuts=[35],
).via("preview missed the skipped rest of an oversized line")
@example(
    data=b"9" * 100 + b": x\n", dialect=None, lim=Limits(max_line=34, max_frame=108), cuts=[35]
).via("a line over both limits: 'line' when cut, 'frame' whole")
def test_sse_shaped_mutations_never_raise_and_never_depend_on_the_cut(
    data: bytes, dialect: str | None, lim: Limits | None, cuts: list[int]
) -> None:
    kw = {} if lim is None else {"limits": lim}
    assert_cut_independent(data, cuts, dialect, **kw)


@HOSTILE
@given(
    data=dialect_stream(),
    dialect=st.sampled_from(DIALECTS),
    cuts=st.lists(st.integers(0, 2000), max_size=12),
)
@example(
    data=b'data: {"choices":[{"index":0,"delta":{"content":""}}],"id":"\xef\xbf\xbd"}\n\n' * 2,
    dialect="openai",
    cuts=[],
).via("a batch of chunks took an encoded U+FFFD outside the content unreported")
def test_dialect_shaped_streams_never_depend_on_the_cut(
    data: bytes, dialect: str | None, cuts: list[int]
) -> None:
    assert_cut_independent(data, cuts, dialect)


@HOSTILE
@given(
    data=sse_streams,
    hint=st.sampled_from(HINTS),
    cuts=st.lists(st.integers(0, 4000), max_size=8),
)
def test_detection_with_a_path_hint_never_depends_on_the_cut(
    data: bytes, hint: str, cuts: list[int]
) -> None:
    assert_cut_independent(data, cuts, None, hint=hint)


@settings(max_examples=60, deadline=None)
@given(data=sse_streams.filter(lambda d: len(d) <= 120), dialect=st.sampled_from(DIALECTS))
def test_every_two_way_cut_of_small_hostile_streams(data: bytes, dialect: str | None) -> None:
    whole = run([data], dialect, limits=Limits(max_line=24, max_frame=48))
    for cut, pieces in every_cut(data):
        split = run(pieces, dialect, limits=Limits(max_line=24, max_frame=48))
        assert key(split) == key(whole), f"cut at {cut}"


# -- regressions found by the properties above ------------------------------------------


def test_unterminated_preview_is_the_same_at_every_cut() -> None:
    """The held part of a line was added to the preview twice when its line completed."""
    data = b"id: 1\ndata: abc\ndata: x"
    whole = run([data])
    (alert,) = [a for a in whole.alerts if isinstance(a, UnterminatedFrame)]
    assert alert.preview == "id: 1\\ndata: abc\\ndata: x"
    for cut, pieces in every_cut(data):
        assert run(pieces).alerts == whole.alerts, f"cut at {cut}"


def test_line_over_both_limits_is_reported_as_a_line_at_every_cut() -> None:
    data = b"data: " + b"z" * 60 + b"\n\ndata: ok\n\n"
    lim = Limits(max_line=20, max_frame=30)
    whole = run([data], "text", limits=lim)
    oversized = [a for a in whole.alerts if isinstance(a, OversizedFrame)]
    assert [(a.kind, a.byte_offset) for a in oversized] == [("line", 0)]
    assert whole.text == "ok"
    for cut, pieces in every_cut(data):
        assert key(run(pieces, "text", limits=lim)) == key(whole), f"cut at {cut}"


def test_frame_limit_does_not_depend_on_a_crlf_cut_after_its_cr() -> None:
    data = b"data: abc\r\n\r\n"
    lim = Limits(max_line=100, max_frame=9)
    whole = run([data], "text", limits=lim)
    assert whole.text == "abc"  # 9 bytes up to the line's end: within the limit
    for cut, pieces in every_cut(data):
        assert key(run(pieces, "text", limits=lim)) == key(whole), f"cut at {cut}"


def test_encoded_fffd_outside_the_content_is_reported_in_a_batch_of_chunks() -> None:
    """A run of plain chat chunks goes to the dialect whole; an encoded U+FFFD in another
    field (here the id) was reported frame by frame and must be in a batch too."""
    frame = b'data: {"id":"\xef\xbf\xbd","choices":[{"index":0,"delta":{"content":"a"}}]}\n\n'
    data = b"data:{}\n\n" + frame * 3
    whole = run([data], "openai")
    literals = [a for a in whole.alerts if a.name == "sse.replacement_char"]
    assert len(literals) == 3
    assert whole.text == "aaa"
    for cut, pieces in every_cut(data):
        assert key(run(pieces, "openai")) == key(whole), f"cut at {cut}"


def test_text_length_counts_only_the_text_choice_when_the_text_is_not_kept() -> None:
    """With n=2 choices the text is choice 0's; the proxy's count covered every choice."""
    data = (
        b'data: {"choices":[{"index":0,"delta":{"content":"ab"}},'
        b'{"index":1,"delta":{"content":"xyz"}}]}\n\ndata: [DONE]\n\n'
    )
    for keep_text in (True, False):
        r = StreamReassembler("openai", keep_text=keep_text)
        r.feed(data)
        r.close()
        assert r.summary()["text_length"] == 2, f"keep_text={keep_text}"


@pytest.mark.parametrize(
    ("dialect", "payload"),
    [
        ("openai", '{"error": {"message": DEEP}}'),
        (None, '{"type": "error", "error": {"type": DEEP}}'),
        ("openai", '{"choices": [{"delta": {}, "finish_reason": DEEP}]}'),
        ("openai", '{"choices": [{"delta": {"tool_calls": [{"id": DEEP}]}}]}'),
        ("openai", '{"choices": [{"delta": {"tool_calls": [{"function": {"name": DEEP}}]}}]}'),
        ("anthropic", '{"type": "message_delta", "delta": {"stop_reason": DEEP}}'),
        ("anthropic", '{"type": "content_block_start", "content_block": {"type": DEEP}}'),
        ("responses", '{"type": "response.completed", "response": {"status": DEEP}}'),
        ("responses", '{"type": "response.function_call_arguments.delta", "item_id": DEEP}'),
        ("responses", '{"type": [1]}'),
        ("responses", '{"type": {"a": 1}}'),
        ("anthropic", '{"type": [1], "index": [2]}'),
    ],
)
def test_json_values_of_any_shape_and_depth_never_raise(dialect: str | None, payload: str) -> None:
    """``str()`` of a JSON array 1000 deep raises RecursionError; a list is unhashable."""
    deep = "[" * 1000 + "]" * 1000
    data = f"event: error\ndata: {payload.replace('DEEP', deep)}\n\n".encode()
    res = run([data], dialect)
    check_invariants(data, res)


# -- memory and time ----------------------------------------------------------------------


@dataclass
class Fed:
    names: Counter[str]
    oversized: list[str]
    fffd_alerts: int
    peak: int
    seconds: float


def _feed_measured(r: StreamReassembler, data: bytes, piece: int) -> Fed:
    """Feed ``data`` in ``piece``-byte reads under tracemalloc; keep only alert counts."""
    names: Counter[str] = Counter()
    oversized: list[str] = []
    view = memoryview(data)

    def take(out: Output) -> None:
        for alert in out.alerts:
            names[alert.name] += alert.count if isinstance(alert, ReplacementChar) else 1
            if isinstance(alert, OversizedFrame):
                oversized.append(alert.kind)

    tracemalloc.start()
    started = time.perf_counter()
    try:
        for i in range(0, len(data), piece):
            take(r.feed(bytes(view[i : i + piece])))
        take(r.close())
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    seconds = time.perf_counter() - started
    return Fed(names, oversized, names["sse.replacement_char"], peak, seconds)


@pytest.mark.parametrize("dialect", DIALECTS)
def test_five_megabyte_line_without_newline_keeps_memory_bounded(dialect: str | None) -> None:
    data = b"data: " + b"x" * (5 * MIB)
    r = StreamReassembler(dialect)
    fed = _feed_measured(r, data, 4096)
    print(
        f"5 MB line, 4 KiB reads, dialect={dialect}: "
        f"peak {fed.peak / MIB:.2f} MiB, {fed.seconds:.2f} s"
    )
    assert fed.oversized == ["line"]
    assert fed.names["sse.unterminated_frame"] == 1
    assert fed.peak < 3 * MIB
    assert r.summary()["bytes"] == len(data)


def test_five_megabyte_frame_of_short_lines_keeps_memory_bounded() -> None:
    """No single line is long: the frame limit is what must bound the data lines kept."""
    data = b"data: " + b"y" * 90 + b"\n"
    data = data * (5 * MIB // len(data))
    r = StreamReassembler("text")
    fed = _feed_measured(r, data, 4096)
    print(f"5 MB frame of short lines: peak {fed.peak / MIB:.2f} MiB, {fed.seconds:.2f} s")
    assert fed.oversized == ["frame"]
    assert fed.peak < 3 * MIB
    assert r.text == ""


@pytest.mark.parametrize("piece", [64, 4096, 5 * MIB + 16])
def test_five_megabyte_line_is_not_quadratic(piece: int) -> None:
    """Held pieces are joined once, when the line ends; this only has to finish."""
    data = b"data: " + "é".encode() * (5 * MIB // 2) + b"\n\n"
    r = StreamReassembler("text", limits=Limits(max_line=8 * MIB, max_frame=8 * MIB))
    started = time.perf_counter()
    for i in range(0, len(data), piece):
        r.feed(data[i : i + piece])
    r.close()
    print(f"5 MB line kept whole, {piece} B reads: {time.perf_counter() - started:.2f} s")
    assert len(r.text) == 5 * MIB // 2


@pytest.mark.parametrize(
    "unit", [b"\x00", b"\xff", b"\xed\xa0\x80", b"\xef\xbf\xbd", b"\xf0\x9f\x99"]
)
def test_megabyte_floods_without_line_feeds_hold_no_more_than_a_line(unit: bytes) -> None:
    data = unit * (MIB // len(unit))
    r = StreamReassembler(emit_events=False)
    fed = _feed_measured(r, data, 65536)
    assert fed.peak < 3 * MIB
    assert r.summary()["bytes"] == len(data)
    assert r.summary()["alerts"] == dict(fed.names)
    assert r.text.count(FFFD) <= fed.fffd_alerts


@pytest.mark.parametrize(
    "unit",
    [b"\r", b"\n", b"\r\n", b"\n\r", b"data: \xc0\xaf\n", b": c\r\n", b"data: x\n\n", b"\r\x00"],
)
def test_megabyte_floods_of_short_lines_complete_in_linear_time(unit: bytes) -> None:
    """A million blank lines, or invalid bytes on every line: alerts are data, not a crash."""
    data = unit * (MIB // len(unit))
    r = StreamReassembler(emit_events=False)
    names: Counter[str] = Counter()
    for i in range(0, len(data), 65536):
        names.update(a.name for a in r.feed(data[i : i + 65536]).alerts)
    names.update(a.name for a in r.close().alerts)
    assert r.summary()["alerts"] == dict(names)
    assert r.text.count(FFFD) <= names["sse.replacement_char"]


def test_a_frame_of_tiny_data_lines_is_bounded_by_max_frame() -> None:
    """Decoded data lines cost more than their bytes (a str per line, ~7x for 2-character
    lines), so the memory a frame may hold is a small multiple of ``max_frame``."""
    data = b"data: xy\n" * (MIB // 9)
    r = StreamReassembler("text", limits=Limits(max_frame=64 * 1024))
    fed = _feed_measured(r, data, 65536)
    print(f"1 MB of 9-byte data lines, max_frame 64 KiB: peak {fed.peak / MIB:.2f} MiB")
    assert fed.oversized == ["frame"]
    assert fed.peak < 2 * MIB
