"""`sse-proxy test-client` end to end, with real clients and buggy ones as separate processes."""

from __future__ import annotations

import importlib.metadata
import json
import os
import shutil
import signal
import subprocess
import sys
import xml.etree.ElementTree as ET
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from sse_proxy.rechunk.spec import REWRITES, STRATEGIES
from sse_proxy.tools import fixtures
from tests.support.cli import CLI, ROOT, cli_env
from tests.support.recordings import CLIENTS, write_recording
from tests.support.timing import assert_fired_on_time

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
    assert run.outcomes("faults") == {"pass": 1}  # text: the reset, reported
    progress = [
        line.split(": ")[1]
        for line in run.stderr.splitlines()
        if line.startswith("test-client: ") and line.endswith(("all passed", "failed"))
    ]
    assert progress == list(run.report["summary"])  # in plan order, though run in parallel


def test_openai_sdk_passes_every_rechunking_strategy_and_fails_dataless_and_bom(
    tmp_path: Path,
) -> None:
    """The official openai SDK survives every cut; data-less blocks and a BOM break it.

    Observed with openai 3.57.0: a ``retry:``- or ``event:``-only block reaches
    ``json.loads("")`` and raises inside the SDK (the crash is attributed to it, with its
    version); a leading BOM costs it the first event, and since the rewrites serve a
    stream whose first event carries text, that text is missing.
    """
    run = run_test_client(tmp_path, client("openai_chat"), "--only", ALL_SINGLE, "--seeds", "1")
    for group in ["baseline", *STRATEGIES]:
        assert run.outcomes(group) == {"pass": 1}, (group, run.stdout)
    failing = {"dataless": {"crash": 1}, "bom": {"wrong": 1}}
    for group in REWRITES:
        assert run.outcomes(group) == failing.get(group, {"pass": 1}), (group, run.stdout)
    assert run.families("dataless") == {"parser (crash)"}
    assert run.families("bom") == {"spec conformance (bom)"}
    assert run.cases("bom")[0]["first_difference"].startswith("at character 0")
    assert "JSONDecodeError" in run.cases("dataless")[0]["stderr_tail"]
    site = run.cases("dataless")[0]["diagnosis"]["crash_site"]
    assert (site["package"], site["version"]) == ("openai", importlib.metadata.version("openai"))
    assert site["file"].startswith("openai/")
    assert f"crash inside openai {site['version']}, {site['file']}:{site['line']}" in run.stdout
    assert "spec rule: dataless: blocks with only retry:" in run.stdout
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
    for group in ["baseline", *STRATEGIES, *(r for r in REWRITES if r not in ("dataless", "bom"))]:
        assert run.outcomes(group) == {"pass": 1}, (group, run.stdout)
    assert run.outcomes("dataless") == {"crash": 1}
    assert run.families("bom") == {"spec conformance (bom)"}  # the first event carries text
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
    delivery = run.cases("utf8")[0]["delivery"]
    assert delivery["cuts"] >= 90  # a cut inside each of the 90 multi-byte characters
    assert delivery["read_apart"] == delivery["cuts"]
    assert "== character boundary: utf8 (1 case)" in run.stdout  # the short form
    assert f"{delivery['cuts']} of {delivery['cuts']} cuts read apart" in run.stdout
    assert "fix (python): decode with one codecs.getincrementaldecoder" in run.stdout
    assert "reproduce: sse-proxy test-client --dialect openai --only utf8 --seed 1 --" in run.stdout
    assert "by hand:" not in run.stdout
    verbose = run_test_client(
        tmp_path, client("decode_each_read"), "--only", "utf8", "--seeds", "1", "--verbose"
    )
    assert "== utf8: 1 of 1 failed" in verbose.stdout
    assert "by hand:   sse-proxy mock-upstream --port " in verbose.stdout


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
        "--keep-going",
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


JS_CLIENTS = ROOT / "tests" / "tools" / "clients"


@pytest.fixture(scope="module")
def eventsource_parser_dir() -> Path:
    """The client script's folder, with eventsource-parser (pinned by its package-lock.json)
    installed beside it by scripts/js-deps.sh; a missing node or package fails the test."""
    assert shutil.which("node") is not None, "node is not on PATH: run scripts/system-deps.sh"
    installed = JS_CLIENTS / "node_modules" / "eventsource-parser" / "package.json"
    assert installed.is_file(), "eventsource-parser is not installed: run scripts/js-deps.sh"
    return JS_CLIENTS


@pytest.mark.slow
def test_a_node_client_using_eventsource_parser(
    tmp_path: Path, eventsource_parser_dir: Path
) -> None:
    """eventsource-parser passes every strategy and rewrite on OpenAI streams.

    Observed with eventsource-parser 3.1.1: when a stream's last blank line ends in a bare
    CR, the last event is lost even after ``reset({consume: true})`` (it reports an
    unknown field "\\r"); in the raw-text dialect that last event is text, so ``cr`` fails,
    and the diagnosis names that rule (the final bare CR).
    """
    node = ["node", str(eventsource_parser_dir / "eventsource_parser.mjs")]
    run = run_test_client(tmp_path, node, "--only", ALL_SINGLE, "--seeds", "1")
    assert run.code == 0, run.stdout
    text = run_test_client(tmp_path, node, "--dialect", "text", "--only", "crlf,cr", "--seeds", "1")
    assert text.outcomes("crlf") == {"pass": 1}
    # the precise rule, not "spec conformance (cr)": the final line's bare CR
    assert text.families("cr") == {"spec conformance (final CR)"}
    assert text.cases("cr")[0]["diagnosis"]["rule"].startswith("final CR: ")
    assert text.cases("cr")[0]["first_difference"].endswith('got ..."nd of answer"')


@pytest.mark.parametrize(
    ("name", "combo", "family", "parts"),
    [
        ("lf_only", "boundaries+cr", "spec conformance (cr)", {"boundaries": None}),
        ("no_cr", "utf8+crlf", "spec conformance (crlf)", {"utf8": None}),
        (
            "space_required",
            "coalesce+bom+nospace",
            "spec conformance (nospace)",
            {"coalesce": None, "bom": None},
        ),
    ],
)
def test_a_combination_is_blamed_on_the_part_the_client_gets_wrong(
    tmp_path: Path, name: str, combo: str, family: str, parts: dict[str, None]
) -> None:
    """A client that buffers correctly but mishandles CR, CRLF or a missing space fails the
    combination for that reason, not as a "frame boundary ... buffer across reads" bug: its
    parts are run alone and the one that fails alone is named."""
    run = run_test_client(tmp_path, client(name), "--only", combo, "--seeds", "1")
    assert run.code == 1
    assert run.families(combo) == {family}, run.stdout
    case = run.cases(combo)[0]
    bad = family.split("(")[1].rstrip(")")
    assert case["parts"] == {**parts, bad: family}
    assert "buffer across reads" not in case["diagnosis"]["reason"]
    assert case["diagnosis"]["rule"].startswith(f"{bad}: ")


def test_faults_pass_a_careful_client_and_catch_a_silent_one(tmp_path: Path) -> None:
    """The faults group: the reference client reports every broken stream (exit != 0); a
    client that prints whatever arrived and exits 0 is flagged as silent truncation, except
    on a reset, which its HTTP library raises on."""
    careful = run_test_client(tmp_path, client("reference"), "--only", "faults")
    assert careful.code == 0, careful.stdout
    assert careful.outcomes("faults") == {"pass": 4}
    assert "ok: reported failure" in careful.stdout
    silent = run_test_client(tmp_path, client("lf_only"), "--only", "faults")
    assert silent.code == 1
    outcomes = {c["fault"]: c["outcome"] for c in silent.cases("faults")}
    assert outcomes == {
        "unterminated": "silent",
        "no_terminal": "silent",
        "error_event": "silent",
        "reset": "pass",
    }
    assert silent.families("faults") == {"silent truncation"}
    assert "FAIL: silent truncation" in silent.stdout
    truncated = silent.cases("faults")[0]
    assert 0 < len(truncated["output"]) < len(fixtures.MESSAGE)
    assert fixtures.MESSAGE.startswith(truncated["output"])


def test_gemini_faults_break_the_stream_with_gemini_s_own_end_and_error(tmp_path: Path) -> None:
    """Gemini's faults: its finishing chunk is what no_terminal drops, its error object what
    error_event sends; the reference client reports all four, a careless one none but
    the reset."""
    careful = run_test_client(
        tmp_path, client("reference"), "--dialect", "gemini", "--only", "faults"
    )
    assert careful.outcomes("faults") == {"pass": 4}, careful.stdout
    silent = run_test_client(tmp_path, client("lf_only"), "--dialect", "gemini", "--only", "faults")
    outcomes = {c["fault"]: c["outcome"] for c in silent.cases("faults")}
    assert outcomes == {
        "unterminated": "silent",
        "no_terminal": "silent",
        "error_event": "silent",
        "reset": "pass",
    }


def test_a_failing_baseline_stops_the_run_at_once(tmp_path: Path) -> None:
    """A client that never ends (an EventSource-style reconnect) hangs in the baseline; the
    run stops there instead of timing out in every other case."""
    hang = [sys.executable, "-c", "import time; time.sleep(60)"]
    run = run_test_client(tmp_path, hang, "--timeout", "1", "--seeds", "1", timeout=60)
    assert run.code == 1
    assert set(run.report["summary"]) == {"baseline"}
    assert run.outcomes("baseline") == {"hang": 1}
    assert run.report["cases_not_run"] > 10
    assert "--keep-going runs them anyway" in run.stdout
    assert "the baseline failed; stopping" in run.stderr
    skipped = run_test_client(
        tmp_path, client("reference"), "--only", "baseline,dataless,bom", "--skip", "dataless,bom"
    )
    assert set(skipped.report["summary"]) == {"baseline"}
    assert skipped.code == 0


def test_a_raw_capture_is_a_fixture_too(tmp_path: Path) -> None:
    """`--fixture` takes a raw `curl -N` capture: served as one read, dialect detected."""
    capture = tmp_path / "capture.sse"
    capture.write_bytes(fixtures.clean_stream("text", fixtures.SHORT_TOKENS))
    run = run_test_client(
        tmp_path, client("reference"), "--fixture", str(capture), "--only", "baseline,bom,utf8"
    )
    assert run.code == 0, run.stdout
    assert run.report["dialect"] == "text"
    assert run.report["expected_text"] == fixtures.SHORT_MESSAGE
    assert f"raw capture {capture}" in run.stdout
    notsse = tmp_path / "error.json"
    notsse.write_text('{"error": {"message": "Incorrect API key provided"}}')
    bad = subprocess.run(
        [*CLI, "test-client", "--fixture", str(notsse), "--", "true"],
        capture_output=True,
        timeout=30,
        check=False,
        env=cli_env(),
        cwd=ROOT,
    )
    assert bad.returncode == 2
    assert "is not an SSE stream: it looks like a JSON body" in bad.stderr.decode()


def test_the_by_hand_command_reproduces_the_failure_when_pasted_into_a_shell(
    tmp_path: Path,
) -> None:
    """The printed `by hand` line, run as is by `sh -c`, shows the same U+FFFD (the mock
    serving the first-event-text stream, as the case did)."""
    run = run_test_client(tmp_path, client("decode_each_read"), "--only", "utf8+bom", "--seed", "2")
    line = run.cases("utf8+bom")[0]["by_hand"]
    assert line.count("\n") == 0
    assert " --first-text " in line
    for name in ("SSE_PROXY_STREAM_URL", "SSE_PROXY_STREAM_BODY", "OPENAI_API_KEY"):
        assert f"{name}=" in line
    env = cli_env()
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    for key in ("OPENAI_API_KEY", "OPENAI_BASE_URL", "SSE_PROXY_STREAM_URL"):
        env.pop(key, None)
    proc = subprocess.Popen(
        ["sh", "-c", line],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
    assert "\ufffd" in out.decode("utf-8", "replace"), err.decode()[-2000:]
    assert out.decode("utf-8", "replace") != fixtures.MESSAGE
