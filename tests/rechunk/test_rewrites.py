"""Rewrites change bytes but never events: checked with the reference parser and the core.

The reference parser is the suite's one oracle, :mod:`tests.support.oracle`: a literal reading of
the WHATWG "interpreting an event stream" rules, independent of the core on purpose: two
parsers agreeing is the evidence.
"""

from __future__ import annotations

import itertools
import random
import re
from collections.abc import Iterable, Sequence

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sse_proxy.core import StreamReassembler
from sse_proxy.errors import ChaosSpecError
from sse_proxy.rechunk.rewrites import BOM, apply_rewrites, is_complete_frame, rewrite_frame
from sse_proxy.rechunk.spec import LINE_ENDING_REWRITES, REWRITES
from tests.support import oracle

Event = tuple[str, str, "str | None", "int | None"]  # type, data, last event id, retry

_LINE = re.compile(rb"\r\n|\r|\n")
MESSAGE = "café 🙂 日本語 naïve"


def parse(stream: bytes) -> list[Event]:
    """WHATWG event-stream parsing: (type, data, lastEventId, this block's retry) per event."""
    return [(e.type, e.data, e.id, e.retry) for e in oracle.parse(stream).events]


def frame_ends(stream: bytes, *, split_crlf: bool = False) -> list[int]:
    """Offsets just after each blank line; ``split_crlf`` ends a CRLF blank line after its
    CR, as a reassembler does when a read ends there (the LF then starts the next frame)."""
    parsed = oracle.parse(stream)
    crlf = set(parsed.crlf_frame_ends) if split_crlf else set()
    return [e - 1 if e in crlf else e for e in parsed.frame_ends]


def rewrite_stream(
    names: Iterable[str], stream: bytes, seed: int, *, split_crlf: bool = False
) -> bytes:
    """Rewrite every complete frame as the planner would; the partial tail stays as it is."""
    names = tuple(names)
    rng = random.Random(seed)
    out: list[bytes] = []
    prev = 0
    for end in frame_ends(stream, split_crlf=split_crlf):
        frame = stream[prev:end]
        try:
            out.append(apply_rewrites(names, frame, rng, first=prev == 0))
        except ValueError:
            out.append(frame)  # only the lone LF of a split CRLF gets here
        prev = end
    out.append(stream[prev:])
    return b"".join(out)


def core_view(stream: bytes) -> tuple[list[Event], list[str]]:
    """Events and alert names (minus line-ending notes) from the core."""
    r = StreamReassembler(dialect="none")
    out = r.feed(stream)
    out2 = r.close()
    events = [(e.type, e.data, e.id, e.retry) for e in out.events + out2.events]
    alerts = sorted(a.name for a in out.alerts + out2.alerts if a.name != "sse.crlf_framing")
    return events, alerts


def _frames(nl: str) -> str:
    return (
        f"id: 1{nl}data: {MESSAGE}{nl}{nl}"
        f"event: delta{nl}data:  two leading spaces{nl}data:tight{nl}data{nl}data:{nl}{nl}"
        f": a comment{nl}event: ping{nl}{nl}"
        f"retry: 1500{nl}data: with retry{nl}{nl}"
        f"retry: 15x{nl}id{nl}data: id reset, bad retry{nl}{nl}"
        f"id: a\0b{nl}data: NUL id ignored{nl}{nl}"
        f"id:  spaced{nl}data{nl}{nl}"
        f"data: [DONE]{nl}{nl}"
    )


STREAMS: dict[str, bytes] = {
    "lf": _frames("\n").encode(),
    "crlf": _frames("\r\n").encode(),
    "cr": _frames("\r").encode(),
    "mixed": b"data: a\r\ndata: b\rdata: c\n\r\nid: 7\r\r\ndata: d\n\r",
    "bom": BOM + _frames("\n").encode(),
    "bom_cr": BOM + _frames("\r").encode(),
    "double_bom": BOM + BOM + b"data: lost field\n\ndata: kept\n\n",
    "late_bom": b"data: a\n\n" + BOM + b"data: unknown field\n\ndata: b\n\n",
    "leading_blanks": b"\n\r\n\rdata: after blanks\n\n",
    "bom_then_blank": BOM + b"\r\n\ndata: x\n\n",
    "blank_runs": b"data: a\n\n\n\n\r\rdata: b\r\n\r\n\r\n",
    "dataless": b"event: only\n\nid: 5\n\nretry: 10\n\n: c\n\ndata: y\n\n",
    "bad_utf8": b"data: \xe6\x97\ndata: \xff\xfe x\n\ndata: \xf0\x9f\x99\r\n\r\n",
    "fffd_literal": "data: \ufffd\n\n".encode(),
    "unterminated": b"data: a\n\ndata: tail without end\n",
    "unterminated_cr": b"data: a\r\n\r\ndata: tail\r",
    "field_names_in_values": b"data: data: id: 3\nevent:event\n\n",
    "empty": b"",
    "only_partial": b"data: never ends",
    "only_blank": b"\n",
}

COMBOS: list[tuple[str, ...]] = [(name,) for name in REWRITES]
STRUCTURAL = tuple(n for n in REWRITES if n not in LINE_ENDING_REWRITES)
COMBOS += [(*STRUCTURAL, nl) for nl in sorted(LINE_ENDING_REWRITES)]
COMBOS += [STRUCTURAL, ("bom", "crlf"), ("nospace", "cr"), ("dataless", "mixed_newlines")]


def test_reference_parser_negative_controls() -> None:
    """The reference parser tells apart exactly the bytes a bad rewrite would produce."""
    base = parse(b"data: x\n\n")
    assert base == [("message", "x", None, None)]
    assert parse(BOM + b"data: x\n\n") == base
    assert parse(BOM + BOM + b"data: x\n\n") == []  # a second BOM is part of the field name
    assert parse(b"data:  x\n\n") != base  # only one space is optional
    assert parse(b"data: x\r\n") == []  # the CRLF is one line ending, not a blank line
    assert parse(b"data: x\r\r") == base
    assert parse(b"id: 1\n\ndata: x\n\n") == [("message", "x", "1", None)]
    assert parse(b"data: x\n") == []  # unterminated frame: discarded
    assert parse(b"retry: 5\ndata: x\n\ndata: y\n\n")[1][3] is None


def test_reference_parser_agrees_with_core_on_the_corpus() -> None:
    for name, stream in STREAMS.items():
        assert core_view(stream)[0] == parse(stream), name


def test_frame_ends_agree_with_core() -> None:
    """The splitter used here must report what the core reports, or the test proves little."""
    for name, stream in STREAMS.items():
        r = StreamReassembler(dialect="none")
        ends = list(r.feed(stream).frame_ends) + list(r.close().frame_ends)
        assert ends == frame_ends(stream), name


@pytest.mark.parametrize("names", COMBOS, ids="+".join)
def test_rewrites_keep_events_for_every_stream_and_seed(names: tuple[str, ...]) -> None:
    for (label, stream), seed, split in itertools.product(STREAMS.items(), range(8), (0, 1)):
        out = rewrite_stream(names, stream, seed, split_crlf=bool(split))
        where = f"{'+'.join(names)} on {label!r}, seed {seed}, split_crlf {split}"
        assert parse(out) == parse(stream), f"{where}: {out!r}"
        before, after = core_view(stream), core_view(out)
        if before is not None and after is not None:
            assert after == before, f"{where} (core): {out!r}"


@pytest.mark.parametrize("names", COMBOS, ids="+".join)
def test_rewrites_are_reproducible_per_seed(names: tuple[str, ...]) -> None:
    stream = STREAMS["lf"]
    for seed in range(10):
        a = rewrite_stream(names, stream, seed)
        assert a == rewrite_stream(names, stream, seed), f"seed {seed}"


def test_rewrites_really_change_the_bytes() -> None:
    """Each rewrite must do something to a plain LF stream, or it tests nothing."""
    stream = STREAMS["lf"]
    for name in REWRITES:
        assert rewrite_stream((name,), stream, 0) != stream, name


def test_crlf_and_cr_rewrite_every_line_ending() -> None:
    for label, stream in STREAMS.items():
        crlf = rewrite_stream(("crlf",), stream, 0)
        body = crlf[: len(crlf) - len(_tail(stream))]
        assert re.search(rb"\r(?!\n)|(?<!\r)\n", body) is None, label
        cr = rewrite_stream(("cr",), stream, 0)
        body = cr[: len(cr) - len(_tail(stream))]
        assert b"\n" not in body, label


def _tail(stream: bytes) -> bytes:
    ends = frame_ends(stream)
    return stream[ends[-1] :] if ends else stream


def test_mixed_newlines_really_mixes() -> None:
    out = rewrite_stream(("mixed_newlines",), STREAMS["lf"] * 3, 1)
    kinds = {m.group() for m in _LINE.finditer(out)}
    assert kinds == {b"\n", b"\r", b"\r\n"}


def test_mixed_newlines_never_lets_cr_swallow_a_blank_line() -> None:
    """A CR then an empty line ending in LF would read as one CRLF: a lost blank line."""
    frame = b"data: x\n\n\n\n"
    for seed in range(300):
        out = apply_rewrites(
            ("mixed_newlines", "blank_lines"), frame, random.Random(seed), first=True
        )
        assert parse(out) == [("message", "x", None, None)], f"seed {seed}: {out!r}"


def test_bom_only_on_the_first_frame_and_never_twice() -> None:
    rng = random.Random(0)
    assert rewrite_frame("bom", b"data: x\n\n", rng, first=True) == BOM + b"data: x\n\n"
    assert rewrite_frame("bom", b"data: x\n\n", rng, first=False) == b"data: x\n\n"
    assert rewrite_frame("bom", BOM + b"data: x\n\n", rng, first=True) == BOM + b"data: x\n\n"
    out = rewrite_stream(("bom",), STREAMS["lf"], 0)
    assert out.startswith(BOM)
    assert out.count(BOM) == 1


def test_existing_bom_stays_in_front_of_inserted_blocks() -> None:
    rng = random.Random(3)
    out = apply_rewrites((*STRUCTURAL, "cr"), BOM + b"id: 9\ndata: x\n\n", rng, first=True)
    assert out.startswith((BOM + b":", BOM + b"retry"))
    assert out.count(BOM) == 1
    assert parse(out) == [("message", "x", "9", None)]


def test_keepalive_inserts_comment_blocks() -> None:
    out = rewrite_frame("keepalive", b"data: x\r\n\r\n", random.Random(0), first=False)
    assert out == b": keep-alive\r\n\r\ndata: x\r\n\r\n"


def test_dataless_inserts_retry_event_comment_and_id_echo_blocks() -> None:
    out = rewrite_frame("dataless", b"id: 42\ndata: x\n\n", random.Random(0), first=False)
    blocks = set(out.split(b"\n\n"))
    assert {b"retry: 3000", b"event: ping", b"id: 42"} <= blocks, out
    assert out.endswith(b"id: 42\n\n")
    # no id in the frame: no id block (it would change lastEventId)
    out = rewrite_frame("dataless", b"data: x\n\n", random.Random(0), first=False)
    assert b"id:" not in out
    # an id with NUL is ignored by parsers, so it is not repeated either
    out = rewrite_frame("dataless", b"id: a\0\ndata: x\n\n", random.Random(0), first=False)
    assert not out.endswith(b"id: a\0\n\n")
    # an id that decodes to U+FFFD is not repeated: it would add a replacement-char alert
    for bad in (b"\xe6\x97", "\ufffd".encode()):
        out = rewrite_frame("dataless", b"id:" + bad + b"\n\n", random.Random(0), first=False)
        assert out.count(bad) == 1, bad


def test_blank_lines_adds_one_or_two() -> None:
    seen = set()
    for seed in range(30):
        out = rewrite_frame("blank_lines", b"data: x\r\r", random.Random(seed), first=False)
        assert out in (b"data: x\r\r\r", b"data: x\r\r\r\r"), f"seed {seed}"
        seen.add(out)
    assert len(seen) == 2


@pytest.mark.parametrize(
    ("line", "expected"),
    [
        (b"data: x", b"data:x"),
        (b"data:  x", b"data:  x"),
        (b"data: ", b"data:"),
        (b"data:x", b"data:x"),
        (b"data", b"data"),
        (b"event: y", b"event: y"),
        (b"data: \xc3\xa9", b"data:\xc3\xa9"),
    ],
)
def test_nospace(line: bytes, expected: bytes) -> None:
    out = rewrite_frame("nospace", line + b"\nid: 1\n\n", random.Random(0), first=False)
    assert out == expected + b"\nid: 1\n\n"


def test_leading_blank_lines_are_dropped() -> None:
    """They are no-ops, and an LF at the start could merge with a CR before it."""
    for name in REWRITES:
        out = rewrite_frame(name, b"\n\r\ndata: x\n\n", random.Random(0), first=False)
        assert not out.startswith((b"\n", b"\r")), name
        out = rewrite_frame(name, b"\n", random.Random(0), first=False)
        assert out == b"", name


def test_leading_blank_lines_of_the_first_frame_are_kept() -> None:
    """Else a U+FEFF after them would become the stream's BOM and be stripped."""
    stream = b"\r\r" + BOM + b"data: x\n\n"
    assert parse(stream) == []
    for name in REWRITES:
        assert rewrite_frame(name, b"\r", random.Random(0), first=True) != b"", name
        for seed in range(5):
            out = rewrite_stream((name,), stream, seed)
            assert parse(out) == [], f"{name} seed {seed}: {out!r}"


@pytest.mark.parametrize("frame", [b"data: x\n", b"data: x", b"data: x\n\ndata: y", b""])
def test_incomplete_frames_are_refused(frame: bytes) -> None:
    assert not is_complete_frame(frame)
    with pytest.raises(ValueError, match="complete frames"):
        rewrite_frame("crlf", frame, random.Random(0), first=False)


def test_complete_frame_detection() -> None:
    for frame in (b"data: x\n\n", b"data: x\r\r", b"data: x\r\n\r\n", b"\n", b"a\n\nb\n\n"):
        assert is_complete_frame(frame), frame


@pytest.mark.parametrize("name", ["bytewise", "nope", ""])
def test_unknown_rewrite_names_are_rejected(name: str) -> None:
    with pytest.raises(ChaosSpecError, match="unknown rewrite"):
        rewrite_frame(name, b"data: x\n\n", random.Random(0), first=False)


def test_order_given_does_not_matter() -> None:
    frame = b"id: 1\ndata: x\n\n"
    for names in itertools.permutations(("nospace", "dataless", "crlf", "bom")):
        out = apply_rewrites(names, frame, random.Random(5), first=True)
        ref = apply_rewrites(sorted(names), frame, random.Random(5), first=True)
        assert out == ref, names


TOKENS: Sequence[bytes] = (
    b"data",
    b"data:",
    b"data: ",
    b"id:",
    b"id: ",
    b"id",
    b"event:",
    b"event: ",
    b"retry:",
    b"retry: 7",
    b":",
    b" ",
    b"  ",
    b"x",
    b"[DONE]",
    b"\r",
    b"\n",
    b"\r\n",
    b"\n\n",
    b"\r\n\r\n",
    b"\r\r",
    "é".encode(),
    "🙂".encode(),
    "日".encode(),
    b"\xe6\x97",
    b"\xff",
    b"\x00",
    BOM,
)
VALID_COMBOS = [
    c
    for r in range(1, 4)
    for c in itertools.combinations(REWRITES, r)
    if len(set(c) & LINE_ENDING_REWRITES) <= 1
]


@settings(max_examples=200, deadline=None)
@given(
    pieces=st.lists(st.sampled_from(TOKENS), max_size=40),
    names=st.sampled_from(VALID_COMBOS),
    seed=st.integers(0, 2**32 - 1),
    split=st.booleans(),
)
def test_rewrites_keep_events_on_arbitrary_streams(
    pieces: list[bytes], names: tuple[str, ...], seed: int, split: bool
) -> None:
    stream = b"".join(pieces)
    out = rewrite_stream(names, stream, seed, split_crlf=split)
    assert parse(out) == parse(stream), f"{names} seed {seed}: {stream!r} -> {out!r}"
    before, after = core_view(stream), core_view(out)
    if before is not None and after is not None:
        assert after == before, f"{names} seed {seed} (core): {stream!r} -> {out!r}"
