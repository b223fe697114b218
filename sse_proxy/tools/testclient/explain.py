"""`sse-proxy diagnose`: test-client's verdict on one text, for any test runner.

A runner that streamed through the chaos proxy itself (node:test, vitest, go test, a shell
script) has the expected text and what its client printed; this gives it the same
diagnosis test-client prints: the bug family, the evidence, the spec rule and the fix in
the client's language, as text or JSON. Pure apart from :func:`run_diagnose`'s reading
and printing; the verdicts are :mod:`.diagnose`'s and :mod:`.shapes`'s.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import IO, Any, Final

from sse_proxy.errors import ChaosSpecError, UsageError
from sse_proxy.rechunk.spec import VARIANTS, parse_strategy
from sse_proxy.tools.testclient.diagnose import diagnose, first_difference, normalize_output
from sse_proxy.tools.testclient.hints import hint_for

__all__ = ["LANGUAGES", "explain", "render", "run_diagnose"]

LANGUAGES: Final[dict[str, str]] = {
    "python": "python",
    "py": "python",
    "javascript": "javascript",
    "js": "javascript",
    "node": "javascript",
    "typescript": "javascript",
    "ts": "javascript",
    "go": "go",
    "other": "other",
}
"""``--lang`` values and the language each names."""


def _language(lang: str | None) -> str:
    if lang is None:
        return "other"
    found = LANGUAGES.get(lang.strip().lower())
    if found is None:
        raise UsageError(f"--lang must be one of {', '.join(LANGUAGES)}, not {lang!r}")
    return found


def explain(
    expected: str,
    got: str,
    *,
    strategy: str | None = None,
    lang: str | None = None,
    dialect: str | None = None,
    exit_code: int = 0,
) -> dict[str, Any]:
    """The verdict on ``got`` as JSON-ready data: ``passed``, and for a failure its
    ``family``, ``reason`` (the evidence), ``rule``, ``fix`` in ``lang`` and where the
    texts first differ. ``strategy`` is the chaos the stream had (``utf8``, ``bom``,
    ``utf8+crlf``, a shape variant with ``dialect``): it tells a rewrite-only case (spec
    conformance) from a cut one. One trailing newline of ``got`` is ignored, as
    test-client ignores it."""
    language = _language(lang)
    names: tuple[str, ...] = ()
    if strategy:
        try:
            names, _ = parse_strategy(strategy)
        except ChaosSpecError as exc:
            raise UsageError(f"--strategy: {exc}") from None
    actual = got if expected.endswith("\n") else normalize_output(got.encode("utf-8", "replace"))
    out: dict[str, Any] = {
        "passed": exit_code == 0 and actual == expected,
        "strategy": "+".join(names) or None,
        "lang": language,
        "expected_length": len(expected),
        "got_length": len(actual),
    }
    if out["passed"]:
        return out
    variants = [n for n in names if n in VARIANTS]
    found = None
    if len(variants) == 1 and dialect is not None and len(names) == 1:
        found = _variant(variants[0], expected, actual, dialect, language, exit_code)
    if found is None:
        d = diagnose(
            expected,
            actual,
            exit_code=exit_code,
            timed_out=False,
            strategy="+".join(n for n in names if n not in VARIANTS) or None,
        )
        assert d is not None  # (they differ)
        runtime = language if language in ("python", "javascript") else None
        found = {
            "family": d.family,
            "reason": d.reason,
            "rule": d.rule,
            "fix": hint_for(d.family, runtime),
        }
    out.update(found)
    out["first_difference"] = first_difference(expected, actual)
    return out


def _variant(
    name: str, expected: str, actual: str, dialect: str, language: str, exit_code: int
) -> dict[str, Any] | None:
    """A shape or token variant's diagnosis, over the fixture of ``dialect``."""
    from sse_proxy.tools import fixtures
    from sse_proxy.tools.testclient.shapes import diagnose_variant

    if dialect not in fixtures.DIALECTS:
        return None
    command = {"python": ("python",), "javascript": ("node",), "go": ("go",)}.get(language, ())
    d = diagnose_variant(
        name,
        expected,
        actual,
        exit_code=exit_code,
        timed_out=False,
        timeout=0.0,
        site=None,
        stderr="",
        body=fixtures.clean_stream(dialect),
        seed=1,
        dialect=dialect,
        command=command,
        tools=False,
    )
    if d is None:
        return None
    return {
        "family": d.family,
        "reason": d.reason,
        "rule": d.rule,
        "fix": d.hint,
        "chunk": d.chunk,
        "providers": list(d.providers),
        "sources": list(d.sources),
    }


def render(result: dict[str, Any]) -> str:
    """The verdict for a person: the family, the evidence, the rule and the fix."""
    at = f" ({result['strategy']})" if result.get("strategy") else ""
    if result["passed"]:
        return f"sse-proxy diagnose{at}: the text is the expected one\n"
    lines = [
        f"sse-proxy diagnose{at}: {result['family']}",
        f"  evidence: {result['reason']}",
        f"  first difference {result['first_difference']}",
    ]
    if result.get("chunk"):
        lines.append(f"  the chunk: {result['chunk']}")
        lines.append(f"  sent by:   {', '.join(result.get('providers') or ())}")
    elif result.get("rule"):
        lines.append(f"  spec rule: {result['rule']}")
    if result.get("fix"):
        lines.append(f"  fix ({result['lang']}): {result['fix']}")
    return "\n".join(lines) + "\n"


def _read(path: str, what: str) -> str:
    try:
        data = sys.stdin.buffer.read() if path == "-" else Path(path).read_bytes()
    except OSError as exc:
        raise UsageError(f"{what}: cannot read {path!r}: {exc.strerror or exc}") from None
    return data.decode("utf-8", "replace")


def run_diagnose(
    *,
    expected_file: str | None,
    dialect: str | None,
    got: str,
    strategy: str | None,
    lang: str | None,
    exit_code: int,
    as_json: bool,
    out: IO[str] | None = None,
) -> int:
    """``sse-proxy diagnose``: 0 when the text is the expected one, 1 when it is not."""
    if (expected_file is None) == (dialect is None):
        raise UsageError("diagnose needs the expected text: --expected FILE or --dialect D")
    if expected_file is not None:
        expected = _read(expected_file, "--expected")
    else:
        from sse_proxy.tools import fixtures

        if dialect not in fixtures.DIALECTS:
            raise UsageError(
                f"--dialect must be one of {', '.join(fixtures.DIALECTS)}, not {dialect!r}"
            )
        expected = fixtures.expected_text(dialect)
    if expected_file == "-" and got == "-":
        raise UsageError("--expected and --got cannot both read stdin")
    result = explain(
        expected,
        _read(got, "--got"),
        strategy=strategy,
        lang=lang,
        dialect=dialect,
        exit_code=exit_code,
    )
    stream = out if out is not None else sys.stdout
    if as_json:
        stream.write(json.dumps(result, ensure_ascii=False, indent=2) + "\n")
    else:
        stream.write(render(result))
    stream.flush()
    return 0 if result["passed"] else 1
