"""Cut points: sorted, unique, strictly inside, reproducible per seed, and where promised."""

from __future__ import annotations

import random
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sse_proxy.errors import ChaosSpecError
from sse_proxy.rechunk.spec import REWRITES, STRATEGIES
from sse_proxy.rechunk.strategies import combined_cut_points, cut_points, split_at

MESSAGE = "café 🙂 日本語 naïve"
SEEDS = range(40)


def sse(text: str, nl: str = "\n") -> bytes:
    """An OpenAI-ish stream of three frames carrying ``text``, with ``nl`` line endings."""
    frames = [f"id: 1{nl}data: {text}{nl}{nl}", f"event: delta{nl}data: {text}{nl}{nl}"]
    frames.append(f"data: [DONE]{nl}{nl}")
    return "".join(frames).encode()


SAMPLES: list[bytes] = [
    b"",
    b"x",
    b"ab",
    MESSAGE.encode(),
    sse(MESSAGE),
    sse(MESSAGE, "\r\n"),
    sse(MESSAGE, "\r"),
    bytes(range(256)),
    b"\xe6\x97\xa5\xe6\x97\x80\x80\x80\xf0\x9f\x99\x82\xf0\x9f\xc3",  # odd continuation runs
]


def char_spans(text: str) -> list[tuple[int, int]]:
    """Byte spans of every multi-byte character of ``text`` in its UTF-8 encoding."""
    spans: list[tuple[int, int]] = []
    offset = 0
    for ch in text:
        width = len(ch.encode())
        if width > 1:
            spans.append((offset, offset + width))
        offset += width
    return spans


def test_fixture_has_two_three_and_four_byte_characters() -> None:
    """Without all widths the utf8 checks below would be vacuous."""
    assert {len(ch.encode()) for ch in MESSAGE} >= {1, 2, 3, 4}


@pytest.mark.parametrize("strategy", STRATEGIES)
def test_cuts_are_sorted_unique_inside_and_reproducible(strategy: str) -> None:
    for data in SAMPLES:
        for seed in SEEDS:
            cuts = cut_points(strategy, data, random.Random(seed), k=5)
            assert cuts == sorted(set(cuts)), (strategy, seed, data)
            assert all(0 < c < len(data) for c in cuts), (strategy, seed, data)
            again = cut_points(strategy, data, random.Random(seed), k=5)
            assert again == cuts, f"{strategy} not reproducible for seed {seed}"


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(max_size=200),
    seed=st.integers(0, 2**32 - 1),
    k=st.integers(0, 10),
    strategy=st.sampled_from(STRATEGIES),
    ends=st.lists(st.integers(-5, 210), max_size=5),
)
def test_cut_invariants_over_arbitrary_bytes(
    data: bytes, seed: int, k: int, strategy: str, ends: list[int]
) -> None:
    cuts = cut_points(strategy, data, random.Random(seed), k=k, frame_ends=ends)
    assert cuts == sorted(set(cuts)), seed
    assert all(0 < c < len(data) for c in cuts), seed
    assert cuts == cut_points(strategy, data, random.Random(seed), k=k, frame_ends=ends), seed
    assert b"".join(split_at(data, cuts)) == data


def test_bytewise_cuts_every_offset() -> None:
    for data in SAMPLES:
        assert cut_points("bytewise", data, random.Random(0), k=0) == list(range(1, len(data)))


def test_coalesce_never_cuts() -> None:
    for data in SAMPLES:
        assert cut_points("coalesce", data, random.Random(0), k=9) == []


def test_utf8_cuts_once_inside_every_multibyte_character() -> None:
    for text in (MESSAGE, MESSAGE * 3, f"data: {MESSAGE}\n\n", "ascii only"):
        data = text.encode()
        spans = char_spans(text)
        for seed in SEEDS:
            cuts = cut_points("utf8", data, random.Random(seed), k=0)
            assert len(cuts) == len(spans), f"seed {seed}: {cuts} vs {spans}"
            for (start, end), cut in zip(spans, cuts, strict=True):
                assert start < cut < end, f"seed {seed}: cut {cut} not inside {start}..{end}"


def test_utf8_visits_every_interior_position_across_seeds() -> None:
    """The position inside a character is drawn, so over seeds each interior cut occurs."""
    data = "🙂".encode()
    seen = {cut_points("utf8", data, random.Random(seed), k=0)[0] for seed in range(200)}
    assert seen == {1, 2, 3}


@settings(max_examples=200, deadline=None)
@given(text=st.text(max_size=80), seed=st.integers(0, 2**32 - 1))
def test_utf8_hits_every_character_of_any_text(text: str, seed: int) -> None:
    data = text.encode("utf-8", "surrogatepass")
    spans = char_spans(text)
    cuts = cut_points("utf8", data, random.Random(seed), k=0)
    assert len(cuts) == len(spans), seed
    for (start, end), cut in zip(spans, cuts, strict=True):
        assert start < cut < end, f"seed {seed}"


def test_utf8_on_broken_bytes_only_cuts_inside_lead_plus_continuation_runs() -> None:
    data = b"a\x80\x80b\xc3\xa9\xa9\xe6\x97\xf0\x9f\x99\x82\x82\xff"
    runs = [m.span() for m in re.finditer(rb"[\xc0-\xff][\x80-\xbf]+", data)]
    for seed in SEEDS:
        for cut in cut_points("utf8", data, random.Random(seed), k=0):
            assert any(a < cut < b for a, b in runs), f"seed {seed}: stray cut {cut}"


@pytest.mark.parametrize("nl", ["\n", "\r\n", "\r"])
def test_boundaries_cut_before_and_after_every_blank_line(nl: str) -> None:
    data = sse(MESSAGE, nl)
    enc = nl.encode()
    blank = enc + enc
    expected: set[int] = set()
    for m in re.finditer(re.escape(blank), data):
        expected.update((m.start() + len(enc), m.end()))
    expected.discard(len(data))
    assert len(expected) >= 3
    for seed in SEEDS:
        cuts = set(cut_points("boundaries", data, random.Random(seed), k=0))
        assert expected <= cuts, f"seed {seed}, nl {nl!r}: missing {sorted(expected - cuts)}"


def test_boundaries_cut_between_every_cr_and_lf() -> None:
    data = sse(MESSAGE, "\r\n")
    between = {m.start() + 1 for m in re.finditer(rb"\r\n", data)}
    assert len(between) == 8
    for seed in SEEDS:
        cuts = set(cut_points("boundaries", data, random.Random(seed), k=0))
        assert between <= cuts, f"seed {seed}: missing {sorted(between - cuts)}"


@pytest.mark.parametrize("nl", ["\n", "\r\n", "\r"])
def test_boundaries_cut_inside_every_field_prefix(nl: str) -> None:
    data = b"\xef\xbb\xbf" + sse(MESSAGE, nl) + f"retry: 10{nl}{nl}".encode()
    fields = list(re.finditer(rb"(?:(?<=[\r\n])|(?<=\xbf))(data|event|id|retry):", data))
    assert [m.group(1) for m in fields].count(b"data") == 3
    assert {m.group(1) for m in fields} == {b"data", b"event", b"id", b"retry"}
    for seed in SEEDS:
        cuts = set(cut_points("boundaries", data, random.Random(seed), k=0))
        for m in fields:
            name_start, name_end = m.span(1)
            inside = set(range(name_start + 1, name_end))
            assert inside & cuts, f"seed {seed}: no cut inside {m.group(1)!r} at {name_start}"
            assert name_end + 1 in cuts, f"seed {seed}: no cut after {m.group(0)!r}"
            assert name_end in cuts, f"seed {seed}: no cut before the colon of {m.group(0)!r}"


def test_boundaries_use_reported_frame_ends() -> None:
    """A blank line whose first ending was in an earlier chunk is only known from the ends."""
    data = b"\ndata: x\n\n"  # the frame before ended "...\n" in the previous chunk
    cuts = cut_points("boundaries", data, random.Random(0), k=0, frame_ends=[1])
    assert 1 in cuts


def test_boundaries_ignore_field_names_inside_values() -> None:
    data = b"data: the data: field\n\n"
    cuts = cut_points("boundaries", data, random.Random(0), k=0)
    assert all(c < 7 or c >= len(data) - 1 for c in cuts), cuts


def test_random_cuts_k_per_chunk_and_vary_by_seed() -> None:
    data = sse(MESSAGE)
    seen: set[tuple[int, ...]] = set()
    for seed in SEEDS:
        for k in (0, 1, 3, 10):
            cuts = cut_points("random", data, random.Random(seed), k=k)
            assert len(cuts) == k, f"seed {seed}, k {k}"
        seen.add(tuple(cut_points("random", data, random.Random(seed), k=3)))
    assert len(seen) > len(SEEDS) // 2
    assert cut_points("random", b"ab", random.Random(1), k=10) == [1]
    assert cut_points("random", b"a", random.Random(1), k=10) == []


def test_same_bytes_same_seed_same_cuts_for_combinations() -> None:
    names = ("utf8", "boundaries", "random")
    data = sse(MESSAGE, "\r\n")
    for seed in SEEDS:
        a = combined_cut_points(names, data, random.Random(seed), k=4)
        b = combined_cut_points(names, data, random.Random(seed), k=4)
        assert a == b, f"seed {seed}"
        assert a == sorted(set(a))
        utf8 = cut_points("utf8", data, random.Random(seed), k=4)
        assert set(utf8) <= set(a), f"seed {seed}"


@pytest.mark.parametrize("name", [*REWRITES, "nope", ""])
def test_non_rechunking_names_are_rejected(name: str) -> None:
    with pytest.raises(ChaosSpecError, match="not a re-chunking strategy"):
        cut_points(name, b"data: x\n\n", random.Random(0), k=1)


def test_split_at() -> None:
    assert split_at(b"abcdef", [1, 3]) == [b"a", b"bc", b"def"]
    assert split_at(b"abc", []) == [b"abc"]
    assert split_at(b"", []) == [b""]
