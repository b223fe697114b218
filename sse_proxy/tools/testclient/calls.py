"""What a client got wrong about the tool calls it printed (``test-client --tools``).

The output convention is in :mod:`sse_proxy.tools.fixtures.tools`. The three bugs this
tells apart are the ones clients ship: parsing each argument fragment as JSON (it crashes
on the first partial one, or keeps only the fragments that parse), merging parallel calls
(one call, the arguments of all joined), and dropping the fragment that announced the call
(the arguments lose their start, or all of them when a provider sends a call whole).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from typing import Final

from sse_proxy.tools.fixtures.content import TOOL_CALLS
from sse_proxy.tools.fixtures.tools import split_output

__all__ = ["JSON_ERRORS", "explain_calls", "json_crash"]

JSON_ERRORS: Final = re.compile(
    r"JSONDecodeError|json\.decoder|Unexpected end of JSON|Unterminated string in JSON|"
    r"is not valid JSON|SyntaxError: .*JSON|unexpected end of JSON input|EOF while parsing",
)
"""What a JSON parser says about a partial document, in Python, JavaScript, Go and Rust."""


def json_crash(stderr: str) -> bool:
    """Whether a crash was a JSON parser failing (on a partial argument fragment, usually)."""
    return bool(JSON_ERRORS.search(stderr))


def _value(args: str) -> object:
    try:
        return json.loads(args)
    except ValueError:
        return _INVALID


_INVALID: Final = object()


def explain_calls(
    expected: str, actual: str, sent: Mapping[str, str] | None = None
) -> tuple[str, str] | None:
    """(kind, why) when the text is right but the calls are not, else None. ``sent``: each
    tool's arguments as the stream spelled them (default: the fixture's)."""
    sent = dict(TOOL_CALLS) if sent is None else sent
    want_text, want = split_output(expected)
    got_text, got = split_output(actual)
    if got_text != want_text or got == want:
        return None
    names = ", ".join(n for n, _ in want)
    if not got:
        return "missing", f"the text is right but no tool call was printed (expected {names})"
    if len(got) < len(want):
        joined = "".join(a for _, a in want)
        merged = [n for n, a in got if a.replace(" ", "") == joined.replace(" ", "")]
        if merged or any(_value(a) is _INVALID for _, a in got):
            return (
                "parallel calls merged",
                f"{len(want)} calls ({names}) came out as {len(got)}: the fragments of "
                "different indices were joined into one call; keep one call per index",
            )
        return "missing", f"{len(got)} of {len(want)} tool calls were printed ({names})"
    if len(got) > len(want):
        return "extra calls", f"{len(got)} calls printed, the stream has {len(want)} ({names})"
    for i, ((name, args), (got_name, got_args)) in enumerate(zip(want, got, strict=True)):
        if got_name != name:
            return "wrong call", f"call {i} is {got_name!r}, expected {name!r}"
        if _value(got_args) == _value(args):
            continue
        if not got_args.strip() or got_args.strip() == "{}":
            return (
                "first fragment dropped",
                f"call {i} ({name}) has no arguments: they all came in the fragment that "
                "carried the id and name, and it was dropped",
            )
        spelled = sent.get(name, args)
        if got_args and (spelled.endswith(got_args) or args.endswith(got_args)):
            return (
                "first fragment dropped",
                f"call {i} ({name}) lost the start of its arguments: the fragment that carried "
                "the id and name also carried arguments, and they were dropped",
            )
        if _value(got_args) is _INVALID:
            return (
                "arguments not JSON",
                f"call {i} ({name}) has arguments that are not JSON: fragments were lost or "
                "reordered; join every fragment of its index, in order",
            )
        return "wrong arguments", f"call {i} ({name}) has other arguments than the stream sent"
    return None
