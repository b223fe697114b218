"""Planners: joined writes equal the input (re-chunking), frames stay whole, seeds reproduce."""

from __future__ import annotations

import ast
import itertools
import random
from collections.abc import Sequence
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import sse_proxy.rechunk
from sse_proxy.errors import ChaosSpecError
from sse_proxy.rechunk.planner import (
    ChaosPlanner,
    FramesPlanner,
    PassthroughPlanner,
    Planner,
    Write,
    make_planner,
)
from sse_proxy.rechunk.spec import REWRITES, STRATEGIES, ChaosSpec
from tests.rechunk.test_rewrites import STREAMS, core_view, frame_ends, parse

MESSAGE = "café 🙂 日本語 naïve"
STREAM = (
    b"".join(f'id: {i}\ndata: {{"delta": "{MESSAGE} {i}"}}\n\n'.encode() for i in range(8))
    + b"data: [DONE]\n\n"
)


def chunked(data: bytes, seed: int, k: int) -> list[bytes]:
    """``data`` in k seeded pieces (some may be empty: the planner must cope)."""
    rng = random.Random(seed)
    cuts = sorted(rng.randrange(len(data) + 1) for _ in range(k - 1))
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def drive(planner: Planner, chunks: Sequence[bytes], ends: Sequence[int]) -> list[Write]:
    """Feed chunks with the frame ends that fall inside the bytes fed so far, then flush."""
    writes: list[Write] = []
    fed = 0
    pending = sorted(ends)
    for chunk in chunks:
        fed += len(chunk)
        now = [e for e in pending if e <= fed]
        pending = pending[len(now) :]
        writes += planner.plan(chunk, now)
    return writes + planner.flush()


def drive_with_core(planner: Planner, chunks: Sequence[bytes]) -> list[Write]:
    """Feed chunks with the frame ends the core reassembler reports, as the shell will."""
    from sse_proxy.core import StreamReassembler

    r = StreamReassembler(dialect="none")
    writes: list[Write] = []
    for chunk in chunks:
        writes += planner.plan(chunk, r.feed(chunk).frame_ends)
    r.close()
    return writes + planner.flush()


def joined(writes: Sequence[Write]) -> bytes:
    return b"".join(w.data for w in writes)


RECHUNK_SPECS = [c for r in range(1, 3) for c in itertools.combinations(STRATEGIES, r)] + [
    STRATEGIES
]


def test_module_is_pure() -> None:
    """The package must stay free of I/O, clocks and event loops: it only plans writes."""
    banned = {"asyncio", "aiohttp", "structlog", "logging", "time", "socket", "os", "io"}
    for path in Path(sse_proxy.rechunk.__file__).parent.rglob("*.py"):
        tree = ast.parse(path.read_text())
        for node in ast.walk(tree):
            if isinstance(node, ast.Import):
                names = [a.name.split(".")[0] for a in node.names]
            elif isinstance(node, ast.ImportFrom):
                names = [(node.module or "").split(".")[0]]
            else:
                continue
            assert not banned.intersection(names), f"{path.name} imports {names}"


def test_passthrough_is_identity() -> None:
    p = PassthroughPlanner()
    chunks = [b"data: a", b"", b"\n\n", b"x"]
    writes = [w for c in chunks for w in p.plan(c, ())]
    assert [w.data for w in writes] == [b"data: a", b"\n\n", b"x"]
    assert all(w.delay == 0.0 for w in writes)
    assert p.flush() == []


def test_frames_planner_writes_whole_frames() -> None:
    ends = frame_ends(STREAM)
    for seed, k in itertools.product(range(30), (1, 2, 5, 40, len(STREAM))):
        writes = drive(FramesPlanner(), chunked(STREAM, seed, k), ends)
        assert joined(writes) == STREAM, f"seed {seed}, k {k}"
        assert len(writes) == len(ends), f"seed {seed}, k {k}"
        offset = 0
        for w in writes:
            offset += len(w.data)
            assert offset in ends, f"seed {seed}, k {k}: write ends mid-frame at {offset}"


def test_frames_planner_flushes_the_partial_tail() -> None:
    data = b"data: a\n\ndata: b\n\ndata: tai"
    p = FramesPlanner()
    writes = p.plan(data, frame_ends(data))
    assert [w.data for w in writes] == [b"data: a\n\n", b"data: b\n\n"]
    assert [w.data for w in p.flush()] == [b"data: tai"]
    assert p.flush() == []


def test_planners_bound_memory() -> None:
    """A frame that never ends is written out once past max_hold, then frames resume."""
    big = b"data: " + b"x" * 100 + b"\n\n"
    data = big + b"data: small\n\n"
    ends = frame_ends(data)
    specs = [("coalesce",), ("crlf",), ("coalesce", "dataless")]
    for seed, names in itertools.product(range(20), specs):
        for planner in (FramesPlanner(max_hold=32), ChaosPlanner(ChaosSpec(names, seed), 32)):
            fed = written = 0
            pending = list(ends)
            for chunk in chunked(data, seed, 12):
                fed += len(chunk)
                now = [e for e in pending if e <= fed]
                pending = pending[len(now) :]
                written += len(joined(planner.plan(chunk, now)))
                assert fed - written <= 32, f"{names} seed {seed}: holds too much"
            written += len(joined(planner.flush()))
            if isinstance(planner, FramesPlanner) or names == ("coalesce",):
                assert written == len(data), f"{names} seed {seed}"
    p = FramesPlanner(max_hold=4)
    assert p.plan(b"data: x", ()) == [Write(b"data: x")]


def test_frame_ends_beyond_the_bytes_fed_are_a_bug() -> None:
    for planner in (FramesPlanner(), ChaosPlanner(ChaosSpec(("utf8",), 1))):
        with pytest.raises(ValueError, match="beyond"):
            planner.plan(b"data: x\n\n", [10])


def test_bytewise_writes_single_bytes() -> None:
    writes = drive(ChaosPlanner(ChaosSpec(("bytewise",), 1)), [STREAM], frame_ends(STREAM))
    assert all(len(w.data) == 1 for w in writes)
    assert joined(writes) == STREAM


def test_chaos_planner_does_not_hold_bytes_for_pure_rechunking() -> None:
    """Re-chunking alone adds no buffering: each chunk is written out before the next."""
    for names in RECHUNK_SPECS:
        if "coalesce" in names:
            continue
        p = ChaosPlanner(ChaosSpec(names, 3))
        for seed in range(5):
            for chunk in chunked(STREAM, seed, 7):
                assert joined(p.plan(chunk, ())) == chunk, names
        assert p.flush() == []


@pytest.mark.parametrize("per_write", [1, 2, 3, 5])
def test_coalesce_puts_several_frames_in_one_write(per_write: int) -> None:
    ends = frame_ends(STREAM)
    spec = ChaosSpec(("coalesce",), 0, frames_per_write=per_write)
    for seed in range(10):
        writes = drive(ChaosPlanner(spec), chunked(STREAM, seed, 6), ends)
        assert joined(writes) == STREAM
        frames_per = [len(frame_ends(w.data)) for w in writes]
        assert frames_per[:-1] == [per_write] * (len(writes) - 1), f"seed {seed}: {frames_per}"
        assert 1 <= frames_per[-1] <= per_write


def test_chaos_planner_is_deterministic_per_seed() -> None:
    ends = frame_ends(STREAM)
    for names in [*RECHUNK_SPECS, ("random", "crlf", "dataless"), ("coalesce", "bom")]:
        for seed in range(5):
            spec = ChaosSpec(names, seed, k=4, delay_ms=3.0)
            chunks = chunked(STREAM, seed, 9)
            a, b = ChaosPlanner(spec), ChaosPlanner(spec)
            wa, wb = drive(a, chunks, ends), drive(b, chunks, ends)
            assert wa == wb, f"{names} seed {seed}"
            assert a.recorded_cuts == b.recorded_cuts, f"{names} seed {seed}"


def test_different_seeds_give_different_random_cuts() -> None:
    ends = frame_ends(STREAM)
    runs = {
        tuple(drive(ChaosPlanner(ChaosSpec(("random",), seed)), [STREAM], ends))
        for seed in range(20)
    }
    assert len(runs) == 20


def test_delay_is_bounded_jitter_and_does_not_move_cuts() -> None:
    ends = frame_ends(STREAM)
    for seed in range(10):
        plain = drive(ChaosPlanner(ChaosSpec(("random",), seed)), [STREAM], ends)
        jitter = drive(ChaosPlanner(ChaosSpec(("random",), seed, delay_ms=5.0)), [STREAM], ends)
        assert [w.data for w in plain] == [w.data for w in jitter], f"seed {seed}"
        assert all(w.delay == 0.0 for w in plain)
        assert all(0.0 <= w.delay <= 0.005 for w in jitter), f"seed {seed}"
        assert len({w.delay for w in jitter}) > 1, f"seed {seed}"


def test_recorded_cuts_are_the_write_ends() -> None:
    p = ChaosPlanner(ChaosSpec(("utf8", "random"), 11))
    writes = drive(p, chunked(STREAM, 11, 4), frame_ends(STREAM))
    ends = list(itertools.accumulate(len(w.data) for w in writes))
    assert p.recorded_cuts == ends
    assert ends[-1] == len(STREAM)


@settings(max_examples=200, deadline=None)
@given(
    data=st.binary(max_size=300) | st.sampled_from([STREAM, *STREAMS.values()]),
    names=st.sampled_from(RECHUNK_SPECS),
    seed=st.integers(0, 2**32 - 1),
    n_chunks=st.integers(1, 12),
    k=st.integers(0, 6),
    per_write=st.integers(1, 4),
    max_hold=st.sampled_from([0, 7, 64, 1 << 20]),
    nonsense_ends=st.booleans(),
)
def test_joined_writes_equal_input_for_every_rechunking_spec(
    data: bytes,
    names: tuple[str, ...],
    seed: int,
    n_chunks: int,
    k: int,
    per_write: int,
    max_hold: int,
    nonsense_ends: bool,
) -> None:
    """The module's rule, over any bytes, chunking, strategy mix, seed and frame ends."""
    spec = ChaosSpec(names, seed, k=k, frames_per_write=per_write)
    chunks = chunked(data, seed, n_chunks)
    if nonsense_ends:
        rng = random.Random(seed)
        ends = [rng.randrange(len(data) + 1) for _ in range(5)] if data else []
    else:
        ends = frame_ends(data)
    for planner in (ChaosPlanner(spec, max_hold), FramesPlanner(max_hold), PassthroughPlanner()):
        writes = drive(planner, chunks, ends)
        assert joined(writes) == data, f"{type(planner).__name__} {names} seed {seed}"
        assert all(w.data for w in writes), f"empty write: {names} seed {seed}"


@settings(max_examples=200, deadline=None)
@given(
    label=st.sampled_from(sorted(STREAMS)),
    names=st.sampled_from(
        [(r,) for r in REWRITES]
        + [("utf8", "crlf"), ("random", "bom", "cr"), ("coalesce", "dataless", "nospace")]
        + [("boundaries", "keepalive", "blank_lines", "mixed_newlines")]
    ),
    seed=st.integers(0, 2**32 - 1),
    n_chunks=st.integers(1, 30),
    max_hold=st.sampled_from([16, 1 << 20]),
)
def test_rewrites_through_the_planner_keep_events(
    label: str, names: tuple[str, ...], seed: int, n_chunks: int, max_hold: int
) -> None:
    """With the core's own frame ends and any chunking; a small max_hold forces raw writes."""
    stream = STREAMS[label]
    planner = ChaosPlanner(ChaosSpec(names, seed, frames_per_write=2), max_hold)
    writes = drive_with_core(planner, chunked(stream, seed, n_chunks))
    out = joined(writes)
    where = f"{names} on {label!r}, seed {seed}, {n_chunks} chunks, max_hold {max_hold}"
    assert all(w.data for w in writes), where
    assert parse(out) == parse(stream), f"{where}: {out!r}"
    assert core_view(out) == core_view(stream), f"{where} (core): {out!r}"


def test_rewrite_planner_writes_frames_and_adds_bom_once() -> None:
    spec = ChaosSpec(("bom", "crlf"), 1)
    writes = drive(ChaosPlanner(spec), chunked(STREAM, 1, 5), frame_ends(STREAM))
    out = joined(writes)
    assert out.startswith(b"\xef\xbb\xbfid: 0\r\n")
    assert out.count(b"\xef\xbb\xbf") == 1
    assert b"\n" not in out.replace(b"\r\n", b"")
    assert parse(out) == parse(STREAM)


def test_make_planner() -> None:
    spec = ChaosSpec(("utf8",), 1)
    assert isinstance(make_planner("passthrough", None), PassthroughPlanner)
    assert isinstance(make_planner("passthrough", spec), PassthroughPlanner)
    assert isinstance(make_planner("frames", None, max_hold=10), FramesPlanner)
    chaos = make_planner("chaos", spec)
    assert isinstance(chaos, ChaosPlanner)
    assert chaos.spec == spec
    with pytest.raises(ChaosSpecError, match="needs a chaos spec"):
        make_planner("chaos", None)
    with pytest.raises(ChaosSpecError, match="unknown mode 'turbo'"):
        make_planner("turbo", spec)
    with pytest.raises(ValueError, match="max_hold"):
        make_planner("frames", None, max_hold=-1)
