"""The whole reader: exact text at every cut, k-way splits, and whole vs bytewise vs cuts agree."""

from __future__ import annotations

import itertools
import random
import subprocess
import sys

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from sse_proxy.core import StreamReassembler
from tests.support.cuts import (
    MESSAGE,
    TEXT,
    TOKENS,
    Result,
    bytewise,
    every_cut,
    names,
    openai_stream,
    raw_text_stream,
    run,
    seeded_splits,
)

NEWLINES = {"lf": "\n", "crlf": "\r\n", "cr": "\r"}


def same(a: Result, b: Result) -> bool:
    return (a.events, a.alerts, a.text, a.dialect) == (b.events, b.alerts, b.text, b.dialect)


@pytest.mark.parametrize("nl", NEWLINES)
def test_openai_text_is_exact_at_every_cut(nl: str) -> None:
    """Leading and trailing spaces survive: " quick" and the final " " included."""
    data = openai_stream(TOKENS, NEWLINES[nl])
    whole = run([data])
    assert whole.text == TEXT
    assert whole.dialect == "openai"
    for cut, pieces in every_cut(data):
        res = run(pieces)
        assert res.text == TEXT, f"split at byte {cut}"
        assert same(res, whole), f"split at byte {cut}"


@pytest.mark.parametrize("nl", NEWLINES)
def test_raw_text_is_exact_at_every_cut(nl: str) -> None:
    data = raw_text_stream(TOKENS, NEWLINES[nl])
    for cut, pieces in every_cut(data):
        res = run(pieces)
        assert res.text == TEXT, f"split at byte {cut}"
        assert res.dialect == "text"


def test_whole_bytewise_and_every_cut_agree_on_events_text_and_alerts() -> None:
    data = openai_stream(["The", " quick", " \ufffd", "\xff"], "\r\n", done=False)
    data = data.replace("\xff".encode(), b"\xff") + b"data: {broken\r\n\r\n" + b'data: {"choi'
    whole = run([data])
    causes = [a.cause for a in whole.alerts if a.name == "sse.replacement_char"]  # type: ignore[attr-defined]
    assert causes == ["upstream_literal", "invalid_utf8"]
    assert "sse.invalid_json" in names(whole.alerts)
    assert "sse.unterminated_frame" in names(whole.alerts)
    assert same(run(bytewise(data)), whole)
    for cut, pieces in every_cut(data):
        assert same(run(pieces), whole), f"split at byte {cut}"


def test_seeded_random_k_way_splits() -> None:
    """A few hundred k-way splits: state that is only wrong on the third call shows here."""
    data = openai_stream(list(MESSAGE) + list(TOKENS), "\r\n")
    whole = run([data])
    master = random.Random()
    base_seed = master.randrange(2**32)
    for i in range(300):
        seed = base_seed + i
        k = random.Random(seed).randint(3, 40)
        res = run(seeded_splits(data, k, seed))
        assert same(res, whole), f"seed={seed} k={k} (reproduce: seeded_splits(data, {k}, {seed}))"
        assert "\ufffd" not in res.text, f"seed={seed}"


@settings(max_examples=200, deadline=None)
@given(
    tokens=st.lists(st.text(min_size=1, max_size=8), min_size=1, max_size=12),
    nl=st.sampled_from(["\n", "\r\n", "\r"]),
    data=st.data(),
)
def test_any_split_of_any_generated_stream_gives_the_same_result(
    tokens: list[str], nl: str, data: st.DataObject
) -> None:
    wire = openai_stream(tokens, nl)
    cuts = data.draw(st.lists(st.integers(1, max(1, len(wire) - 1)), max_size=20, unique=True))
    bounds = [0, *sorted(cuts), len(wire)]
    pieces = [wire[a:b] for a, b in itertools.pairwise(bounds) if b > a]
    whole = run([wire])
    assert whole.text == "".join(tokens)  # a literal U+FFFD in a token stays as sent
    assert same(run(pieces), whole)


def test_no_replacement_character_in_clean_multilingual_output() -> None:
    data = openai_stream(list(MESSAGE), "\n")
    for cut, pieces in every_cut(data):
        res = run(pieces)
        assert "\ufffd" not in res.text, f"split at byte {cut}"
        assert res.alerts == (), f"split at byte {cut}"


def test_feed_returns_events_as_they_complete() -> None:
    r = StreamReassembler()
    assert r.feed(b"data: a").events == ()
    out = r.feed(b"\n\n")
    assert [e.data for e in out.events] == ["a"]
    assert out.frame_ends == (9,)


def test_emit_events_false_still_reassembles_text() -> None:
    r = StreamReassembler(emit_events=False)
    out = r.feed(raw_text_stream(["The", " quick"]))
    assert out.events == ()
    r.close()
    assert r.text == "The quick"


def test_unknown_dialect_name_is_a_value_error() -> None:
    with pytest.raises(ValueError, match="unknown dialect"):
        StreamReassembler("klingon")


def test_core_imports_no_asyncio_aiohttp_structlog_or_logging() -> None:
    """The sans-IO rule, checked in a fresh interpreter."""
    code = (
        "import sys, sse_proxy.core, sse_proxy.core.dialects, sse_proxy.core.framing;"
        "bad = [m for m in ('asyncio', 'aiohttp', 'structlog', 'logging') if m in sys.modules];"
        "print(','.join(bad))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout.strip()
    assert out == "", f"sse_proxy.core imported {out}"


@pytest.mark.parametrize("dialect", ["openai", "anthropic", "responses", "text"])
def test_keep_text_false_counts_the_same_length_without_keeping_the_text(dialect: str) -> None:
    """The proxy's mode: summary text_length is exact, the text itself is not held."""
    from sse_proxy.tools import fixtures

    data = fixtures.clean_stream(dialect)
    kept = StreamReassembler()
    counted = StreamReassembler(keep_text=False)
    for r in (kept, counted):
        r.feed(data)
        r.close()
    assert kept.text == fixtures.expected_text(dialect)
    assert counted.text == ""
    assert counted.summary()["text_length"] == len(kept.text) == kept.summary()["text_length"]
