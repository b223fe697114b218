"""The package's comments and docstrings say why the code is as it is, not its history: no
issue number (a reader has no tracker to look it up) and no measurement story (instruction
counts, microsecond timings). Those belong in commit bodies and in bench/.

bench/ and tests/ keep their measurements, but name no issue of ours by number either: a
target or a regression is named by what it is."""

from __future__ import annotations

import ast
import io
import re
import subprocess
import tokenize
from pathlib import Path

import pytest

import sse_proxy

PACKAGE = Path(sse_proxy.__file__).parent
ROOT = Path(__file__).resolve().parent.parent

HISTORY = re.compile(
    r"\bissues?\s*#?\d+"  # issue N, issue #N
    r"|(?<![\w.])(?<!UAX )#\d{1,5}\b"  # #N (not a standard's section: UAX #29)
    r"|\b\d[\d,.]*\s*k?\s+instructions?\b"  # 16k instructions, 400 instructions
    r"|\b\d[\d,.]*\s*(?:us|µs|ns)\b",  # 30 us, 0.5 µs
    re.IGNORECASE,
)


def prose(source: str) -> list[tuple[int, str]]:
    """Each comment and docstring (module, class, function, attribute) with its line."""
    found = [
        (tok.start[0], tok.string)
        for tok in tokenize.generate_tokens(io.StringIO(source).readline)
        if tok.type == tokenize.COMMENT
    ]
    for node in ast.walk(ast.parse(source)):
        if (
            isinstance(node, ast.Expr)
            and isinstance(node.value, ast.Constant)
            and isinstance(node.value.value, str)
        ):
            found.append((node.lineno, node.value.value))
    return found


def history_in(source: str) -> list[str]:
    return [
        f"{line}: {m.group(0)!r}" for line, text in prose(source) for m in HISTORY.finditer(text)
    ]


OWN_ISSUE = re.compile(r"\bissues?[\s-]+#?\d+", re.IGNORECASE)
"""An issue of our tracker by number: "issue N's", "issues N and M", "issue #N", a heading's
anchor "...-issue-N". Another project's issue names its repository ("openai-python#2828",
"typescript-sdk#1233"), which a reader can look up, and is not matched."""


def own_issues_in(text: str, *, python_prose: bool) -> list[str]:
    """Each own-issue number in ``text``: in its comments and docstrings only when
    ``python_prose`` (a test's data may name one on purpose, as this file's do), else
    anywhere (bench code, help strings, Markdown)."""
    found = []
    for first, piece in prose(text) if python_prose else [(1, text)]:
        for m in OWN_ISSUE.finditer(piece):
            line = first + piece.count("\n", 0, m.start())
            found.append(f"{line}: {m.group(0)!r}")
    return found


def _tracked(*dirs: str) -> list[Path]:
    listed = subprocess.run(
        ["git", "ls-files", "-z", *dirs], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split("\0")
    return [ROOT / name for name in listed if name and (ROOT / name).is_file()]


def test_bench_and_tests_name_no_issue_of_ours() -> None:
    """Every file git tracks in bench/ (code, help strings, READMEs), and the comments and
    docstrings of tests/'s Python (its other files whole)."""
    paths = _tracked("bench", "tests")
    assert any(p.name == "proxy_README.md" for p in paths)  # the listing found the files
    found = [
        f"{path.relative_to(ROOT)}:{hit}"
        for path in paths
        for hit in own_issues_in(
            path.read_text(encoding="utf-8"),
            python_prose=path.suffix == ".py" and path.is_relative_to(ROOT / "tests"),
        )
    ]
    assert not found, found


@pytest.mark.parametrize(
    ("text", "python_prose"),
    [
        ("# issue 9's targets, for the --peers run\n", True),
        ('def f():\n    """Issue 23\'s targets."""\n', True),
        ('"""Regressions (issues 8 and 9)."""\n', True),
        ("x = 1  # see issue #12\n", True),
        ('help="issue 9\'s run: 50 streams"\n', False),
        ("## Scale and first byte (issue 23)\n", False),
        ("[details](proxy_README.md#proxy-vs-peers---peers-issue-9)\n", False),
        ("what the\nissue 47 asked\n", False),
    ],
)
def test_an_own_issue_is_found(text: str, python_prose: bool) -> None:
    assert own_issues_in(text, python_prose=python_prose)


@pytest.mark.parametrize(
    ("text", "python_prose"),
    [
        ('"""The bug typescript-sdk#1233 fixed, and openai-python#2828."""\n', True),
        ("// the bug of ollama-js#255\n", False),
        ('"""Issue a request; reissue it 3 times."""\n', True),
        ('SOURCE = "x = 1  # as issue 23 found"\n', True),  # a test's data, not its prose
        ("The per-event result, 2026-12-01 (8567eba)\n", False),
    ],
)
def test_other_projects_issues_and_data_are_not_ours(text: str, python_prose: bool) -> None:
    assert not own_issues_in(text, python_prose=python_prose)


def test_no_comment_or_docstring_tells_history() -> None:
    found = [
        f"{path.relative_to(PACKAGE.parent)}:{hit}"
        for path in sorted(PACKAGE.rglob("*.py"))
        for hit in history_in(path.read_text(encoding="utf-8"))
    ]
    assert not found, found


@pytest.mark.parametrize(
    "source",
    [
        "x = 1  # as issue 23 found\n",
        'def f():\n    """Cheaper (issue #9)."""\n',
        "# see #41\n",
        '"""A find() is some 400 instructions a call."""\n',
        'X = 1\n"""16k instructions per event."""\n',
        "# about 20 us a lookup\n",
        "# 0.5 µs each\n",
    ],
)
def test_history_is_found(source: str) -> None:
    assert history_in(source)


def test_code_and_plain_why_are_not_history() -> None:
    source = (
        "import os\npid = os.getpid()  # the worker's own\n"
        '"""Issue a request; enough of UAX #29."""\n'
    )
    assert not history_in(source)
