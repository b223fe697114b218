"""The JavaScript path, with real node: the reference fetch client, the one bug JavaScript
libraries keep shipping (a fresh ``TextDecoder`` per read), the node:test and vitest
recipes of docs/javascript.md run against both (their failures are sse-proxy's diagnosis),
and the same recipes written out by `sse-proxy js-helper` into a fresh folder."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tests.support.cli import CLI, ROOT, cli_env

JS = ROOT / "docs" / "javascript"  # the recipes' pinned npm dependencies (vitest)
RECIPES = ROOT / "sse_proxy" / "recipes" / "javascript"  # the files `js-helper` writes out
REFERENCE = RECIPES / "sse-client.mjs"
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


def _node_test(
    client: Path, pattern: str, where: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["node", "--test", f"--test-name-pattern={pattern}", "chaos.node.test.mjs"],
        cwd=where,
        env={**_env(SSE_CLIENT=client.as_uri()), **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_node_test_recipe_passes_a_correct_client_and_fails_a_buggy_one(
    buggy_client: Path, fresh: Path
) -> None:
    good = _node_test(REFERENCE, "^(utf8|random|cr|bom|utf8\\+crlf) seed=1$", fresh)
    assert good.returncode == 0, good.stdout + good.stderr
    assert re.search(r"^# pass 5$", good.stdout, re.M), good.stdout
    # utf8 and bytewise cut every character whatever the upstream's reads were (random's
    # cuts are drawn per upstream read: with a mock in a process of its own, those vary)
    bad = _node_test(buggy_client, "^(utf8|bytewise|crlf) seed=1$", fresh)
    assert bad.returncode != 0
    assert re.search(r"^# fail 2$", bad.stdout, re.M), bad.stdout  # crlf alone cuts nothing
    assert re.search(r"^# pass 1$", bad.stdout, re.M), bad.stdout
    _assert_diagnosed(bad.stdout)


def _assert_diagnosed(out: str) -> None:
    """A failure says the family, the evidence and the JavaScript fix; no string diff."""
    assert "sse-proxy diagnose (utf8): character boundary" in out, out
    assert "U+FFFD in the output" in out
    assert "fix (javascript): create one TextDecoder per stream" in out
    assert "+ actual - expected" not in out  # node's assert diff
    assert "Expected:" not in out  # vitest's
    assert out.count("\ufffd") < 20  # the first difference, not the whole text twice


def _vitest(
    client: Path, pattern: str, where: Path, **env: str
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            str(where / "node_modules" / ".bin" / "vitest"),
            "run",
            "chaos.vitest.test.mjs",
            "-t",
            pattern,
        ],
        cwd=where,
        env={**_env(SSE_CLIENT=client.as_uri(), CI="1", NO_COLOR="1"), **env},
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def test_the_vitest_recipe_passes_a_correct_client_and_fails_a_buggy_one(
    buggy_client: Path, fresh: Path
) -> None:
    """vitest from npm, pinned, into docs/javascript (scripts/js-deps.sh: CI runs it too)."""
    good = _vitest(REFERENCE, "^(utf8|random|cr) seed=1$", fresh)
    assert good.returncode == 0, good.stdout + good.stderr
    assert re.search(r"Tests\s+3 passed", good.stdout), good.stdout
    bad = _vitest(buggy_client, "^(utf8|bytewise) seed=1$", fresh)
    assert bad.returncode != 0
    assert re.search(r"Tests\s+2 failed", bad.stdout), bad.stdout
    _assert_diagnosed(bad.stdout + bad.stderr)


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
    """docs/javascript.md quotes the files the tests above run, byte for byte: the ones
    the package ships (`sse-proxy js-helper` writes them out)."""
    from sse_proxy.cli_tools import JS_FILES, js_file

    page = (ROOT / "docs" / "javascript.md").read_text()
    blocks = re.findall(r"```js\n(.*?)```", page, re.S)
    for name in ("chaos.node.test.mjs", "chaos.vitest.test.mjs", "sse-client.mjs"):
        assert js_file(name) in blocks, name
    assert sorted(JS_FILES) == sorted(p.name for p in RECIPES.iterdir()), JS_FILES
    assert "sse-proxy js-helper > chaos-proxy.mjs" in page
    helper = js_file("chaos-proxy.mjs")
    from sse_proxy.rechunk.spec import REWRITES, STRATEGIES

    assert f"STRATEGIES = {json.dumps(list(STRATEGIES), separators=(', ', ': '))};" in helper
    assert f"REWRITES = {json.dumps(list(REWRITES), separators=(', ', ': '))};" in helper


@pytest.fixture(scope="module")
def fresh(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder of its own with what `sse-proxy js-helper --out` writes, and vitest from
    npm (pinned: docs/javascript/node_modules)."""
    where = tmp_path_factory.mktemp("fresh") / "test" / "sse"
    proc = subprocess.run(
        [*CLI, "js-helper", "--out", str(where)],
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    assert f"to {where}" in proc.stdout
    assert sorted(p.name for p in where.iterdir()) == sorted(
        ["chaos-proxy.mjs", "chaos.node.test.mjs", "chaos.vitest.test.mjs", "sse-client.mjs"]
    )
    subprocess.run(["bash", str(ROOT / "scripts" / "js-deps.sh")], check=True, timeout=600)
    (where / "node_modules").symlink_to(JS / "node_modules")
    return where


def _no_sse_proxy() -> dict[str, str]:
    """PATH with node and without sse-proxy."""
    node = shutil.which("node")
    assert node is not None
    path = os.pathsep.join(
        p for p in os.environ["PATH"].split(os.pathsep) if not (Path(p) / "sse-proxy").exists()
    )
    assert shutil.which("sse-proxy", path=path) is None
    return {"PATH": path}


def test_in_a_fresh_folder_node_test_fails_at_once_without_sse_proxy(fresh: Path) -> None:
    run = _node_test(REFERENCE, ".", fresh, **_no_sse_proxy())
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert "`sse-proxy` is not on PATH: install it (pip install sse-proxy)" in out, out
    assert re.search(r"^# tests 1$", out, re.M), out  # one failure for the file, not 45
    assert "does not listen" not in out  # no waiting for ports nothing will listen on


def test_in_a_fresh_folder_vitest_fails_at_once_without_sse_proxy(fresh: Path) -> None:
    run = _vitest(REFERENCE, ".", fresh, **_no_sse_proxy())
    out = run.stdout + run.stderr
    assert run.returncode != 0
    assert "`sse-proxy` is not on PATH: install it (pip install sse-proxy)" in out, out
    assert "Tests  no tests" in out


def test_in_a_fresh_folder_the_recipes_run_as_written(fresh: Path, buggy_client: Path) -> None:
    """With sse-proxy on PATH, the files as written out: the reference client passes and
    the buggy one fails with the diagnosis, in both runners."""
    good = _node_test(fresh / "sse-client.mjs", "^(utf8|bom) seed=1$", fresh)
    assert good.returncode == 0, good.stdout + good.stderr
    assert re.search(r"^# pass 2$", good.stdout, re.M), good.stdout
    bad = _vitest(buggy_client, "^utf8 seed=1$", fresh)
    assert bad.returncode != 0
    assert re.search(r"Tests\s+1 failed", bad.stdout), bad.stdout
    _assert_diagnosed(bad.stdout + bad.stderr)
