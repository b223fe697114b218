"""From what CMD did to the bug family it points to: pure functions, plus crash attribution.

:func:`diagnose` judges a chaos case from the symptom (U+FFFD, missing text, lost spaces, a
crash or a hang). For a combination (cuts and rewrites at once) the symptom alone cannot
tell which part the client got wrong, so the runner also runs each part alone and hands the
outcomes in as ``parts``: the cause is the part that fails alone, and when every part
passes alone it is how they meet. :func:`diagnose_fault` judges the `faults` group, where
the right outcome is that the client reports failure.
"""

from __future__ import annotations

import difflib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Final

from sse_proxy.rechunk.spec import REWRITES, STRATEGIES
from sse_proxy.tools.fixtures.faults import ENDINGS, KINDS
from sse_proxy.tools.testclient.crash import CrashSite, attribute_crash

__all__ = [
    "OUTSIDE",
    "CrashSite",
    "Diagnosis",
    "attribute_crash",
    "describe_cut",
    "diagnose",
    "diagnose_fault",
    "final_cr",
    "first_difference",
    "flood_diagnosis",
    "normalize_output",
    "rules_for",
    "short_diff",
    "split_parts",
    "wiring_diagnosis",
]

DIFF_LINES: Final = 24

REWRITE_RULES: Final[dict[str, str]] = {
    "crlf": "lines end in CRLF here; the spec allows CRLF, LF and bare CR line endings",
    "cr": "lines end in a bare CR here; a parser that only splits on LF never sees a line end",
    "mixed_newlines": "LF, CRLF and bare CR endings are mixed here; all three end a line",
    "bom": "the stream starts with a UTF-8 BOM (EF BB BF), which must be skipped once; "
    "otherwise the first field name reads as '\\ufeffdata' and the first event is lost",
    "keepalive": "comment lines (': keep-alive') between frames must be ignored",
    "dataless": "blocks with only retry:, event:, id: or a comment carry no data and "
    "dispatch no event; a client must not JSON-parse them",
    "blank_lines": "extra blank lines between frames dispatch nothing",
    "nospace": "'data:x' (no space after the colon) is valid; strip one space only when present",
}
"""The spec rule each rewrite tests."""

CUT_RULES: Final[dict[str, str]] = {
    "bytewise": "a read may carry a single byte; buffer until a line ends",
    "utf8": "a read may end inside a multi-byte UTF-8 character; decode across reads",
    "boundaries": "a read may end anywhere: inside 'data:', between CR and LF, inside the "
    "blank line that ends a frame",
    "random": "a read may end anywhere; dispatch only at a blank line",
    "coalesce": "one read may carry several events; dispatch each of them",
}
"""The rule each re-chunking strategy tests."""

FAULT_RULES: Final[dict[str, str]] = {name: KINDS[name].rule for name in ENDINGS}


@dataclass(frozen=True, slots=True)
class Diagnosis:
    """The bug family a failure points to, and why the harness thinks so. A shape or token
    case also names the ``chunk`` that broke the client, the ``providers`` that send it
    (with ``sources``) and a ``hint`` in the client's language."""

    family: str
    reason: str
    rule: str | None = None
    site: CrashSite | None = None
    chunk: str | None = None
    providers: tuple[str, ...] = ()
    sources: tuple[str, ...] = ()
    hint: str | None = None


def normalize_output(stdout: bytes) -> str:
    """CMD's stdout as UTF-8 (invalid bytes become U+FFFD), minus one trailing newline.

    Exactly one ``\\n`` (or ``\\r\\n``) is removed, so ``print(text)`` and
    ``sys.stdout.write(text)`` both pass; a second one is a real difference.
    """
    text = stdout.decode("utf-8", "replace")
    if text.endswith("\r\n"):
        return text[:-2]
    if text.endswith("\n"):
        return text[:-1]
    return text


def split_parts(strategy: str | None) -> tuple[list[str], list[str]]:
    """(re-chunking names, rewrite names) of a strategy such as ``utf8+crlf``."""
    names = [n for n in (strategy or "").split("+") if n]
    return [n for n in names if n in STRATEGIES], [n for n in names if n in REWRITES]


def rules_for(strategy: str | None) -> str | None:
    """The spec rules a strategy (or combination) tests, rewrites first."""
    cuts, rewrites = split_parts(strategy)
    items = [f"{n}: {REWRITE_RULES[n]}" for n in rewrites]
    items += [f"{n}: {CUT_RULES[n]}" for n in cuts]
    return "; ".join(items) or None


def _no_space(text: str) -> str:
    return re.sub(r"\s+", "", text)


_REWRITE_ONLY = (
    "this case only rewrote the syntax (writes were whole frames), so the parser "
    "mishandles valid SSE, see the spec rule"
)

_MEETING_HINTS: Final[dict[str, str]] = {
    "crlf": "a CRLF whose CR and LF land in different reads must still be one line end",
    "cr": "a bare CR at the end of a read is already a line end; the next read may start a "
    "new line",
    "mixed_newlines": "a CR at the end of a read may be followed by LF in the next read "
    "(one line end) or by anything else (the line already ended)",
    "bom": "the BOM may be cut across reads and must still be skipped",
    "keepalive": "comment lines may be cut across reads and must still be ignored",
    "dataless": "data-less blocks may be cut across reads and must still dispatch nothing",
    "blank_lines": "extra blank lines may be cut across reads",
    "nospace": "'data:x' may be cut right after the colon",
}


def _symptom(
    expected: str,
    actual: str,
    *,
    exit_code: int | None,
    timed_out: bool,
    timeout: float,
    rewrite: str | None,
    site: CrashSite | None,
) -> tuple[str, str]:
    """(family, reason) from the symptom alone; ``rewrite`` names a rewrite-only case."""
    if timed_out:
        return (
            "parser (hang)",
            f"no exit within {timeout:g} s: the parser waits for a line or frame end it "
            "does not recognise, or never sees the end of the stream (an EventSource "
            "reconnects at the end: close it at the terminal marker)",
        )
    if exit_code != 0:
        reason = f"exited with status {exit_code}: the client's parser failed on this stream"
        if site is not None:
            reason = (
                f"exited with status {exit_code}: crash inside {site}; the library's own "
                "parser failed on a valid stream, so pin a version without the bug, patch "
                "it, or report it upstream"
            )
        return "parser (crash)", reason
    if "\ufffd" in actual and "\ufffd" not in expected:
        lost = actual.count("\ufffd")
        return (
            "character boundary",
            f"{lost} U+FFFD in the output: a read ended inside a multi-byte UTF-8 character "
            "and was decoded on its own; decode with a stateful decoder, or decode whole lines",
        )
    if _no_space(actual) == _no_space(expected):
        lost = len(expected) - len(actual)
        symptom = f"the words are right but {lost} whitespace characters are lost"
        if rewrite:
            return f"spec conformance ({rewrite})", f"{symptom}; {_REWRITE_ONLY}"
        return (
            "whitespace trimming",
            f"{symptom}: data values were trimmed; strip exactly one space after 'data:' "
            "and never trim a delta",
        )
    if len(actual) < len(expected):
        missing = len(expected) - len(actual)
        symptom = f"{missing} of {len(expected)} characters are missing"
        if rewrite:
            return f"spec conformance ({rewrite})", f"{symptom}; {_REWRITE_ONLY}"
        return (
            "frame boundary",
            f"{symptom}: frames were lost, e.g. a read that ended inside a frame was parsed "
            "alone and its rest dropped; buffer across reads and dispatch only at a blank line",
        )
    symptom = (
        f"the output differs from the expected text ({len(actual)} vs {len(expected)} "
        "characters): text was duplicated, reordered or garbled"
    )
    if rewrite:
        return f"spec conformance ({rewrite})", f"{symptom}; {_REWRITE_ONLY}"
    return "wrong output", symptom


def _bare_symptom(
    expected: str, actual: str, exit_code: int | None, timed_out: bool, timeout: float
) -> str:
    """What went wrong, without a guess at the cause (for combinations explained by parts)."""
    if timed_out:
        return f"no exit within {timeout:g} s"
    if exit_code != 0:
        return f"exited with status {exit_code}"
    if "\ufffd" in actual and "\ufffd" not in expected:
        return f"{actual.count(chr(0xFFFD))} U+FFFD in the output"
    if _no_space(actual) == _no_space(expected):
        return (
            f"the words are right but {len(expected) - len(actual)} whitespace characters are lost"
        )
    if len(actual) < len(expected):
        return f"{len(expected) - len(actual)} of {len(expected)} characters are missing"
    return (
        f"the output differs from the expected text ({len(actual)} vs {len(expected)} characters)"
    )


def _part_family(part: str, found: Diagnosis) -> str:
    """A part's family is the one it got alone: one root cause, one name, in every group."""
    return found.family


FINAL_CR_RULE: Final = (
    "the stream's final line ends in a bare CR: at the end of the stream a pending CR is "
    "a line end, so the blank line it ends dispatches the last event"
)
_FINAL_CR_FAMILY: Final = "spec conformance (final CR)"


def final_cr(
    expected: str, actual: str, exit_code: int | None, timed_out: bool, final_bytes: bytes | None
) -> Diagnosis | None:
    """The last event lost because the stream's last line ends in a bare CR: the text
    complete and a non-zero exit (the terminal event never seen), or exit 0 with the text's
    end missing. A parser that holds a trailing CR waiting for a possible LF, and never
    lets it go at the end of the stream, does this."""
    if timed_out or final_bytes is None or not final_bytes.endswith(b"\r"):
        return None
    if exit_code not in (0, None) and actual == expected:
        symptom = (
            f"the text is complete but the client exited with status {exit_code}: the "
            "terminal event was never dispatched"
        )
    elif (
        exit_code == 0
        and actual
        and expected.startswith(actual)
        and len(expected) - len(actual) <= len(expected) // 4
    ):  # the text up to its last event or so
        symptom = (
            f"the last {len(expected) - len(actual)} characters are missing: the last "
            "event was never dispatched"
        )
    else:
        return None
    return Diagnosis(
        _FINAL_CR_FAMILY,
        f"{symptom}, because the stream's final line ends in a bare CR and the parser "
        "kept waiting for a LF that never came; at the end of the stream, end the line "
        "and dispatch",
        f"final CR: {FINAL_CR_RULE}",
    )


WIRING_FAMILY: Final = "wiring (the script's default export)"
_SCRIPT_WIRING: Final = re.compile(
    r"TypeError: (?P<what>\S+ has no default export that is a function"
    r"|the default export resolved to .*, not a string)"
)


def wiring_diagnosis(stderr: str) -> Diagnosis | None:
    """A browser script the harness could not call as a client (no default export, or one
    that does not resolve to a string): a wiring error, like a failing baseline, not a
    parser's crash."""
    found = _SCRIPT_WIRING.search(stderr)
    if found is None:
        return None
    return Diagnosis(
        WIRING_FAMILY,
        f"{found['what']}: the harness imports the script and awaits its default export, "
        "called with {url, body, headers, dialect}, for the streamed text; the script was "
        "never run as a client, so nothing is known about its parser",
    )


def flood_diagnosis(printed: int, expected: int) -> Diagnosis:
    """CMD printed far more than the answer: it was stopped, not judged on the text."""
    return Diagnosis(
        "output flood",
        f"printed more than {printed} bytes where the answer is {expected} characters, so "
        "it was stopped there: print only the streamed text on stdout (logs go to stderr)",
    )


def diagnose(
    expected: str,
    actual: str,
    *,
    exit_code: int | None,
    timed_out: bool,
    timeout: float = 0.0,
    strategy: str | None = None,
    parts: Mapping[str, Diagnosis | None] | None = None,
    site: CrashSite | None = None,
    final_bytes: bytes | None = None,
) -> Diagnosis | None:
    """None when CMD passed; otherwise the family of its bug.

    ``final_bytes``: the last bytes the client was sent, when known; a bare CR there
    names the final-CR rule for a lost last event (:func:`final_cr`).

    U+FFFD in the output: character boundary. Same text once whitespace is ignored: spaces
    were trimmed. Text missing: frame boundary. A crash or a hang: the client's parser
    (``site`` names the installed package it crashed in). A rewrite alone never cuts
    inside a frame, so a wrong text there is a spec conformance bug (the rewritten syntax),
    not a read-boundary one. For a combination, ``parts`` maps each part (``utf8``,
    ``crlf``) to its verdict run alone (None: passed): the parts that fail alone are the
    cause; when all pass alone, the cause is where they meet.
    """
    if not timed_out and exit_code == 0 and actual == expected:
        return None
    cuts = split_parts(strategy)[0]
    ending = final_cr(expected, actual, exit_code, timed_out, final_bytes)
    if ending is not None:
        return ending
    found = _diagnose(expected, actual, exit_code, timed_out, timeout, strategy, parts, site)
    fffd = "\ufffd" in actual and "\ufffd" not in expected and exit_code == 0
    if fffd and not timed_out and found.family != "character boundary":
        # U+FFFD can only mean a character decoded in pieces, whatever else the case did
        meet = "passes alone" in found.reason and "the cause is" not in found.reason
        plain = _character_boundary(actual, strategy, cuts)
        return Diagnosis(plain.family, plain.reason if meet else found.reason, found.rule)
    return found


def _diagnose(
    expected: str,
    actual: str,
    exit_code: int | None,
    timed_out: bool,
    timeout: float,
    strategy: str | None,
    parts: Mapping[str, Diagnosis | None] | None,
    site: CrashSite | None,
) -> Diagnosis:
    cuts, rewrites = split_parts(strategy)
    names = cuts + rewrites
    pure_rewrite = "+".join(rewrites) if rewrites and not cuts else None
    family, reason = _symptom(
        expected,
        actual,
        exit_code=exit_code,
        timed_out=timed_out,
        timeout=timeout,
        rewrite=pure_rewrite,
        site=site,
    )
    rule = rules_for(strategy)
    if len(names) < 2:
        return Diagnosis(family, reason, rule, site)
    if not parts:
        return Diagnosis(
            family,
            f"{reason} (combination {strategy}: its parts were not run alone, so the "
            "cause may be any of them; see the spec rules)",
            rule,
            site,
        )
    failing = {p: d for p, d in parts.items() if d is not None}
    passing = [p for p in names if p in parts and parts[p] is None]
    if failing:
        families = list(dict.fromkeys(_part_family(p, d) for p, d in failing.items()))
        alone = ", ".join(f"{p} fails ({_part_family(p, d)})" for p, d in failing.items())
        clear = ""
        if passing:
            verb = "passes" if len(passing) == 1 else "pass"
            clear = f", while {' and '.join(passing)} {verb} alone"
        why = f"run alone, {alone}{clear}: the cause is {' and '.join(failing)}, not the mix"
        site = site or next((d.site for d in failing.values() if d.site is not None), None)
        rule = rules_for("+".join(failing))
        symptom = _bare_symptom(expected, actual, exit_code, timed_out, timeout)
        if site is not None:
            symptom += f", crash inside {site}"
        return Diagnosis(" + ".join(families), f"{symptom}; {why}", rule, site)
    hints = [_MEETING_HINTS[r] for r in rewrites if r in _MEETING_HINTS]
    where = "; ".join(hints) or "the cuts fall inside the rewritten syntax"
    meet_family = family if not family.startswith("spec conformance") else "frame boundary"
    return Diagnosis(
        f"{meet_family} (where {'+'.join(names)} meet)",
        f"{reason}; every part ({', '.join(names)}) passes alone, so the bug is where they "
        f"meet: {where}",
        rule,
        site,
    )


def _character_boundary(actual: str, strategy: str | None, cuts: list[str]) -> Diagnosis:
    lost = actual.count("\ufffd")
    by = [c for c in cuts if c in ("utf8", "bytewise", "random", "boundaries")]
    where = f" (the {'/'.join(by)} cuts fell inside characters)" if by else ""
    return Diagnosis(
        "character boundary",
        f"{lost} U+FFFD in the output: a read ended inside a multi-byte UTF-8 character "
        f"and was decoded on its own{where}; decode with a stateful decoder, or decode "
        "whole lines",
        rules_for(strategy),
    )


def diagnose_fault(
    kind: str,
    expected: str,
    partial: str,
    actual: str,
    *,
    exit_code: int | None,
    timed_out: bool,
    timeout: float = 0.0,
) -> Diagnosis | None:
    """None when CMD reported the fault (non-zero exit); else why exiting 0 misleads.

    ``expected`` is the whole answer, ``partial`` what the broken stream carries.
    """
    rule = f"{kind}: {FAULT_RULES.get(kind, '')}"
    if timed_out:
        return Diagnosis(
            "parser (hang)",
            f"no exit within {timeout:g} s after the stream broke ({kind}): the client "
            "waits forever instead of reporting the failure",
            rule,
        )
    if exit_code != 0:
        return None
    shown = f"printed {len(actual)} characters"
    if actual == partial or expected.startswith(actual):
        shown = f"printed {len(actual)} of the answer's {len(expected)} characters"
    return Diagnosis(
        "silent truncation",
        f"exited 0 and {shown} although the stream was broken ({kind}): the caller "
        "takes half an answer for a whole one; end with an error when the stream ends "
        "without its terminal marker, inside a frame, on an error event or a reset",
        rule,
    )


# --------------------------------------------------------------------------- texts


def first_difference(expected: str, actual: str, context: int = 12) -> str:
    """Where the texts first differ, with a little context on each side, quoted."""
    at = next(
        (i for i, (a, b) in enumerate(zip(expected, actual, strict=False)) if a != b),
        min(len(expected), len(actual)),
    )
    lo = max(0, at - context)

    def show(text: str) -> str:
        piece = json.dumps(text[lo : at + context], ensure_ascii=False)
        return ("..." if lo else "") + piece + ("..." if at + context < len(text) else "")

    return f"at character {at}: expected {show(expected)}, got {show(actual)}"


def _segments(text: str) -> list[str]:
    """Words with their leading whitespace, one per diff line, quoted so spaces show."""
    parts = re.findall(r"\s*\S+|\s+", text)
    return [json.dumps(p, ensure_ascii=False) + "\n" for p in parts]


def short_diff(expected: str, actual: str, limit: int = DIFF_LINES) -> str:
    """A unified diff of expected vs actual, word by word, cut to ``limit`` lines."""
    lines = list(
        difflib.unified_diff(
            _segments(expected), _segments(actual), "expected", "got", n=1, lineterm="\n"
        )
    )
    if len(lines) > limit:
        lines = [*lines[:limit], f"... ({len(lines) - limit} more diff lines)\n"]
    return "".join(lines)


OUTSIDE: Final = "outside the stream"
"""Where :func:`describe_cut` says a cut past either end of the stream falls."""


def describe_cut(data: bytes, cut: int) -> str:
    """Where cut ``cut`` of ``data`` falls, in the terms of the three boundaries."""
    if not 0 < cut < len(data):
        return OUTSIDE
    start = cut
    while start > 0 and data[start] & 0xC0 == 0x80:
        start -= 1
    if start < cut:
        end = start + 1
        while end < len(data) and data[end] & 0xC0 == 0x80:
            end += 1
        char = data[start:end].decode("utf-8", "replace")
        return f"inside the {end - start}-byte character {char!r} (byte {cut - start} of it)"
    before, after = data[:cut], data[cut:]
    if before.endswith((b"\n\n", b"\r\n\r\n", b"\r\r")):
        return "exactly between two frames"
    if before.endswith(b"\r") and after.startswith(b"\n"):
        return "between CR and LF"
    if before.endswith((b"\n", b"\r")) and after.startswith((b"\n", b"\r")):
        return "inside the blank line that ends a frame"
    if after.startswith((b"\n", b"\r")):
        return "at the end of a line, just before its line ending"
    line_start = max(before.rfind(b"\n"), before.rfind(b"\r")) + 1
    line = data[line_start : line_start + 8]
    if line.startswith((b"data", b"event", b"id", b"retry")) and b":" in data[line_start:cut]:
        return f"inside a {data[line_start:].split(b':', 1)[0].decode()}: line value"
    if line.startswith((b"data", b"event", b"id", b"retry")):
        return "inside a field name, before its colon"
    return "inside a frame"
