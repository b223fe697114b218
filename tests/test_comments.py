"""The package's comments and docstrings say why the code is as it is, not its history: no
issue number (a reader has no tracker to look it up) and no measurement story (instruction
counts, microsecond timings). Those belong in commit bodies and in bench/."""

from __future__ import annotations

import ast
import io
import re
import tokenize
from pathlib import Path

import pytest

import sse_proxy

PACKAGE = Path(sse_proxy.__file__).parent

HISTORY = re.compile(
    r"\bissues?\s*#?\d+"  # issue 23, issue #9
    r"|(?<![\w.])(?<!UAX )#\d{1,5}\b"  # #23 (not a standard's section: UAX #29)
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
