"""The `shapes` and `tokens` groups end to end: the clients of the issue's three bugs are
caught with a shape diagnosis that names the chunk and the provider; the tool-call bugs
are told apart; a correct client passes; severity and ``--fail-on``.

Each run is the real CLI (``python -m sse_proxy test-client``) with a small client
program, on a chosen subset of cases: the whole groups against every SDK are in
tests/tools/test_shapes_sdks.py (in-process, through a real proxy).
"""

from __future__ import annotations

import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from sse_proxy.cli import main
from sse_proxy.tools.fixtures.tools import TOOL_LINE
from sse_proxy.tools.fixtures.variants import VARIANTS, hint_for
from tests.support.cli import ROOT
from tests.tools.test_e2e_clients import client, run_test_client

EMPTY_CHOICES = "shapes:azure,shapes:include_usage,shapes:usage_chunks"


def test_an_unguarded_choices_0_is_caught_on_azure_and_include_usage(tmp_path: Path) -> None:
    """A crash on the chunks whose ``choices`` is empty, diagnosed with the chunk, the
    providers that send it and a Python hint; the other shapes pass. ``include_usage``
    needs a request that asks for it: forced here (``--all-shapes``), and marked so."""
    run = run_test_client(
        tmp_path,
        client("choices_unguarded"),
        "--only",
        f"baseline,{EMPTY_CHOICES},shapes:reasoning_content,tokens:chars",
        "--seeds",
        "1",
        "--all-shapes",
    )
    assert run.code == 1
    assert run.outcomes("baseline") == {"pass": 1}
    shapes = {c["strategy"]: c for c in run.cases("shapes")}
    assert {n: c["outcome"] for n, c in shapes.items()} == {
        "azure": "crash",
        "include_usage": "crash",
        "usage_chunks": "crash",
        "reasoning_content": "pass",
    }
    azure = shapes["azure"]["diagnosis"]
    assert azure["family"] == "stream shape (empty choices: Azure first chunk)"
    assert '"choices":[]' in azure["chunk"]
    assert "prompt_filter_results" in azure["chunk"]
    assert "Azure OpenAI" in azure["providers"]
    assert "langfuse/langfuse#2833" in azure["sources"]
    assert 'chunk.get("choices") or []' in azure["hint"]  # the client is Python
    last = shapes["include_usage"]["diagnosis"]
    assert last["family"] == "stream shape (empty choices: include_usage final chunk)"
    assert shapes["include_usage"]["forced"] == (
        "forced: the request did not ask for stream_options.include_usage: true"
    )
    assert "forced" not in shapes["azure"]  # Azure sends it whatever the request says
    assert '"usage":{' in last["chunk"]
    assert (
        "shapes: 3 of 4 variants failed: stream shape (empty choices: Azure first chunk, "
        "include_usage final chunk, usage-only control chunk)"
    ) in run.stdout
    assert "IndexError" in shapes["azure"]["stderr_tail"]
    assert "reproduce: sse-proxy test-client --dialect openai --only shapes:azure --" in run.stdout
    assert "--mode chaos --chaos azure --seed 1" in shapes["azure"]["by_hand"]
    assert 'the chunk: data: {"choices":[]' in run.stdout  # the short report names it
    assert "sent by:   Azure OpenAI" in run.stdout
    assert all(c["severity"] == "real" for c in run.report["cases"])


def test_content_get_with_a_default_is_caught_on_null_content(tmp_path: Path) -> None:
    """The issue's second bug: ``delta.get("content", "")`` is None beside reasoning."""
    run = run_test_client(
        tmp_path,
        client("content_default"),
        "--only",
        "shapes:reasoning_content,shapes:reasoning,shapes:azure",
        "--seeds",
        "1",
    )
    assert run.code == 1
    outcomes = {c["strategy"]: c["outcome"] for c in run.cases("shapes")}
    assert outcomes == {"reasoning_content": "crash", "reasoning": "pass", "azure": "pass"}
    (case,) = [c for c in run.cases("shapes") if c["outcome"] != "pass"]
    diagnosis = case["diagnosis"]
    assert diagnosis["family"] == "stream shape (null content: reasoning_content chunk)"
    assert '"content":null' in diagnosis["chunk"]
    assert "DeepSeek" in diagnosis["providers"]
    assert 'delta.get("content") or ""' in diagnosis["hint"]
    assert "TypeError" in case["stderr_tail"]


def test_text_of_every_anthropic_delta_is_caught_on_thinking_and_citations(
    tmp_path: Path,
) -> None:
    """``delta["text"]`` on every ``content_block_delta``: caught where the request asks
    for thinking, citations or a server tool (forced here), not applicable otherwise."""
    run = run_test_client(
        tmp_path,
        client("anthropic_text_only"),
        *("--dialect", "anthropic", "--only", "shapes", "--all-shapes"),
    )
    assert run.code == 1
    outcomes = {c["strategy"]: c["outcome"] for c in run.cases("shapes")}
    assert outcomes == {
        "ping": "pass",
        "thinking": "crash",
        "text_blocks": "pass",
        "citations": "crash",
        "server_tool": "crash",
    }
    by_name = {c["strategy"]: c["diagnosis"] for c in run.cases("shapes") if "diagnosis" in c}
    assert by_name["thinking"]["family"] == "stream shape (non-text delta: thinking_delta)"
    assert '"type":"thinking_delta"' in by_name["thinking"]["chunk"]
    assert '"type":"citations_delta"' in by_name["citations"]["chunk"]
    assert '"type":"input_json_delta"' in by_name["server_tool"]["chunk"]
    assert 'if delta["type"] == "text_delta"' in by_name["thinking"]["hint"]
    assert "KeyError: 'text'" in run.cases("shapes")[1]["stderr_tail"]
    # the chunk's event: and data: lines one under the other in the short report
    assert (
        "  the chunk: event: content_block_delta\n"
        '             data: {"type":"content_block_delta","index":0,"delta":{"type":"thinking'
    ) in run.stdout


@pytest.mark.parametrize("dialect", ["openai", "anthropic"])
def test_a_correct_client_passes_every_shape_and_token_variant(
    tmp_path: Path, dialect: str
) -> None:
    """With the tool calls (the variants that re-shape calls run then too), every variant
    forced (``--all-shapes``: its request asks for neither thinking nor n > 1). The two
    dialects with the most shapes; every dialect's every variant is assembled by the SDKs
    in tests/tools/test_shapes_sdks.py and by the core in tests/core/test_variants.py."""
    run = run_test_client(
        tmp_path,
        client("reference"),
        "--dialect",
        dialect,
        "--tools",
        "--all-shapes",
        "--only",
        "baseline,shapes,tokens",
        "--seeds",
        "1",
        "--jobs",
        "4",
    )
    assert run.code == 0, run.stdout
    assert run.report["passed"] is True
    assert run.report["tools"] is True
    assert run.outcomes("shapes") == {"pass": run.report["summary"]["shapes"]["cases"]}
    assert run.outcomes("tokens") == {"pass": 6}
    assert TOOL_LINE.strip() in run.report["expected_text"]


def test_a_correct_client_passes_the_token_variants_of_raw_text(tmp_path: Path) -> None:
    run = run_test_client(tmp_path, client("reference"), "--dialect", "text", "--only", "tokens")
    assert run.code == 0, run.stdout
    assert run.outcomes("tokens") == {"pass": 8}  # retokenize once per seed (3)


def test_parsing_each_tool_call_fragment_is_diagnosed(tmp_path: Path) -> None:
    run = run_test_client(tmp_path, client("tool_parse_fragments"), "--tools", "--seeds", "1")
    assert run.code == 1
    (case,) = run.cases("baseline")  # the run stops at the baseline: every case would fail
    assert case["diagnosis"]["family"] == "tool calls (arguments parsed per fragment)"
    assert "JSONDecodeError" in case["stderr_tail"]
    assert run.report["cases_not_run"] > 0


def test_merging_parallel_tool_calls_is_diagnosed(tmp_path: Path) -> None:
    run = run_test_client(
        tmp_path, client("tool_merge_calls"), "--tools", "--only", "baseline", "--seeds", "1"
    )
    (case,) = run.cases("baseline")
    assert case["outcome"] == "wrong"
    assert case["diagnosis"]["family"] == "tool calls (parallel calls merged)"
    assert (
        "3 calls (get_weather, get_time, get_location) came out as 1"
        in (case["diagnosis"]["reason"])
    )


def test_dropping_the_fragment_with_the_id_is_caught_and_fail_on_picks_the_severity(
    tmp_path: Path,
) -> None:
    """It passes OpenAI's own shape (the announcing fragment has no arguments) and fails
    where the arguments come with the id: Gemini's whole calls (real), and a first
    fragment with id and arguments (spec-only)."""
    only = "baseline,shapes:tool_args_with_id,shapes:tool_args_chars,shapes:tool_args_whole"
    run = run_test_client(
        tmp_path, client("tool_drop_id_fragment"), "--tools", "--only", only, "--seeds", "1"
    )
    assert run.code == 1
    cases = {c["strategy"]: c for c in run.cases("shapes")}
    assert {n: c["outcome"] for n, c in cases.items()} == {
        "tool_args_with_id": "wrong",
        "tool_args_chars": "pass",
        "tool_args_whole": "wrong",
    }
    whole = cases["tool_args_whole"]
    assert whole["severity"] == "real"
    assert cases["tool_args_with_id"]["severity"] == "spec"
    assert "the fragment that carried the id" in whole["diagnosis"]["reason"]
    assert "Gemini (OpenAI-compatible endpoint)" in whole["diagnosis"]["providers"]
    assert run.report["cases_failed_by_severity"] == {"real": 1, "spec": 1}
    table = run.stdout.splitlines()
    rows = [line.split()[0] for line in table if line.split()[1:2] in (["real"], ["spec"])]
    assert rows == [  # real ones first, then spec-only, each in the order asked
        "shapes:tool_args_whole",
        "shapes:tool_args_with_id",
        "shapes:tool_args_chars",
    ]
    spec_only = run_test_client(
        tmp_path,
        client("tool_drop_id_fragment"),
        "--tools",
        "--only",
        "shapes:tool_args_with_id",
        "--fail-on",
        "real",
    )
    assert spec_only.code == 0, spec_only.stdout
    assert spec_only.report["passed"] is True
    assert spec_only.report["cases_failed"] == 1
    assert "do not fail the run: --fail-on real" in spec_only.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--tools", "--dialect", "text"], "the text dialect has no tool calls"),
        (["--only", "shapes:thinking"], "'thinking' is not a variant for this fixture"),
        (["--only", "shapes:tool_args_whole"], "with --tools for the tool-call ones"),
        (["--fail-on", "sometimes"], "--fail-on takes real, spec or both"),
    ],
)
def test_usage_errors_are_one_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["test-client", *args, "--", "true"]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert len(err.strip().splitlines()) == 1


def test_a_client_that_reads_every_choice_and_asks_for_one_passes_every_group(
    tmp_path: Path,
) -> None:
    """Joining every choice of a chunk is right for a request without ``n``: providers
    send it choice 0 only. ``choices_n2`` (and ``include_usage``, not asked for either) is
    not applicable to it, shown as such in every report and failing nothing."""
    junit, html = tmp_path / "report.xml", tmp_path / "report.html"
    run = run_test_client(
        tmp_path,
        client("every_choice"),
        *("--seeds", "1", "--jobs", "4", "--junit", str(junit), "--html", str(html)),
    )
    assert run.code == 0, run.stdout
    assert run.report["passed"] is True
    assert run.report["cases_failed"] == 0
    assert {g for g, s in run.report["summary"].items() if s["cases"]} >= {
        "baseline",
        "utf8",
        "bom",
        "shapes",
        "tokens",
        "faults",
    }
    skipped = {c["strategy"]: c for c in run.cases("shapes") if c["outcome"] == "not_applicable"}
    assert set(skipped) == {"choices_n2", "include_usage"}
    assert skipped["choices_n2"]["requires"] == "n > 1"
    assert skipped["choices_n2"]["reason"] == "not applicable: the request did not ask for n > 1"
    assert "diagnosis" not in skipped["choices_n2"]
    assert run.report["cases_not_applicable"] == 2
    assert run.report["summary"]["shapes"]["not_applicable"] == 2
    assert "shapes:choices_n2 " in run.stdout
    assert "not applicable: the request did not ask for n > 1" in run.stdout
    assert ", 0 failed, 2 not applicable to this client's request" in run.stdout
    suite = ET.parse(junit).getroot().find("testsuite")
    assert suite is not None
    assert (suite.get("failures"), suite.get("skipped")) == ("0", "2")
    case = suite.find("testcase[@name='shapes:choices_n2']/skipped")
    assert case is not None
    assert case.get("message") == "not applicable: the request did not ask for n > 1"
    page = html.read_text()
    assert "not applicable: the request did not ask for n &gt; 1" in page


def test_all_shapes_forces_them_and_every_report_says_so(tmp_path: Path) -> None:
    junit, html = tmp_path / "report.xml", tmp_path / "report.html"
    only = "shapes:choices_n2,shapes:include_usage"
    run = run_test_client(
        tmp_path,
        client("every_choice"),
        *("--all-shapes", "--only", only, "--junit", str(junit), "--html", str(html)),
    )
    assert run.code == 1
    cases = {c["strategy"]: c for c in run.cases("shapes")}
    assert (cases["choices_n2"]["outcome"], cases["include_usage"]["outcome"]) == ("wrong", "pass")
    forced = "forced: the request did not ask for n > 1"
    assert cases["choices_n2"]["forced"] == forced
    assert cases["choices_n2"]["diagnosis"]["family"] == (
        "stream shape (several choices: choice 1 chunk)"
    )
    assert run.report["all_shapes"] is True
    assert f"FAIL: stream shape (several choices: choice 1 chunk) ({forced})" in run.stdout
    assert f"  {forced} (--all-shapes)" in run.stdout
    assert "--all-shapes --only shapes:choices_n2 --" in cases["choices_n2"]["reproduce"]
    assert "--chaos-force" in cases["choices_n2"]["by_hand"]
    tc = ET.parse(junit).getroot().find(".//testcase[@name='shapes:choices_n2']")
    assert tc is not None
    prop = tc.find("properties/property[@name='forced']")
    assert prop is not None
    assert prop.get("value") == forced
    failure = tc.find("failure")
    assert failure is not None
    assert forced in (failure.get("message") or "")
    assert "wrong (forced)" in html.read_text()


def test_the_reference_node_client_reads_every_choice_and_passes(tmp_path: Path) -> None:
    """The reference fetch client (sse_proxy/recipes/javascript/sse-client.mjs) joins every
    choice's content: not applicable, not wrong (the whole of its other groups:
    tests/tools/test_javascript.py)."""
    run = run_test_client(
        tmp_path,
        ["node", str(ROOT / "sse_proxy" / "recipes" / "javascript" / "sse-client.mjs")],
        *("--only", "baseline,shapes,tokens,faults", "--seeds", "1", "--jobs", "4"),
    )
    assert run.code == 0, run.stdout
    outcomes = {c["strategy"]: c["outcome"] for c in run.cases("shapes")}
    assert outcomes["choices_n2"] == "not_applicable"
    assert all(o in ("pass", "not_applicable") for o in outcomes.values()), outcomes
    assert run.outcomes("faults") == {"pass": 4}


@pytest.mark.parametrize(
    ("name", "dialect", "variant", "tools", "outcome", "evidence"),
    [
        (
            "reasoning_elif",
            "openai",
            "reasoning_with_content",
            False,
            "wrong",
            'expected "The quick br"..., got " quick brown"',
        ),
        ("tool_calls_elif", "openai", "tool_calls_empty", False, "wrong", "printed 0 of"),
        ("usage_skips_chunk", "openai", "usage_on_last_choice", False, "wrong", "then stopped"),
        ("responses_current_item", "responses", "late_item_done", True, "wrong", "4 calls"),
        ("gemini_args_required", "gemini", "function_call_no_args", True, "wrong", "2 of 3"),
        ("gemini_signature_is_call", "gemini", "signature_apart", True, "crash", "status 1"),
    ],
)
def test_each_protocol_shape_of_2026_catches_a_client_with_its_bug(
    tmp_path: Path,
    name: str,
    dialect: str,
    variant: str,
    tools: bool,
    outcome: str,
    evidence: str,
) -> None:
    """Each client reads whole frames right (the baseline passes) and has the one bug the
    reports about its shape describe; the SDKs assemble every shape
    (tests/tools/test_shapes_sdks.py)."""
    run = run_test_client(
        tmp_path,
        client(name),
        *("--dialect", dialect, "--only", f"baseline,shapes:{variant}", "--seed", "1"),
        *(["--tools"] if tools else []),
    )
    assert run.code == 1, run.stdout
    assert run.outcomes("baseline") == {"pass": 1}
    (case,) = run.cases("shapes")
    assert case["outcome"] == outcome, case
    diagnosis = case["diagnosis"]
    assert diagnosis["family"] == VARIANTS[variant].family
    assert evidence in diagnosis["reason"]
    assert diagnosis["providers"] == list(VARIANTS[variant].providers)
    assert diagnosis["hint"] == hint_for(VARIANTS[variant], "python")
    assert "forced" not in case  # sent whatever the request (with its tools) says
