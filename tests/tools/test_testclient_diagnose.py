"""The pure verdicts of `test-client`: every strategy and combination, against simulated
clients that fail on exactly one part, plus fault verdicts and crash attribution."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from sse_proxy.rechunk.spec import REWRITES, STRATEGIES
from sse_proxy.tools import fixtures
from sse_proxy.tools.testclient.diagnose import (
    CrashSite,
    Diagnosis,
    attribute_crash,
    diagnose,
    diagnose_fault,
    split_parts,
)
from sse_proxy.tools.testclient.plan import DEFAULT_COMBOS

EXPECTED = fixtures.MESSAGE
HALF = EXPECTED[: len(EXPECTED) // 2]

# What a client that gets one part wrong prints: (output, exit code) per bug.
SYMPTOMS: dict[str, tuple[str, int]] = {
    "lost text": (HALF, 0),
    "fffd": (EXPECTED.replace("é", "\ufffd\ufffd"), 0),
    "spaces": (EXPECTED.replace(" ", ""), 0),
    "crash": ("", 1),
}
CUT_FAMILY = {
    "lost text": "frame boundary",
    "fffd": "character boundary",
    "spaces": "whitespace trimming",
    "crash": "parser (crash)",
}
COMBOS = [*DEFAULT_COMBOS, "bytewise+dataless", "utf8+blank_lines+bom"]


def _verdict(strategy: str, output: str, code: int) -> Diagnosis | None:
    return diagnose(EXPECTED, output, exit_code=code, timed_out=False, strategy=strategy)


@pytest.mark.parametrize("strategy", [*STRATEGIES, *REWRITES])
@pytest.mark.parametrize("symptom", list(SYMPTOMS))
def test_a_single_strategy_is_diagnosed_from_its_symptom(strategy: str, symptom: str) -> None:
    """A cut strategy names the boundary; a rewrite alone is always spec conformance."""
    output, code = SYMPTOMS[symptom]
    found = _verdict(strategy, output, code)
    assert found is not None
    if strategy in REWRITES and symptom in ("lost text", "spaces"):
        assert found.family == f"spec conformance ({strategy})"
    else:
        assert found.family == CUT_FAMILY[symptom]
    assert found.rule is not None
    assert found.rule.startswith(f"{strategy}: ")


@pytest.mark.parametrize("combo", COMBOS)
@pytest.mark.parametrize("symptom", list(SYMPTOMS))
def test_a_combination_names_the_one_part_that_fails_alone(combo: str, symptom: str) -> None:
    """Against a client that fails only on one part, the combination blames that part,
    never the other: the issue's `boundaries+cr` read as "frame boundary" no more."""
    cuts, rewrites = split_parts(combo)
    output, code = SYMPTOMS[symptom]
    for bad in cuts + rewrites:
        alone = _verdict(bad, output, code)
        parts = {p: (alone if p == bad else None) for p in cuts + rewrites}
        found = diagnose(
            EXPECTED, output, exit_code=code, timed_out=False, strategy=combo, parts=parts
        )
        assert found is not None, (combo, bad)
        assert alone is not None
        # one root cause, one family: the one the part got alone; U+FFFD is always the
        # character boundary
        assert found.family == alone.family, (combo, bad, found)
        if symptom == "fffd":
            assert found.family == "character boundary"
        assert found.rule is not None
        assert found.rule.startswith(f"{bad}: ")
        for other in cuts + rewrites:
            if other != bad:
                assert f"{other}: " not in found.rule, (combo, bad, found.rule)
        assert f"the cause is {bad}" in found.reason


@pytest.mark.parametrize("combo", COMBOS)
def test_a_combination_whose_parts_all_pass_alone_blames_where_they_meet(combo: str) -> None:
    """Every part passes alone: the bug is the meeting point (a CRLF cut between reads)."""
    cuts, rewrites = split_parts(combo)
    names = cuts + rewrites
    found = diagnose(
        EXPECTED,
        HALF,
        exit_code=0,
        timed_out=False,
        strategy=combo,
        parts=dict.fromkeys(names),
    )
    assert found is not None
    assert found.family == f"frame boundary (where {combo} meet)"
    assert "passes alone" in found.reason


def test_two_failing_parts_are_both_named() -> None:
    """When a cut and a rewrite each fail alone, both families appear."""
    lost = _verdict("random", HALF, 0)
    bom = _verdict("bom", HALF, 0)
    found = diagnose(
        EXPECTED,
        HALF,
        exit_code=0,
        timed_out=False,
        strategy="random+bom",
        parts={"random": lost, "bom": bom},
    )
    assert found is not None
    assert found.family == "frame boundary + spec conformance (bom)"


def test_a_combination_without_its_parts_says_the_cause_is_not_pinned_down() -> None:
    found = _verdict("boundaries+cr", HALF, 0)
    assert found is not None
    assert "its parts were not run alone" in found.reason
    assert _verdict("utf8+crlf", EXPECTED, 0) is None


@pytest.mark.parametrize("kind", ["unterminated", "no_terminal", "error_event", "reset"])
def test_a_fault_passes_only_when_the_client_reports_failure(kind: str) -> None:
    """Exit != 0: reported. Exit 0 with half the text: silent truncation. No exit: hang."""
    assert diagnose_fault(kind, EXPECTED, HALF, HALF, exit_code=1, timed_out=False) is None
    silent = diagnose_fault(kind, EXPECTED, HALF, HALF, exit_code=0, timed_out=False)
    assert silent is not None
    assert silent.family == "silent truncation"
    assert f"printed {len(HALF)} of the answer's {len(EXPECTED)} characters" in silent.reason
    assert silent.rule is not None
    assert silent.rule.startswith(kind)
    hang = diagnose_fault(kind, EXPECTED, HALF, "", exit_code=None, timed_out=True, timeout=3)
    assert hang is not None
    assert hang.family == "parser (hang)"


def _site_packages(tmp_path: Path, dist: str, version: str, top: str) -> Path:
    site = tmp_path / "venv" / "lib" / "python3.11" / "site-packages"
    (site / top).mkdir(parents=True)
    info = site / f"{dist}-{version}.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: {version}\n")
    (info / "RECORD").write_text(f"{top}/__init__.py,,\n{top}/_streaming.py,,\n")
    return site


def test_a_python_crash_inside_an_installed_package_is_named_with_its_version(
    tmp_path: Path,
) -> None:
    """The innermost frame outside the stdlib lies in site-packages: package, version, line."""
    site = _site_packages(tmp_path, "openai", "3.57.0", "openai")
    stderr = (
        "Traceback (most recent call last):\n"
        '  File "/home/me/app/stream.py", line 9, in <module>\n'
        "    for chunk in stream:\n"
        f'  File "{site}/openai/_streaming.py", line 300, in __iter__\n'
        "    data = json.loads(sse.data)\n"
        '  File "/usr/lib/python3.11/json/__init__.py", line 346, in loads\n'
        "    return _default_decoder.decode(s)\n"
        "json.decoder.JSONDecodeError: Expecting value: line 1 column 1 (char 0)\n"
    )
    site_found = attribute_crash(stderr)
    assert site_found == CrashSite("openai", "3.57.0", "openai/_streaming.py", 300)
    assert str(site_found) == "openai 3.57.0, openai/_streaming.py:300"
    found = diagnose(
        EXPECTED, "", exit_code=1, timed_out=False, strategy="dataless", site=site_found
    )
    assert found is not None
    assert "crash inside openai 3.57.0, openai/_streaming.py:300" in found.reason
    assert found.rule is not None
    assert found.rule.startswith("dataless: ")


def test_a_crash_in_the_users_own_code_is_not_attributed_to_a_package(tmp_path: Path) -> None:
    site = _site_packages(tmp_path, "httpx-sse", "0.4.3", "httpx_sse")
    stderr = (
        "Traceback (most recent call last):\n"
        f'  File "{site}/httpx_sse/_api.py", line 40, in iter_sse\n'
        '  File "/home/me/app/stream.py", line 12, in handle\n'
        "KeyError: 'choices'\n"
    )
    assert attribute_crash(stderr) is None
    assert attribute_crash("Segmentation fault\n") is None


def test_a_node_crash_inside_node_modules_is_named_from_package_json(tmp_path: Path) -> None:
    pkg = tmp_path / "node_modules" / "eventsource-parser"
    (pkg / "dist").mkdir(parents=True)
    (pkg / "package.json").write_text('{"name": "eventsource-parser", "version": "3.1.1"}')
    stderr = (
        "file:///app/client.mjs:11\n"
        "SyntaxError: Unexpected end of JSON input\n"
        "    at JSON.parse (<anonymous>)\n"
        f"    at Object.onEvent ({pkg}/dist/index.js:120:17)\n"
        "    at file:///app/client.mjs:11:20\n"
    )
    found = attribute_crash(stderr)
    assert found == CrashSite(
        "eventsource-parser", "3.1.1", "eventsource-parser/dist/index.js", 120
    )


# ------------------------------------------------------------------ sse-proxy diagnose


def _diagnose_cli(got: str, *args: str) -> tuple[int, str, str]:
    from tests.support.cli import run_cli

    done = run_cli("diagnose", *args, stdin=got.encode("utf-8"))
    return done.returncode, done.stdout.decode(), done.stderr.decode()


def test_the_diagnose_command_gives_test_clients_verdict_in_the_clients_language() -> None:
    from sse_proxy.tools import fixtures

    expected = fixtures.expected_text("openai")
    cut = expected.replace("ç", "\ufffd\ufffd").replace("€", "\ufffd\ufffd\ufffd")
    code, out, err = _diagnose_cli(cut, "--dialect", "openai", "--strategy", "utf8", "--lang", "js")
    assert code == 1, err
    assert out.startswith("sse-proxy diagnose (utf8): character boundary\n")
    assert "  evidence: 5 U+FFFD in the output: a read ended inside" in out
    assert "  spec rule: utf8: a read may end inside a multi-byte UTF-8 character" in out
    assert "  fix (javascript): create one TextDecoder per stream" in out
    code, out, _ = _diagnose_cli(cut, "--dialect", "openai", "--lang", "python", "--json")
    verdict = json.loads(out)
    assert code == 1
    assert verdict["passed"] is False
    assert verdict["family"] == "character boundary"
    assert verdict["lang"] == "python"
    assert "codecs.getincrementaldecoder" in verdict["fix"]
    assert verdict["first_difference"].startswith("at character ")
    code, out, _ = _diagnose_cli(expected + "\n", "--dialect", "openai", "--json")
    assert code == 0  # one trailing newline is ignored, as test-client ignores it
    assert json.loads(out)["passed"] is True


def test_the_diagnose_command_tells_a_rewrite_from_a_cut_and_names_a_shape(tmp_path: Path) -> None:
    from sse_proxy.rechunk.shapes.openai_chat import REASONING
    from sse_proxy.tools import fixtures

    expected = fixtures.expected_text("openai")
    lost_first = expected[len("The") :]
    code, out, _ = _diagnose_cli(lost_first, "--dialect", "openai", "--strategy", "bom")
    assert code == 1
    assert "spec conformance (bom)" in out
    assert "must be skipped once" in out
    mine = tmp_path / "expected.txt"
    mine.write_text(expected, encoding="utf-8")
    code, out, _ = _diagnose_cli(lost_first, "--expected", str(mine))
    assert "frame boundary" in out  # without the strategy: missing text is a lost frame
    code, out, _ = _diagnose_cli(
        "".join(REASONING) + expected,
        *("--dialect", "openai", "--strategy", "reasoning_content", "--lang", "python", "--json"),
    )
    verdict = json.loads(out)
    assert verdict["family"] == "stream shape (null content: reasoning_content chunk)"
    assert '"reasoning_content":"Let me"' in verdict["chunk"]
    assert "DeepSeek" in verdict["providers"]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "one of the arguments --expected --dialect is required"),
        (["--dialect", "cobol"], "--dialect must be one of"),
        (["--dialect", "openai", "--lang", "cobol"], "--lang must be one of"),
        (["--dialect", "openai", "--strategy", "nope"], "--strategy: unknown chaos strategy"),
        (["--expected", "/nonexistent/x.txt"], "--expected: cannot read"),
        (["--expected", "-"], "--expected and --got cannot both read stdin"),
    ],
)
def test_the_diagnose_commands_usage_errors_are_one_line(args: list[str], message: str) -> None:
    code, out, err = _diagnose_cli("x", *args)
    assert code == 2
    assert message in err
    assert len(err.strip().splitlines()) == 1
    assert out == ""
