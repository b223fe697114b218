"""Where a drop falls: the pure timeline both shells share, on every dialect's stream.

A drop cuts after the frame's first line of the event after a seeded text event (so an
``id:`` of an event that never arrived is there, its data is not), on the attempts its
name says; the variants put their block just before the cut; a reconnect is answered as
the fault says. The oracle is the core's reassembler on the bytes written before the cut.
"""

from __future__ import annotations

import pytest

from sse_proxy.core import StreamReassembler
from sse_proxy.core.dialects.registry import DIALECTS, TEXT_DIALECTS
from sse_proxy.rechunk.shapes.rewriter import split_frames
from sse_proxy.rechunk.timefaults import (
    DROP,
    DROPS,
    TEXT_BEFORE,
    Pause,
    Timeline,
    TimeSettings,
    cuts,
    resume_answer,
)
from sse_proxy.server.delivery import stream_kind
from sse_proxy.tools import fixtures


def _run(
    dialect: str, fault: str, seed: int = 1, attempt: int = 0
) -> tuple[bytes, Pause | None, int]:
    """(bytes written before the cut, the cut's pause, its frame's index)."""
    timeline = Timeline(
        fault, TimeSettings(retry_large=2.5), stream_kind(dialect), seed=seed, attempt=attempt
    )
    out = b""
    for i, frame in enumerate(split_frames(fixtures.clean_stream(dialect))):
        for piece, pause in timeline.frame(frame):
            if pause is not None:
                assert pause.action == DROP
                assert pause.began
                return out, pause, i
            out += piece
    return out, timeline.end(), -1


@pytest.mark.parametrize("dialect", TEXT_DIALECTS)
def test_a_drop_cuts_mid_event_after_some_text_and_never_twice(dialect: str) -> None:
    written, pause, _ = _run(dialect, "drop", seed=7)
    assert pause is not None
    reader = StreamReassembler(dialect)
    reader.feed(written)
    reader.close(abandoned=True)
    whole = fixtures.expected_text(dialect)
    assert whole.startswith(reader.text)
    if DIALECTS[dialect].text_at_end:  # MCP: cut inside the response that carries it
        assert reader.text == ""
        assert not reader.terminal_seen
    else:
        assert reader.text
        assert reader.text != whole
    assert not written.endswith(b"\n\n")  # inside an event: its first line, not its end
    again, _, _ = _run(dialect, "drop", seed=7)
    assert again == written  # seeded
    assert _run(dialect, "drop", seed=7, attempt=1)[1] is None  # a resume is not cut


def test_the_seed_places_the_cut_and_drop_twice_cuts_two_attempts() -> None:
    places = {_run("text", "drop", seed=s)[2] for s in range(12)}
    assert len(places) > 3
    assert min(places) >= TEXT_BEFORE
    assert _run("text", "drop_twice", attempt=1)[1] is not None
    assert _run("text", "drop_twice", attempt=2)[1] is None
    assert [cuts("drop_twice", a) for a in range(3)] == [True, True, False]
    assert not cuts("stall_silent", 0)


def test_a_drop_at_the_start_cuts_the_first_text_event() -> None:
    written, _, index = _run("text", "drop_start")
    assert index == 0
    assert written == b"data: The\n"


@pytest.mark.parametrize(
    ("fault", "block"),
    [
        ("drop_retry_invalid", b"retry: 10ms\n\n"),
        ("drop_retry_large", b"retry: 2500\n\n"),
        ("drop_id_nul", b"id: x\x00y\n\n"),
        ("drop_idless", b"data:\n\ndata:\n\n"),
    ],
)
def test_each_variant_writes_its_block_and_cuts_after_it(fault: str, block: bytes) -> None:
    written, _, _ = _run("responses", fault)
    assert written.endswith(block)  # the cut falls between events, after the block
    head, found, _ = written.rpartition(block)
    assert found
    assert head.endswith(b"\n\n")


def test_the_reconnect_is_answered_as_the_fault_says() -> None:
    assert resume_answer("drop_204", 1) == "no_content"
    assert resume_answer("drop_too_old", 2) == "too_old"
    assert resume_answer("drop_204", 0) is None
    assert resume_answer("drop", 1) is None
    assert resume_answer(None, 1) is None
    assert set(DROPS) >= {"drop", "drop_twice"}


def test_a_drop_on_a_gemini_interaction_cuts_inside_a_text_delta() -> None:
    """The chaos proxy's timeline (the gemini dialect's kind) counts an interaction's text
    deltas as it counts generateContent chunks: the cut falls inside a step.delta after the
    seeded ones, its event: line written, its data not."""
    from sse_proxy.tools.fixtures.resume import interaction_events

    events = interaction_events("v1_x")
    timeline = Timeline("drop", TimeSettings(), stream_kind("gemini"), seed=7)
    out = b""
    cut = None
    for i, event in enumerate(events):
        for piece, pause in timeline.frame(event.frame):
            if pause is not None:
                cut = i
                break
            out += piece
        if cut is not None:
            break
    assert cut is not None
    assert TEXT_BEFORE + 2 <= cut <= 3 * TEXT_BEFORE + 2  # after created, step.start
    assert out.endswith(b"\n\nevent: step.delta\n")
    reader = StreamReassembler("gemini")
    reader.feed(out)
    reader.close(abandoned=True)
    assert reader.text == "".join(fixtures.TOKENS[: cut - 2])
