"""Which write boundaries carry a cut (``Write.cut``): the ones where a cut matters.

The oracle here is written per byte, plainly, on the whole stream; the planner and
:func:`sensitive_positions` see it in seeded random chunks and must agree with it.
"""

from __future__ import annotations

import random

import pytest

from sse_proxy.rechunk.planner import ChaosPlanner, FramesPlanner, PassthroughPlanner, Write
from sse_proxy.rechunk.sensitive import sensitive_positions
from sse_proxy.rechunk.spec import ChaosSpec
from sse_proxy.tools import fixtures
from tests.rechunk.test_planner import STREAM, chunked, drive_with_core

CRLF_STREAM = STREAM.replace(b"\n", b"\r\n")
TEXT = fixtures.clean_stream("text")


def oracle(stream: bytes) -> set[int]:
    """Boundary offsets (before byte p) where a cut matters, from the whole stream."""
    out: set[int] = set()
    line_start = 0
    prev_ending_end = -1
    i = 0
    while i < len(stream):
        b = stream[i]
        if 0x80 <= b <= 0xBF and i and stream[i - 1] >= 0x80:
            out.add(i)  # inside a multi-byte character
        if b in (0x0D, 0x0A):
            end = i + (2 if stream[i : i + 2] == b"\r\n" else 1)
            if end - i == 2:
                out.add(i + 1)  # between CR and LF
            if i == prev_ending_end:  # a line ending right after one: a blank line
                out.update((i, end))
            prev_ending_end = end
            i = end
            line_start = end
            continue
        if i == line_start:
            body = stream[i:]
            for name in (b"data:", b"event:", b"id:", b"retry:"):
                if body.startswith(name):
                    out.update(range(i + 1, i + len(name) + 1))
        i += 1
    return {p for p in out if 0 < p < len(stream)}


def sensitive_in_chunks(stream: bytes, chunks: list[bytes]) -> set[int]:
    found: set[int] = set()
    at = 0
    for chunk in chunks:
        found.update(at + p for p in sensitive_positions(stream[:at], chunk))
        at += len(chunk)
    return {p for p in found if p}


@pytest.mark.parametrize("stream", [STREAM, CRLF_STREAM, TEXT], ids=["lf", "crlf", "text"])
@pytest.mark.parametrize("seed", range(8))
def test_sensitive_positions_agree_with_the_per_byte_oracle_at_any_chunking(
    stream: bytes, seed: int
) -> None:
    chunks = chunked(stream, seed, 1 + seed * 7)
    assert sensitive_in_chunks(stream, chunks) == oracle(stream), f"seed {seed}"


def test_a_character_cut_by_the_chunking_is_judged_with_the_bytes_before() -> None:
    fox = "🦊".encode()
    assert sensitive_positions(b"data: " + fox[:1], fox[1:] + b"\n") >= {0, 1, 2}
    assert 0 not in sensitive_positions(b"data: ab", b"cd\n")
    assert 0 in sensitive_positions(b"data: x\r", b"\n\n")  # between CR and LF
    assert 0 in sensitive_positions(b"data: x\n\n", b"data: y")  # a frame end
    assert 0 not in sensitive_positions(b"", b"data: y")  # the stream's first byte


def cut_offsets(writes: list[Write]) -> list[int]:
    at = 0
    out = []
    for w in writes:
        if w.cut:
            out.append(at)
        at += len(w.data)
    return out


@pytest.mark.parametrize("seed", range(6))
def test_bytewise_carries_a_cut_exactly_where_one_matters(seed: int) -> None:
    writes = drive_with_core(ChaosPlanner(ChaosSpec(("bytewise",), seed)), chunked(STREAM, seed, 9))
    assert len(writes) == len(STREAM)
    assert set(cut_offsets(writes)) == oracle(STREAM), f"seed {seed}"


@pytest.mark.parametrize("seed", range(6))
def test_utf8_cuts_every_multibyte_character_and_marks_it(seed: int) -> None:
    """Each multi-byte character has a marked boundary inside it, whether the strategy cut
    it or the chunking did; every marked boundary is one where a cut matters."""
    chunks = chunked(STREAM, seed, 3 + seed * 5)
    writes = drive_with_core(ChaosPlanner(ChaosSpec(("utf8",), seed)), chunks)
    marked = set(cut_offsets(writes))
    assert marked <= oracle(STREAM)
    text = STREAM.decode()
    at = 0
    for ch in text:
        n = len(ch.encode())
        if n > 1:
            assert marked & set(range(at + 1, at + n)), (seed, ch, at)
        at += n


def test_random_marks_only_the_cuts_that_matter_and_jitters_only_those() -> None:
    for seed in range(10):
        planner = ChaosPlanner(ChaosSpec(("random",), seed, delay_ms=4.0))
        writes = drive_with_core(planner, chunked(STREAM, seed, 6))
        assert set(cut_offsets(writes)) <= oracle(STREAM)
        assert all(w.delay == 0 for w in writes if not w.cut)
        assert all(0 <= w.delay <= 0.004 for w in writes if w.cut)
        assert planner.cuts == sum(w.cut for w in writes)


@pytest.mark.parametrize("strategy", ["crlf", "coalesce", "bom+keepalive"])
def test_whole_frame_writes_carry_no_cut(strategy: str) -> None:
    spec = ChaosSpec.from_options(strategy, 3, delay_ms=5)
    writes = drive_with_core(ChaosPlanner(spec), chunked(STREAM, 3, 5))
    assert not any(w.cut for w in writes)
    assert all(w.delay == 0 for w in writes)


def test_passthrough_and_frames_carry_no_cut() -> None:
    assert not any(w.cut for w in drive_with_core(PassthroughPlanner(), chunked(STREAM, 1, 5)))
    assert not any(w.cut for w in drive_with_core(FramesPlanner(), chunked(STREAM, 1, 5)))


@pytest.mark.parametrize("seed", range(5))
def test_a_cut_at_n_is_made_and_marked_exactly_there_at_any_chunking(seed: int) -> None:
    rng = random.Random(seed)
    for _ in range(20):
        n = rng.randrange(1, len(STREAM))
        spec = ChaosSpec.from_options(f"cut:{n}", seed)
        writes = drive_with_core(ChaosPlanner(spec), chunked(STREAM, seed, 1 + seed))
        assert b"".join(w.data for w in writes) == STREAM
        assert cut_offsets(writes) == [n], (seed, n)


def test_cut_items_combine_with_strategies_and_render_back() -> None:
    spec = ChaosSpec.from_options("crlf+cut:90+cut:40", 1)
    assert (spec.strategies, spec.at) == (("crlf",), (40, 90))
    assert spec.strategy == "crlf+cut:40+cut:90"
    assert ChaosSpec.from_options(spec.strategy, 1) == spec
