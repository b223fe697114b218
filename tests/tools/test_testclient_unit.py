"""The harness's pure parts: case planning, output normalisation, diagnosis, reports."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from sse_proxy.core import StreamReassembler
from sse_proxy.errors import UsageError
from sse_proxy.rechunk.spec import REWRITES, STRATEGIES
from sse_proxy.tools import fixtures
from sse_proxy.tools.testclient.diagnose import (
    describe_cut,
    diagnose,
    first_difference,
    normalize_output,
    short_diff,
)
from sse_proxy.tools.testclient.fixture import load_fixture
from sse_proxy.tools.testclient.formats import report_junit
from sse_proxy.tools.testclient.plan import (
    CUT_BUDGET,
    DEFAULT_COMBOS,
    Case,
    HarnessOptions,
    fault_kinds,
    plan_cases,
)
from sse_proxy.tools.testclient.report import by_hand
from sse_proxy.tools.testclient.run import CaseResult

EXPECTED = fixtures.MESSAGE


def test_default_plan_covers_baseline_strategies_rewrites_combos_and_seeds() -> None:
    """Without --only every strategy, every rewrite and the combos run once per seed; the
    faults and the stalls once each."""
    cases = plan_cases(only=None, seeds=[1, 2], cut_points=3434, exhaustive=None)
    groups = list(dict.fromkeys(c.group for c in cases))
    assert groups == ["baseline", *STRATEGIES, *REWRITES, *DEFAULT_COMBOS, "faults", "stalls"]
    assert all(
        sorted(c.seed for c in cases if c.group == g) == [1, 2]
        for g in groups
        if g not in ("faults", "stalls")
    )
    assert [c.fault for c in cases if c.group == "faults"] == [
        "unterminated",
        "no_terminal",
        "error_event",
        "reset",
    ]
    stalls = [c for c in cases if c.group == "stalls"]
    assert [c.fault for c in stalls] == ["stall_keepalive", "stall_silent", "linger", "drip"]
    assert stalls[0].name == "stalls:stall_keepalive"


def test_every_cut_pass_is_automatic_only_for_a_short_fixture() -> None:
    """n-1 cut cases when the fixture is short (or --exhaustive), none when long by default."""
    short = plan_cases(only=None, seeds=[1], cut_points=130, exhaustive=None)
    assert [c.cut for c in short if c.cut is not None] == list(range(1, 131))
    assert not [
        c
        for c in plan_cases(only=None, seeds=[1], cut_points=CUT_BUDGET + 1, exhaustive=None)
        if c.cut
    ]
    forced = plan_cases(only=None, seeds=[1], cut_points=CUT_BUDGET + 1, exhaustive=True)
    assert len([c for c in forced if c.cut]) == CUT_BUDGET + 1
    assert not [
        c for c in plan_cases(only=None, seeds=[1], cut_points=5, exhaustive=False) if c.cut
    ]


def test_only_selects_groups_combinations_and_cut_ranges() -> None:
    """--only takes names in any order and case, combos, cut, cut:N and cut:A-B."""
    cases = plan_cases(
        only=["CRLF+utf8", "baseline", "cut:3-5", "cut:9"],
        seeds=[4],
        cut_points=20,
        exhaustive=None,
    )
    assert [c.name for c in cases] == [
        "utf8+crlf seed=4",
        "baseline (frames mode) seed=4",
        "cut=3",
        "cut=4",
        "cut=5",
        "cut=9",
    ]


@pytest.mark.parametrize(
    ("only", "message"),
    [
        (["bogus"], "unknown chaos strategy"),
        (["cr+crlf"], "mutually exclusive"),
        (["cut:0"], "out of range"),
        (["cut:x"], "bad cut"),
        (["", " "], "nothing selected"),
    ],
)
def test_bad_only_values_are_usage_errors(only: list[str], message: str) -> None:
    """A bad --only is a UsageError naming the problem."""
    with pytest.raises(UsageError, match=message):
        plan_cases(only=only, seeds=[1], cut_points=10, exhaustive=None)


@pytest.mark.parametrize(
    ("raw", "text"),
    [
        (b"abc\n", "abc"),
        (b"abc\r\n", "abc"),
        (b"abc\n\n", "abc\n"),
        (b"abc", "abc"),
        (b"caf\xc3", "caf\ufffd"),
    ],
)
def test_output_is_utf8_minus_at_most_one_trailing_newline(raw: bytes, text: str) -> None:
    """One trailing newline is forgiven, a second is a difference; bad UTF-8 shows as U+FFFD."""
    assert normalize_output(raw) == text


def test_diagnosis_names_each_bug_family_from_its_symptom() -> None:
    """U+FFFD: character; spaces lost: whitespace; text missing: frame; crash/hang: parser."""

    def family(actual: str, **kw: object) -> str | None:
        args = {"exit_code": 0, "timed_out": False, **kw}
        d = diagnose(EXPECTED, actual, **args)  # type: ignore[arg-type]
        return None if d is None else d.family

    assert family(EXPECTED) is None
    assert family(EXPECTED.replace("é", "\ufffd\ufffd")) == "character boundary"
    assert family(EXPECTED.replace(" ", "")) == "whitespace trimming"
    assert family(" ".join(w.strip() for w in fixtures.TOKENS)) == "whitespace trimming"
    assert family(EXPECTED[: len(EXPECTED) // 2]) == "frame boundary"
    assert family(EXPECTED + EXPECTED) == "wrong output"
    assert family("", exit_code=1) == "parser (crash)"
    assert family("", exit_code=None, timed_out=True) == "parser (hang)"


def test_a_failure_under_a_rewrite_alone_is_a_spec_conformance_bug_with_its_rule() -> None:
    """Rewrites never cut inside a frame, so lost text there is blamed on the syntax."""
    d = diagnose(EXPECTED, EXPECTED[3:], exit_code=0, timed_out=False, strategy="bom")
    assert d is not None
    assert d.family == "spec conformance (bom)"
    assert d.rule is not None
    assert "BOM" in d.rule
    combo = diagnose(EXPECTED, EXPECTED[3:], exit_code=0, timed_out=False, strategy="utf8+bom")
    assert combo is not None
    assert combo.family == "frame boundary"
    assert combo.rule


def test_diffs_show_lost_spaces_and_characters() -> None:
    """The word diff and the first-difference line make the loss visible."""
    diff = short_diff("The quick brown", "The quickbrown")
    assert '-" brown"' in diff
    assert "+" in diff
    assert first_difference("The quick", "Thequick") == (
        'at character 3: expected "The quick", got "Thequick"'
    )
    long = short_diff(EXPECTED, EXPECTED.replace(" ", "_"), limit=5)
    assert len(long.splitlines()) == 6
    assert "more diff lines" in long


def test_describe_cut_names_the_boundary_a_cut_falls_on() -> None:
    """Cuts are described as inside a character, between CR and LF, between frames, etc."""
    data = "data: é\r\n\r\ndata: x\n\n".encode()
    assert describe_cut(data, 2) == "inside a field name, before its colon"
    assert describe_cut(data, 7).startswith("inside the 2-byte character 'é'")
    assert describe_cut(data, 9) == "between CR and LF"
    assert describe_cut(data, 12) == "exactly between two frames"
    assert describe_cut(data, 20) == "inside the blank line that ends a frame"
    assert describe_cut(data, 19) == "at the end of a line, just before its line ending"
    assert describe_cut(data, 18) == "inside a data: line value"


def test_junit_report_is_valid_xml_with_one_testcase_per_case() -> None:
    """JUnit XML: counts, one testcase per case, a failure element with the diagnosis."""
    ok = CaseResult(Case("utf8", "utf8", 1), "pass", 0, EXPECTED, "", 0.1, EXPECTED)
    bad = CaseResult(
        Case("bom", "bom", 1),
        "wrong",
        0,
        EXPECTED[3:],
        "oops",
        0.2,
        EXPECTED,
        diagnose(EXPECTED, EXPECTED[3:], exit_code=0, timed_out=False, strategy="bom"),
    )
    tree = report_junit(HarnessOptions(command=("client",)), [ok, bad])
    written = tree.getroot()
    assert written is not None
    root = ET.fromstring(ET.tostring(written))
    suite = root.find("testsuite")
    assert suite is not None
    assert (suite.get("tests"), suite.get("failures")) == ("2", "1")
    cases = suite.findall("testcase")
    assert [c.get("name") for c in cases] == ["utf8 seed=1", "bom seed=1"]
    failure = cases[1].find("failure")
    assert failure is not None
    assert failure.get("type") == "spec conformance (bom)"
    assert "sse-proxy test-client" in (failure.text or "")


def test_skip_drops_groups_and_bang_items_in_only_skip_too() -> None:
    """--skip dataless keeps the other 17+ groups; --only '!dataless' means the same."""
    full = plan_cases(only=None, seeds=[1], cut_points=5000, exhaustive=None)
    skipped = plan_cases(
        only=None, skip=["dataless", "faults"], seeds=[1], cut_points=5000, exhaustive=None
    )
    assert {c.group for c in full} - {c.group for c in skipped} == {"dataless", "faults"}
    bang = plan_cases(only=["!dataless", "!faults"], seeds=[1], cut_points=5000, exhaustive=None)
    assert bang == skipped
    one_fault = plan_cases(
        only=None,
        skip=["faults:reset", "cut", "stalls:drip"],
        seeds=[1],
        cut_points=10,
        exhaustive=None,
    )
    assert [c.fault for c in one_fault if c.group == "faults"] == [
        "unterminated",
        "no_terminal",
        "error_event",
    ]
    assert [c.fault for c in one_fault if c.group == "stalls"] == [
        "stall_keepalive",
        "stall_silent",
        "linger",
    ]
    assert not [c for c in one_fault if c.cut]
    with pytest.raises(UsageError, match="--skip: unknown chaos strategy"):
        plan_cases(only=None, skip=["bogus"], seeds=[1], cut_points=5, exhaustive=None)
    with pytest.raises(UsageError, match="nothing selected"):
        plan_cases(only=["utf8"], skip=["utf8"], seeds=[1], cut_points=5, exhaustive=None)


def test_faults_that_cannot_be_noticed_are_not_planned_for_raw_text() -> None:
    """Raw text has no terminal marker, a partial last frame is dropped silently by spec,
    and there is no standard error event: only a reset is a fault a text client must see."""
    cases = plan_cases(
        only=["faults"], seeds=[1], cut_points=5, exhaustive=None, faults=fault_kinds("text")
    )
    assert [c.fault for c in cases] == ["reset"]
    with pytest.raises(UsageError, match="does not apply"):
        plan_cases(
            only=["faults:no_terminal"],
            seeds=[1],
            cut_points=5,
            exhaustive=None,
            faults=fault_kinds("text"),
        )


def test_the_older_fault_name_still_selects_its_fault() -> None:
    """``truncated`` was the test-client's name of ``unterminated`` (it means no_terminal to
    the mock, so it is a name of neither now); the old spelling still works."""
    old = plan_cases(only=["faults:truncated"], seeds=[1], cut_points=5, exhaustive=None)
    new = plan_cases(only=["faults:unterminated"], seeds=[1], cut_points=5, exhaustive=None)
    assert old == new
    assert [c.fault for c in old] == ["unterminated"]
    skipped = plan_cases(
        only=["faults"], skip=["faults:truncated"], seeds=[1], cut_points=5, exhaustive=None
    )
    assert [c.fault for c in skipped] == ["no_terminal", "error_event", "reset"]
    with pytest.raises(UsageError, match="truncated = unterminated"):
        plan_cases(only=["faults:mid"], seeds=[1], cut_points=5, exhaustive=None)


@pytest.mark.parametrize("dialect", ["openai", "responses", "anthropic", "gemini", "text"])
def test_fault_streams_break_after_some_text_and_carry_less_than_the_whole(dialect: str) -> None:
    """Each fault keeps some text (so silent truncation shows as partial text) but not all."""
    fixture = load_fixture(dialect, None)
    for kind in fault_kinds(dialect):
        broken = fixture.fault(kind)
        assert 0 < len(broken.text) <= len(fixture.expected), (dialect, kind)
        assert fixture.expected.startswith(broken.text), (dialect, kind)
        if kind != "no_terminal":
            assert len(broken.text) < len(fixture.expected), (dialect, kind)
        assert broken.reset is (kind == "reset")


def test_the_first_text_fixture_carries_text_in_its_first_event() -> None:
    """OpenAI Chat: the role chunk carries the first token; the whole text is unchanged."""
    body = fixtures.clean_stream("openai", first_text=True)
    first = json.loads(body.split(b"\n\n", 1)[0].removeprefix(b"data: "))
    assert first["choices"][0]["delta"]["content"] == fixtures.TOKENS[0]
    reassembler = StreamReassembler("openai", emit_events=False)
    reassembler.feed(body)
    reassembler.close()
    assert reassembler.text == fixtures.MESSAGE


def test_by_hand_is_one_line_with_every_variable_and_the_first_text_mock() -> None:
    """The by-hand command sets what the harness sets, dummy keys included, on one line."""
    fixture = load_fixture("openai", None)
    options = HarnessOptions(command=("python", "stream.py"))
    line = by_hand(options, fixture, Case("bom", "bom", 3), ports=(18001, 18002))
    assert line is not None
    assert "\n" not in line
    assert line.startswith("sse-proxy mock-upstream --port 18001 --seed 3 --first-text ")
    assert "--mode chaos --chaos bom --seed 3" in line
    for name in (
        "SSE_PROXY_URL=http://127.0.0.1:18002",
        "OPENAI_BASE_URL=http://127.0.0.1:18002/v1",
        "SSE_PROXY_STREAM_URL=http://127.0.0.1:18002/v1/chat/completions",
        "SSE_PROXY_STREAM_BODY=",
        "SSE_PROXY_DIALECT=openai",
        'OPENAI_API_KEY="${OPENAI_API_KEY:-sk-',
        'ANTHROPIC_API_KEY="${ANTHROPIC_API_KEY:-',
    ):
        assert name in line
    assert line.endswith("python stream.py; status=$?; kill $px $up; (exit $status)")
    assert by_hand(options, fixture, Case("cut", None, 0, cut=3)) is None
    assert by_hand(options, fixture, Case("faults", None, 1, fault="reset")) is None
