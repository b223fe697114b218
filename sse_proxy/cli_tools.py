"""The commands other test runners call: `sse-proxy diagnose` and `sse-proxy js-helper`.

`diagnose` gives any runner test-client's verdict on a text (:mod:`sse_proxy.tools.testclient.
explain`); `js-helper` writes out the JavaScript helper and recipes shipped with the package
(``sse_proxy/recipes/javascript``), so a JavaScript project needs nothing but `sse-proxy`.
"""

from __future__ import annotations

import argparse
import sys
from importlib import resources
from pathlib import Path
from typing import Any, Final

from sse_proxy.errors import UsageError

__all__ = ["JS_FILES", "TOOL_COMMANDS", "add_tools", "js_file", "run_tool"]

JS_FILES: Final[tuple[str, ...]] = (
    "chaos-proxy.mjs",
    "chaos.node.test.mjs",
    "chaos.vitest.test.mjs",
    "sse-client.mjs",
)
"""What ``js-helper --out DIR`` writes: the helper, the two recipes, the reference client
the recipes test by default."""
TOOL_COMMANDS: Final = frozenset({"diagnose", "js-helper"})


def js_file(name: str) -> str:
    """One of :data:`JS_FILES`, as shipped with the package."""
    return (resources.files("sse_proxy") / "recipes" / "javascript" / name).read_text("utf-8")


def add_tools(sub: Any, common: argparse.ArgumentParser) -> None:
    """Add ``diagnose`` and ``js-helper`` to the subcommands ``sub``."""
    from sse_proxy.tools.testclient.explain import LANGUAGES

    diag = sub.add_parser(
        "diagnose",
        parents=[common],
        help="test-client's diagnosis of one text, for any test runner",
        description="Compare what a client printed with the expected text and say why they "
        "differ: the bug family, the evidence, the spec rule and the fix in the client's "
        "language (test-client's own diagnosis). Exit 0: the same text; 1: it differs.",
    )
    expected = diag.add_mutually_exclusive_group(required=True)
    expected.add_argument("--expected", metavar="FILE", help="the expected text (- for stdin)")
    expected.add_argument(
        "--dialect",
        help="the expected text is the built-in fixture's of this dialect (what "
        "`sse-proxy expected-text --dialect D` prints)",
    )
    diag.add_argument(
        "--got", metavar="FILE", default="-", help="what the client printed (default -: stdin)"
    )
    diag.add_argument(
        "--strategy",
        metavar="STRATEGY",
        help="the chaos the stream had (utf8, bom, utf8+crlf, a shape variant with "
        "--dialect): it tells a rewrite the parser gets wrong from a cut",
    )
    diag.add_argument(
        "--lang",
        metavar="|".join(sorted(set(LANGUAGES.values()))),
        help=f"the client's language, for the fix ({', '.join(LANGUAGES)})",
    )
    diag.add_argument(
        "--exit-code",
        type=int,
        default=0,
        help="the client's exit status, when it failed (default 0)",
    )
    diag.add_argument("--json", action="store_true", help="print the verdict as JSON")

    helper = sub.add_parser(
        "js-helper",
        help="write out chaos-proxy.mjs (and the node:test and vitest recipes)",
        description="Print chaos-proxy.mjs, the helper that starts the mock upstream and a "
        "chaos proxy for a JavaScript test file (`sse-proxy js-helper > chaos-proxy.mjs`); "
        f"with --out DIR, write {', '.join(JS_FILES)} there.",
    )
    helper.add_argument("--out", metavar="DIR", help="write the helper and the recipes here")
    helper.add_argument("--force", action="store_true", help="overwrite files that differ")


def run_tool(args: argparse.Namespace) -> int:
    if args.command == "diagnose":
        from sse_proxy.tools.testclient.explain import run_diagnose

        return run_diagnose(
            expected_file=args.expected,
            dialect=args.dialect,
            got=args.got,
            strategy=args.strategy,
            lang=args.lang,
            exit_code=args.exit_code,
            as_json=args.json,
        )
    if args.out is None:
        sys.stdout.write(js_file("chaos-proxy.mjs"))
        sys.stdout.flush()
        return 0
    return _write_recipes(Path(args.out), force=args.force)


def _write_recipes(out: Path, *, force: bool) -> int:
    if out.exists() and not out.is_dir():
        raise UsageError(f"--out: {str(out)!r} is not a directory")
    files = {name: js_file(name) for name in JS_FILES}
    clash = [n for n in JS_FILES if (out / n).exists() and (out / n).read_text("utf-8") != files[n]]
    if clash and not force:
        raise UsageError(f"--out: {', '.join(clash)} already there and different (--force)")
    try:
        out.mkdir(parents=True, exist_ok=True)
        for name, text in files.items():
            (out / name).write_text(text, encoding="utf-8")
    except OSError as exc:
        raise UsageError(f"--out: cannot write {str(out)!r}: {exc.strerror or exc}") from None
    sys.stdout.write(
        f"wrote {', '.join(JS_FILES)} to {out}\n"
        "next: npm install --save-dev vitest (for the vitest recipe), then\n"
        "      node --test chaos.node.test.mjs   or   npx vitest run chaos.vitest.test.mjs\n"
    )
    return 0
