"""`sse-proxy test-client` end to end, with real clients and buggy ones as separate processes."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from proxy import fixtures
from proxy.rechunk.spec import REWRITES, STRATEGIES
from tests.timing import assert_fired_on_time
from tests.toolkit._util import CLIENTS, ROOT, cli_env, write_recording

CLI = [sys.executable, "-m", "proxy"]
RECHUNK = ",".join(["baseline", *STRATEGIES])
ALL_SINGLE = ",".join(["baseline", *STRATEGIES, *REWRITES])


def client(name: str) -> list[str]:
    return [sys.executable, "-m", f"{CLIENTS}.{name}"]


@dataclass
class Run:
    code: int
    stdout: str
    stderr: str
    report: dict[str, Any]

    def outcomes(self, group: str) -> dict[str, int]:
        return {k: v for k, v in self.report["summary"][group].items() if v and k != "cases"}

    def cases(self, group: str) -> list[dict[str, Any]]:
        return [c for c in self.report["cases"] if c["group"] == group]

    def families(self, group: str) -> set[str]:
        return {c["diagnosis"]["family"] for c in self.cases(group) if "diagnosis" in c}


def run_test_client(tmp_path: Path, command: list[str], *args: str, timeout: float = 120) -> Run:
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [*CLI, "test-client", "--report", str(report), *args, "--", *command],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        timeout=timeout,
        check=False,
    )
    data = json.loads(report.read_text()) if report.exists() else {}
    return Run(proc.returncode, proc.stdout.decode(), proc.stderr.decode(), data)


def test_a_correct_client_passes_every_case_including_every_cut(tmp_path: Path) -> None:
    """A spec-correct client passes all strategies, rewrites, combos and all 130 text cuts."""
    run = run_test_client(
        tmp_path, client("reference"), "--dialect", "text", "--seeds", "1", "--jobs", "4"
    )
    assert run.code == 0, run.stdout
    assert run.report["passed"] is True
    assert len(run.cases("cut")) == len(fixtures.clean_stream("text", fixtures.SHORT_TOKENS)) - 1
    assert set(run.report["summary"]) >= {"baseline", *STRATEGIES, *REWRITES, "utf8+crlf", "cut"}
    assert "cases, " in run.stdout
    assert " 0 failed" in run.stdout
    assert "test-client: utf8: all passed" in run.stderr  # plain progress lines off a TTY


def test_openai_sdk_passes_every_rechunking_strategy_and_fails_only_dataless(
    tmp_path: Path,
) -> None:
    """The official openai SDK survives every cut; of the rewrites only data-less blocks break it.

    Observed with openai 3.57.0: a ``retry:``- or ``event:``-only block reaches
    ``json.loads("")`` and raises; a leading BOM costs it the first event, which in Chat
    Completions is the role chunk with empty content, so the text is still right.
    """
    run = run_test_client(tmp_path, client("openai_chat"), "--only", ALL_SINGLE, "--seeds", "1")
    for group in ["baseline", *STRATEGIES]:
        assert run.outcomes(group) == {"pass": 1}, (group, run.stdout)
    for group in REWRITES:
        expected = {"crash": 1} if group == "dataless" else {"pass": 1}
        assert run.outcomes(group) == expected, (group, run.stdout)
    assert run.families("dataless") == {"parser (crash)"}
    assert "JSONDecodeError" in run.cases("dataless")[0]["stderr_tail"]
    assert run.code == 1


def _stream_with_ids() -> list[tuple[float, bytes]]:
    frames = fixtures.openai_chat_stream(fixtures.SHORT_TOKENS).split(b"\n\n")[:-1]
    body = b"".join(b"id: %d\n%s\n\n" % (i, f) for i, f in enumerate(frames))
    return [(0.0, body)]


def test_openai_sdk_breaks_on_a_blank_line_after_an_id(tmp_path: Path) -> None:
    """With ``id:`` lines in the stream, an extra blank line makes openai 3.57.0 raise."""
    rec = write_recording(tmp_path / "ids.ssrec", _stream_with_ids())
    run = run_test_client(
        tmp_path,
        client("openai_chat"),
        "--fixture",
        str(rec),
        "--only",
        "baseline,blank_lines",
        "--seeds",
        "1",
    )
    assert run.outcomes("baseline") == {"pass": 1}, run.stdout
    assert run.outcomes("blank_lines") == {"crash": 1}, run.stdout
    assert "JSONDecodeError" in run.cases("blank_lines")[0]["stderr_tail"]


def test_httpx_sse_passes_every_rechunking_strategy_and_its_rewrite_verdicts(
    tmp_path: Path,
) -> None:
    """httpx-sse survives every cut; it hands data-less blocks on and keeps a leading BOM.

    Observed with httpx-sse 0.4.3: ``retry:``/``event:``-only blocks arrive as events with
    empty data (the client's ``json.loads`` then raises), and with a BOM the first event
    is lost, which in the raw-text dialect is the first word.
    """
    run = run_test_client(
        tmp_path, client("httpx_sse_client"), "--only", ALL_SINGLE, "--seeds", "1"
    )
    for group in ["baseline", *STRATEGIES, *(r for r in REWRITES if r != "dataless")]:
        assert run.outcomes(group) == {"pass": 1}, (group, run.stdout)
    assert run.outcomes("dataless") == {"crash": 1}
    text = run_test_client(
        tmp_path,
        client("httpx_sse_client"),
        "--dialect",
        "text",
        "--only",
        "bom,crlf,cr",
        "--seeds",
        "1",
    )
    assert text.outcomes("crlf") == text.outcomes("cr") == {"pass": 1}
    assert text.families("bom") == {"spec conformance (bom)"}
    assert text.cases("bom")[0]["first_difference"].startswith("at character 0")


def test_decoding_each_read_alone_is_diagnosed_as_a_character_boundary_bug(
    tmp_path: Path,
) -> None:
    """A client that decodes every read on its own fails utf8 with U+FFFD: character boundary."""
    run = run_test_client(
        tmp_path, client("decode_each_read"), "--only", "baseline,utf8", "--seeds", "1"
    )
    assert run.code == 1
    assert run.outcomes("baseline") == {"pass": 1}
    assert run.families("utf8") == {"character boundary"}
    assert "== utf8: 1 of 1 failed" in run.stdout
    assert "reproduce: sse-proxy test-client --dialect openai --only utf8 --seed 1 --" in run.stdout
    assert "sse-proxy serve --upstream http://127.0.0.1:8788" in run.stdout


def test_every_cut_inside_a_character_and_only_those_break_a_per_read_decoder(
    tmp_path: Path,
) -> None:
    """Over all two-way cuts, exactly the cuts inside multi-byte characters fail."""
    run = run_test_client(
        tmp_path, client("decode_each_read"), "--dialect", "text", "--only", "cut", "--jobs", "4"
    )
    data = fixtures.clean_stream("text", fixtures.SHORT_TOKENS)
    inside = {c for c in range(1, len(data)) if data[c] & 0xC0 == 0x80}
    failing = {c["cut"] for c in run.cases("cut") if c["outcome"] != "pass"}
    assert failing == inside
    assert run.families("cut") == {"character boundary"}
    assert "the cut falls inside the 4-byte character '🦊' (byte 1 of it)" in run.stdout


def test_splitting_each_read_on_blank_lines_is_diagnosed_as_a_frame_boundary_bug(
    tmp_path: Path,
) -> None:
    """A client that splits each read on blank lines without buffering loses frames."""
    run = run_test_client(
        tmp_path, client("split_each_read"), "--only", "baseline,bytewise,random", "--seeds", "1"
    )
    assert run.code == 1
    assert run.outcomes("baseline") == {"pass": 1}
    assert run.families("bytewise") == run.families("random") == {"frame boundary"}


def test_trimming_data_values_is_diagnosed_as_whitespace_trimming(tmp_path: Path) -> None:
    """A client that trims data values glues words together: whitespace trimming."""
    run = run_test_client(
        tmp_path,
        client("trim_values"),
        "--dialect",
        "text",
        "--only",
        "baseline,random",
        "--seeds",
        "1",
    )
    assert run.code == 1
    assert run.families("baseline") == run.families("random") == {"whitespace trimming"}
    assert "The baseline failed" in run.stdout
    assert 'first difference at character 3: expected "The quick brown' in run.stdout


def test_the_bom_and_data_less_block_bugs_are_caught_by_the_rewrites(tmp_path: Path) -> None:
    """A strict ``data:`` prefix plus JSON-parsing every block passes cuts, fails bom/dataless."""
    run = run_test_client(
        tmp_path,
        client("strict_data_prefix"),
        "--only",
        "random,crlf,bom,dataless,keepalive",
        "--seeds",
        "1",
    )
    assert run.outcomes("random") == run.outcomes("crlf") == {"pass": 1}
    for group in ("bom", "dataless", "keepalive"):
        assert run.outcomes(group) == {"crash": 1}, group
        assert run.cases(group)[0]["diagnosis"]["rule"]
    assert "spec rule: bom: the stream starts with a UTF-8 BOM" in run.stdout


def test_a_hanging_client_is_killed_at_the_timeout_and_reported(tmp_path: Path) -> None:
    """A client that never exits is killed after --timeout and diagnosed as a parser hang."""
    hang = [
        sys.executable,
        "-c",
        "import sys, time; print('half'); sys.stdout.flush(); time.sleep(60)",
    ]
    run = run_test_client(
        tmp_path, hang, "--only", "baseline", "--seeds", "1", "--timeout", "1", timeout=30
    )
    assert run.code == 1
    assert run.outcomes("baseline") == {"hang": 1}
    waited = run.cases("baseline")[0]["duration_s"]
    assert_fired_on_time(waited, 1.0, "the hanging client was killed at --timeout", before=10)
    assert "parser (hang)" in run.stdout


def test_a_crashing_client_gets_its_exit_status_and_stderr_tail_reported(
    tmp_path: Path,
) -> None:
    """A non-zero exit is a parser crash, shown with the client's stderr tail."""
    crash = [
        sys.executable,
        "-c",
        "import sys; sys.stderr.write('boom: bad frame\\n'); sys.exit(3)",
    ]
    run = run_test_client(
        tmp_path, crash, "--only", "utf8", "--seeds", "1", "--junit", str(tmp_path / "junit.xml")
    )
    assert run.code == 1
    case = run.cases("utf8")[0]
    assert (case["outcome"], case["exit_code"]) == ("crash", 3)
    assert "exited with status 3" in run.stdout
    assert "boom: bad frame" in run.stdout
    suite = ET.parse(tmp_path / "junit.xml").getroot().find("testsuite")
    assert suite is not None
    assert suite.get("failures") == "1"


@pytest.mark.parametrize(
    ("args", "message"),
    [
        ([], "needs a command to test"),
        (["--", "no-such-client-xyz"], "command not found: 'no-such-client-xyz'"),
        (["--only", "bogus", "--", "true"], "unknown chaos strategy 'bogus'"),
        (["--fixture", "/nonexistent.ssrec", "--", "true"], "cannot read"),
        (["--seeds", "0", "--", "true"], "must be at least 1"),
        (["--dialect", "klingon", "--", "true"], "invalid choice"),
        (["--timeout", "0", "--", "true"], "--timeout must be a positive number"),
        (["--junit", "/no/such/dir/j.xml", "--", "true"], "--junit: no such directory"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(args: list[str], message: str) -> None:
    """Bad usage is one clear line on stderr and exit 2, never a traceback."""
    proc = subprocess.run(
        [*CLI, "test-client", *args],
        capture_output=True,
        timeout=30,
        check=False,
        env=cli_env(),
        cwd=ROOT,
    )
    err = proc.stderr.decode()
    assert proc.returncode == 2, err
    assert message in err
    assert "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


@pytest.fixture(scope="module")
def eventsource_parser_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A directory with eventsource-parser installed from npm, or a skip."""
    if shutil.which("node") is None or shutil.which("npm") is None:
        pytest.skip("node and npm are not on PATH")
    where = tmp_path_factory.mktemp("node-client")
    try:
        proc = subprocess.run(
            ["npm", "install", "--no-audit", "--no-fund", "--silent", "eventsource-parser@3"],
            cwd=where,
            capture_output=True,
            timeout=180,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.skip("npm install eventsource-parser timed out (no network?)")
    if proc.returncode != 0 or not (where / "node_modules" / "eventsource-parser").is_dir():
        pytest.skip(f"npm install eventsource-parser failed (no network?): {proc.stderr[-200:]!r}")
    shutil.copy(ROOT / "tests" / "toolkit" / "clients" / "eventsource_parser.mjs", where)
    return where


@pytest.mark.slow
def test_a_node_client_using_eventsource_parser(
    tmp_path: Path, eventsource_parser_dir: Path
) -> None:
    """eventsource-parser passes every strategy and rewrite on OpenAI streams.

    Observed with eventsource-parser 3.1.1: when a stream's last blank line ends in a bare
    CR, the last event is lost even after ``reset({consume: true})`` (it reports an
    unknown field "\\r"); in the raw-text dialect that last event is text, so ``cr`` fails.
    """
    node = ["node", str(eventsource_parser_dir / "eventsource_parser.mjs")]
    run = run_test_client(tmp_path, node, "--only", ALL_SINGLE, "--seeds", "1")
    assert run.code == 0, run.stdout
    text = run_test_client(tmp_path, node, "--dialect", "text", "--only", "crlf,cr", "--seeds", "1")
    assert text.outcomes("crlf") == {"pass": 1}
    assert text.families("cr") == {"spec conformance (cr)"}
    assert text.cases("cr")[0]["first_difference"].endswith('got ..."nd of answer"')
