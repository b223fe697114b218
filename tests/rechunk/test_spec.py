"""Chaos specs: the header and flags users type, and the clear errors they get when wrong."""

from __future__ import annotations

from pathlib import Path

import pytest

from sse_proxy.errors import ChaosSpecError
from sse_proxy.rechunk.spec import (
    REWRITES,
    STRATEGIES,
    ChaosSpec,
    parse_chaos_header,
    parse_strategy_names,
)

ALL_NAMES = STRATEGIES + REWRITES
DOCS = ("docs/test-client.md",)


def test_every_name_is_accepted_and_documented() -> None:
    """Users type the names the docs show: each one parses (in any case, alone and
    combined) and is named in docs/test-client.md, the page that documents chaos mode."""
    root = Path(__file__).resolve().parents[2]
    docs = [(root / name).read_text(encoding="utf-8") for name in DOCS]
    assert len(set(ALL_NAMES)) == len(ALL_NAMES)
    for name in ALL_NAMES:
        assert parse_strategy_names(name.upper()) == (name,)
        assert name in parse_strategy_names(f"{name}+{ALL_NAMES[0]}")
        for path, text in zip(DOCS, docs, strict=True):
            assert f"`{name}`" in text, (name, path)


def test_header_basic() -> None:
    spec = parse_chaos_header("strategy=random; seed=42", default_seed=None)
    assert spec == ChaosSpec(strategies=("random",), seed=42)
    assert spec.k == 3
    assert spec.delay_ms == 0.0
    assert spec.frames_per_write == 3


def test_header_all_keys() -> None:
    spec = parse_chaos_header(
        "strategy=random; seed=42; k=5; delay_ms=2; frames_per_write=4", default_seed=None
    )
    assert spec == ChaosSpec(strategies=("random",), seed=42, k=5, delay_ms=2.0, frames_per_write=4)


@pytest.mark.parametrize(
    "value",
    [
        "strategy=random;seed=42",
        "  strategy = random ;  seed = 42  ",
        "STRATEGY=RANDOM; SEED=42",
        "Strategy=Random; Seed=42;",
        ";strategy=random;;seed=42;",
        "random; seed=42",
        "\tstrategy=random;\tseed=42\t",
    ],
)
def test_header_whitespace_and_case_variants(value: str) -> None:
    assert parse_chaos_header(value, default_seed=None) == ChaosSpec(("random",), 42), value


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("utf8+crlf", ("utf8", "crlf")),
        ("random,bom", ("random", "bom")),
        ("crlf + utf8", ("utf8", "crlf")),
        ("bom, random ,bytewise", ("bytewise", "random", "bom")),
        ("utf8+utf8", ("utf8",)),
        ("NOSPACE+Dataless", ("dataless", "nospace")),
    ],
)
def test_combinations_are_canonical(text: str, expected: tuple[str, ...]) -> None:
    """Order is fixed so a seed reproduces the same run however the names were typed."""
    assert parse_strategy_names(text) == expected, text
    spec = parse_chaos_header(f"strategy={text}; seed=1", default_seed=None)
    assert spec.strategies == expected, text


def test_every_name_alone_parses() -> None:
    for name in ALL_NAMES:
        spec = parse_chaos_header(f"strategy={name}; seed=7", default_seed=None)
        assert spec.strategies == (name,), name


def test_default_seed_used_when_header_has_none() -> None:
    assert parse_chaos_header("strategy=utf8", default_seed=99).seed == 99
    assert parse_chaos_header("strategy=utf8; seed=5", default_seed=99).seed == 5


def test_seed_is_drawn_when_none_given() -> None:
    seeds = {parse_chaos_header("strategy=utf8", default_seed=None).seed for _ in range(20)}
    assert all(0 <= s < 2**32 for s in seeds)
    assert len(seeds) > 1, "SystemRandom should not repeat itself 20 times"
    assert 0 <= ChaosSpec.from_options("bytewise", None).seed < 2**32


def test_from_options() -> None:
    spec = ChaosSpec.from_options("utf8+crlf", 3, k=2, delay_ms=1.5, frames_per_write=2)
    assert spec == ChaosSpec(("utf8", "crlf"), 3, k=2, delay_ms=1.5, frames_per_write=2)
    assert spec.rechunkers == ("utf8",)
    assert spec.rewrites == ("crlf",)
    assert not spec.rechunk_only
    assert ChaosSpec.from_options("coalesce+random", 1).rechunk_only
    assert ChaosSpec.from_options("coalesce+random", 1).coalesce
    assert ChaosSpec.from_options("coalesce+random", 1).rechunkers == ("random",)


def test_constructor_canonicalises_order() -> None:
    assert ChaosSpec(("crlf", "utf8"), 1) == ChaosSpec(("utf8", "crlf"), 1)


@pytest.mark.parametrize(
    "spec",
    [
        ChaosSpec(("random",), 42),
        ChaosSpec(("utf8", "crlf"), 0),
        ChaosSpec(("bytewise", "coalesce", "bom", "nospace"), 2**64 - 1, k=0),
        ChaosSpec(("random",), 5, k=9, delay_ms=2.5, frames_per_write=1),
        ChaosSpec(("boundaries",), 5, delay_ms=0.125),
    ],
)
def test_header_value_round_trips(spec: ChaosSpec) -> None:
    text = spec.header_value()
    assert text.startswith(f"strategy={spec.strategy}; seed={spec.seed}")
    assert parse_chaos_header(text, default_seed=None) == spec, text


def test_header_value_is_minimal_for_defaults() -> None:
    assert ChaosSpec(("utf8", "crlf"), 42).header_value() == "strategy=utf8+crlf; seed=42"


@pytest.mark.parametrize(
    ("value", "needle"),
    [
        ("strategy=nope; seed=1", "unknown chaos strategy 'nope'"),
        ("strategy=utf8+nope; seed=1", "unknown chaos strategy 'nope'"),
        ("strategy=; seed=1", "empty chaos strategy"),
        ("strategy=+,; seed=1", "empty chaos strategy"),
        ("seed=1", "needs strategy="),
        ("", "needs strategy="),
        ("strategy=utf8; colour=red", "unknown chaos key 'colour'"),
        ("strategy=utf8; seed=abc", "seed must be a non-negative integer"),
        ("strategy=utf8; seed=-1", "seed must be a non-negative integer"),
        ("strategy=utf8; seed=1.5", "seed must be a non-negative integer"),
        ("strategy=utf8; seed=", "seed must be a non-negative integer"),
        ("strategy=utf8; seed=99999999999999999999", "seed must be an integer in 0.."),
        ("strategy=utf8; seed=1" + "0" * 100, "seed must be a non-negative integer"),
        ("strategy=utf8; k=-1", "k must be a non-negative integer"),
        ("strategy=utf8; k=two", "k must be a non-negative integer"),
        ("strategy=utf8; delay_ms=-2", "delay_ms must be a non-negative number"),
        ("strategy=utf8; delay_ms=nan", "delay_ms must be a non-negative number"),
        ("strategy=utf8; delay_ms=inf", "delay_ms must be a non-negative number"),
        ("strategy=utf8; delay_ms=fast", "delay_ms must be a non-negative number"),
        ("strategy=coalesce; frames_per_write=0", "frames_per_write must be an integer >= 1"),
        ("strategy=utf8; seed=1; seed=2", "given twice"),
        ("strategy=utf8; bytewise", "expected key=value"),
        ("strategy=crlf+cr; seed=1", "mutually exclusive"),
        ("strategy=mixed_newlines,crlf; seed=1", "mutually exclusive"),
    ],
)
def test_header_errors_are_clear_one_liners(value: str, needle: str) -> None:
    with pytest.raises(ChaosSpecError) as info:
        parse_chaos_header(value, default_seed=None)
    message = str(info.value)
    assert needle in message, (value, message)
    assert "\n" not in message
    assert len(message) < 300, message


def test_unknown_strategy_message_lists_valid_names() -> None:
    with pytest.raises(ChaosSpecError) as info:
        ChaosSpec.from_options("bytwise", 1)
    for name in ALL_NAMES:
        assert name in str(info.value)


def test_huge_bad_value_is_not_echoed_in_full() -> None:
    with pytest.raises(ChaosSpecError) as info:
        parse_chaos_header("strategy=" + "x" * 5000, default_seed=1)
    assert len(str(info.value)) < 400


@pytest.mark.parametrize(
    "kwargs",
    [
        {"strategies": ()},
        {"strategies": ("bogus",)},
        {"strategies": ("utf8",), "seed": -1},
        {"strategies": ("utf8",), "seed": 2**64},
        {"strategies": ("utf8",), "k": -1},
        {"strategies": ("utf8",), "delay_ms": -0.5},
        {"strategies": ("utf8",), "delay_ms": float("inf")},
        {"strategies": ("utf8",), "frames_per_write": 0},
        {"strategies": ("cr", "crlf")},
    ],
)
def test_constructor_rejects_bad_values(kwargs: dict[str, object]) -> None:
    params: dict[str, object] = {"seed": 1, **kwargs}
    with pytest.raises(ChaosSpecError):
        ChaosSpec(**params)  # type: ignore[arg-type]


def test_error_is_a_value_error_for_callers_that_catch_broadly() -> None:
    with pytest.raises(ValueError, match="unknown chaos strategy"):
        parse_chaos_header("strategy=x", default_seed=1)


def test_header_inherits_the_server_settings_it_does_not_name() -> None:
    """A per-request header keeps the server's --delay-ms, --chaos-k and strategy unless it
    names them (a header that only picks a seed must not reset the jitter to 0)."""
    inherited = parse_chaos_header(
        "seed=7", default_seed=None, strategy="utf8", k=5, delay_ms=3.0, frames_per_write=2
    )
    assert inherited == ChaosSpec(("utf8",), 7, k=5, delay_ms=3.0, frames_per_write=2)
    named = parse_chaos_header(
        "strategy=random; k=1; delay_ms=0", default_seed=4, strategy="utf8", k=5, delay_ms=3.0
    )
    assert named == ChaosSpec(("random",), 4, k=1, delay_ms=0.0)
    with pytest.raises(ChaosSpecError, match="needs strategy="):
        parse_chaos_header("seed=7", default_seed=None, delay_ms=3.0)


def test_cut_items_in_the_header_and_their_limits() -> None:
    assert parse_chaos_header("strategy=cut:57", default_seed=1).at == (57,)
    with pytest.raises(ChaosSpecError, match="cut:N offsets"):
        ChaosSpec((), 1, at=(0,))
    with pytest.raises(ChaosSpecError, match="empty chaos strategy"):
        ChaosSpec((), 1)
    with pytest.raises(ChaosSpecError, match="not a strategy name"):
        parse_strategy_names("utf8+cut:5")
