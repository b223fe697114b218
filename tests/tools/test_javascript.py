"""The JavaScript path, with real node: the reference fetch client, the one bug JavaScript
libraries keep shipping (a fresh ``TextDecoder`` per read), and the node:test and vitest
recipes of docs/javascript.md run against both."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import CLI, ROOT, cli_env

JS = ROOT / "docs" / "javascript"
REFERENCE = JS / "sse-client.mjs"
CORRECT_LINE = "pending += decoder.decode(chunk, { stream: true });"
BUGGY_LINE = "pending += new TextDecoder().decode(chunk); // the bug: a decoder per read"


@pytest.fixture(scope="module")
def buggy_client(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The reference client with the bug of ollama-js#255 and friends put in."""
    source = REFERENCE.read_text()
    assert source.count(CORRECT_LINE) == 1
    where = tmp_path_factory.mktemp("buggy") / "buggy-client.mjs"
    where.write_text(source.replace(CORRECT_LINE, BUGGY_LINE))
    return where


def _env(**extra: str) -> dict[str, str]:
    env = cli_env(**extra)
    env["PATH"] = str(Path(sys.executable).parent) + os.pathsep + env["PATH"]
    return env


def _test_client(tmp_path: Path, client: Path, *args: str) -> tuple[int, str, dict[str, Any]]:
    report = tmp_path / f"{client.stem}.json"
    proc = subprocess.run(
        [*CLI, "test-client", "--report", str(report), *args, "--", "node", str(client)],
        cwd=ROOT,
        env=_env(),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    return proc.returncode, proc.stdout, json.loads(report.read_text())


def test_the_reference_fetch_client_passes_with_every_cut_read_apart(tmp_path: Path) -> None:
    code, out, report = _test_client(
        tmp_path,
        REFERENCE,
        "--only",
        "baseline,bytewise,utf8,random,cr,random+mixed_newlines+keepalive,faults",
        "--seeds",
        "1",
    )
    assert code == 0, out
    cut = [c for c in report["cases"] if c["delivery"] and c["delivery"]["cuts"]]
    assert {c["group"] for c in cut} >= {"bytewise", "utf8", "random"}
    assert all(c["delivery"]["read_apart"] == c["delivery"]["cuts"] for c in cut)
    assert report["delivery"]["read_apart"] == report["delivery"]["cuts"] > 0


def test_a_fresh_text_decoder_per_read_fails_utf8_and_random_every_time(
    tmp_path: Path, buggy_client: Path
) -> None:
    """Node's fetch hands the reader whatever one socket read holds; with every cut read
    apart the per-read decoder is caught on each seed, and the hint is JavaScript's (ten
    seeds each: bench/investigations/chaos_delivery.py)."""
    code, out, report = _test_client(
        tmp_path, buggy_client, "--only", "utf8,random", "--seeds", "2"
    )
    assert code == 1, out
    for case in report["cases"]:
        assert case["outcome"] == "wrong", case["name"]
        assert case["diagnosis"]["family"] == "character boundary"
        assert case["delivery"]["read_apart"] == case["delivery"]["cuts"], case["name"]
        assert "decoder.decode(chunk, {stream: true})" in case["diagnosis"]["hint"]
    assert len(report["cases"]) == 4
    utf8 = next(c for c in report["cases"] if c["group"] == "utf8")
    assert utf8["output"].count("\ufffd") >= 90  # each of the 90 cut characters is lost
    assert "fix (javascript): create one TextDecoder per stream" in out


def _node_test(client: Path, pattern: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["node", "--test", f"--test-name-pattern={pattern}", "chaos.node.test.mjs"],
        cwd=JS,
        env=_env(SSE_CLIENT=client.as_uri()),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_node_test_recipe_passes_a_correct_client_and_fails_a_buggy_one(
    buggy_client: Path,
) -> None:
    good = _node_test(REFERENCE, "^(utf8|random|cr|bom|utf8\\+crlf) seed=1$")
    assert good.returncode == 0, good.stdout + good.stderr
    assert re.search(r"^# pass 5$", good.stdout, re.M), good.stdout
    # utf8 and bytewise cut every character whatever the upstream's reads were (random's
    # cuts are drawn per upstream read: with a mock in a process of its own, those vary)
    bad = _node_test(buggy_client, "^(utf8|bytewise|crlf) seed=1$")
    assert bad.returncode != 0
    assert re.search(r"^# fail 2$", bad.stdout, re.M), bad.stdout  # crlf alone cuts nothing
    assert re.search(r"^# pass 1$", bad.stdout, re.M), bad.stdout


def _vitest(client: Path, pattern: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(JS / "node_modules" / ".bin" / "vitest"),
            "run",
            "chaos.vitest.test.mjs",
            "-t",
            pattern,
        ],
        cwd=JS,
        env=_env(SSE_CLIENT=client.as_uri(), CI="1", NO_COLOR="1"),
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_vitest_recipe_passes_a_correct_client_and_fails_a_buggy_one(
    buggy_client: Path,
) -> None:
    """vitest from npm, pinned, into docs/javascript (scripts/js-deps.sh: CI runs it too)."""
    subprocess.run(["bash", str(ROOT / "scripts" / "js-deps.sh")], check=True, timeout=600)
    good = _vitest(REFERENCE, "^(utf8|random|cr) seed=1$")
    assert good.returncode == 0, good.stdout + good.stderr
    assert re.search(r"Tests\s+3 passed", good.stdout), good.stdout
    bad = _vitest(buggy_client, "^(utf8|bytewise) seed=1$")
    assert bad.returncode != 0
    assert re.search(r"Tests\s+2 failed", bad.stdout), bad.stdout


def test_expected_text_prints_the_exact_text_and_nothing_else() -> None:
    from sse_proxy.tools import fixtures

    for dialect in ("openai", "text", "anthropic"):
        proc = subprocess.run(
            [*CLI, "expected-text", "--dialect", dialect],
            env=cli_env(),
            capture_output=True,
            timeout=60,
            check=True,
        )
        assert proc.stdout.decode() == fixtures.expected_text(dialect)
        assert proc.stderr == b""


def test_the_docs_page_shows_the_recipes_as_they_are_run() -> None:
    """docs/javascript.md quotes the files the tests above run, byte for byte."""
    page = (ROOT / "docs" / "javascript.md").read_text()
    blocks = re.findall(r"```js\n(.*?)```", page, re.S)
    for name in ("chaos.node.test.mjs", "chaos.vitest.test.mjs", "sse-client.mjs"):
        assert (JS / name).read_text() in blocks, name
