"""Self-contained HTML reports for ``check --html`` and ``test-client --html``.

One file, inline CSS, no script needed and nothing fetched: it opens from a CI artifact
as it is. Per case: the verdict, the diagnosis, expected and received text with the first
difference highlighted, and the byte strip of the stream the client received with the
write or cut points marked. It takes plain :class:`ReportCase` values, so any runner can
feed it.
"""

from __future__ import annotations

import datetime as dt
import difflib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from sse_proxy.core import dialect_for_path
from sse_proxy.errors import UsageError
from sse_proxy.inspect.html import esc, page, render_events, render_strip
from sse_proxy.inspect.strip import analyse
from sse_proxy.recording import Recording

__all__ = [
    "MAX_STRIP_BYTES",
    "ReportCase",
    "first_difference_at",
    "render_report",
    "write_check_report",
    "write_report",
]

MAX_STRIP_BYTES = 1 << 20
"""A strip longer than this shows its first MiB (a browser renders that comfortably)."""

_MAX_TEXT = 200_000


@dataclass(frozen=True, slots=True)
class ReportCase:
    """One case as the report shows it.

    ``stream``: the bytes the client received (None when the runner did not capture them);
    ``cuts``: offsets into ``stream`` where one write (or read) ended and the next began;
    ``expected``: None when there is nothing to compare with (``check``).
    """

    name: str
    verdict: str
    received: str
    expected: str | None = None
    diagnosis: str | None = None
    note: str | None = None
    stream: bytes | None = None
    cuts: Sequence[int] = ()
    cut_label: str = "write"
    passed: bool = False
    dialect: str | None = None
    hint: str | None = None
    show_events: bool = False
    strip_if_passed: bool = True


def first_difference_at(expected: str, received: str) -> int | None:
    """The index of the first character that differs (or where one text ends), or None."""
    if expected == received:
        return None
    return next(
        (i for i, (a, b) in enumerate(zip(expected, received, strict=False)) if a != b),
        min(len(expected), len(received)),
    )


def _marked(text: str, at: int | None, ident: str) -> str:
    shown = text[:_MAX_TEXT]
    if at is None or at > len(shown):
        return esc(shown) + (" …" if len(text) > _MAX_TEXT else "")
    char = shown[at : at + 1]
    title = (
        f"first difference at character {at}: U+{ord(char):04X}"
        if char
        else f"first difference at character {at}: the text ends here"
    )
    mark = f'<mark class="first" id="{ident}" tabindex="0" title="{esc(title)}">'
    return f"{esc(shown[:at])}{mark}{esc(char) or '∎'}</mark>{esc(shown[at + 1 :])}"


def _word_diff(expected: str, received: str) -> str:
    a, b = expected[:_MAX_TEXT], received[:_MAX_TEXT]
    out = []
    for op, i1, i2, j1, j2 in difflib.SequenceMatcher(None, a, b, autojunk=False).get_opcodes():
        if op == "equal":
            out.append(esc(a[i1:i2]))
            continue
        if i2 > i1:
            out.append(f"<del>{esc(a[i1:i2])}</del>")
        if j2 > j1:
            out.append(f"<ins>{esc(b[j1:j2])}</ins>")
    return "".join(out)


def _strip(case: ReportCase, index: int) -> str:
    if case.passed and not case.strip_if_passed:
        return '<p class="mut">Passed: its byte strip is left out to keep the report small.</p>'
    if case.stream is None:
        return (
            '<p class="mut">The bytes this client received were not captured for this case '
            "(the proxy passed the stream through); rerun it with the command above.</p>"
        )
    data = case.stream[:MAX_STRIP_BYTES]
    points = sorted({c for c in case.cuts if 0 < c < len(data)})
    reads = [b - a for a, b in zip([0, *points], [*points, len(data)], strict=True)]
    chunks = []
    pos = 0
    for n in reads:
        chunks.append(data[pos : pos + n])
        pos += n
    analysis = analyse(
        chunks,
        dialect=case.dialect,
        hint=case.hint,
        complete=len(data) == len(case.stream),
        total=len(case.stream),
    )
    cut_notes = "".join(
        f"<li>{case.cut_label} boundary at byte {c.boundary} cuts the {c.length}-byte "
        f"character {esc(repr(c.char)) if c.char else '(invalid UTF-8)'} at byte {c.start}</li>"
        for c in analysis.strip.cut_chars
    )
    alerts = "".join(
        f'<li><a href="#case-{index}-alert-{i}">{esc(a.name)} at byte {a.offset}</a> '
        f'<span class="mut">{esc(a.detail)}</span></li>'
        for i, a in enumerate(analysis.strip.alerts)
    )
    strip = render_strip(data, analysis.strip, show_text=True, label=case.cut_label)
    strip = strip.replace('id="alert-', f'id="case-{index}-alert-').replace(
        'href="#alert-', f'href="#case-{index}-alert-'
    )
    strip = strip.replace('id="cut-', f'id="case-{index}-cut-')
    events = (
        f"<details><summary>Events ({len(analysis.events)})</summary>"
        f"{render_events(analysis.events, show_text=True)}</details>"
        if case.show_events
        else ""
    )
    return (
        f"<p>{len(case.stream)} bytes in {len(reads)} {case.cut_label}s"
        f"{', cut points at ' + ', '.join(map(str, points)) if 0 < len(points) <= 20 else ''}."
        "</p>"
        + (f"<ul>{cut_notes}</ul>" if cut_notes else "")
        + (f"<p>Alerts:</p><ul>{alerts}</ul>" if alerts else "")
        + strip
        + events
    )


def _case_html(case: ReportCase, index: int) -> str:
    cls = "verdict-ok" if case.passed else "verdict-fail"
    parts = [f'<p>Verdict: <strong class="{cls}">{esc(case.verdict)}</strong></p>']
    if case.diagnosis:
        parts.append(f'<p class="diagnosis">Diagnosis: {esc(case.diagnosis)}</p>')
    if case.note:
        parts.append(f"<p>{esc(case.note)}</p>")
    if case.expected is not None:
        at = first_difference_at(case.expected, case.received)
        if at is None:
            parts.append("<p>The received text equals the expected text.</p>")
            parts.append(
                f"<details><summary>Text</summary><pre>{esc(case.received)}</pre></details>"
            )
        else:
            parts.append(
                f'<p>First difference at character <a href="#case-{index}-got">{at}</a>.</p>'
                '<div class="diff"><h4>expected</h4>'
                f"<pre>{_marked(case.expected, at, f'case-{index}-want')}</pre>"
                f"<h4>received</h4><pre>{_marked(case.received, at, f'case-{index}-got')}</pre>"
                f"<details><summary>Character diff</summary><pre>"
                f"{_word_diff(case.expected, case.received)}</pre></details></div>"
            )
    else:
        parts.append(
            f"<details open><summary>Text</summary><pre>{esc(case.received)}</pre></details>"
        )
    parts.append("<h4>Byte strip</h4>" + _strip(case, index))
    opened = "" if case.passed else " open"
    return (
        f'<section id="case-{index}" class="case" data-verdict="{esc(case.verdict)}">'
        f'<details{opened}><summary><h3 style="display:inline">{esc(case.name)}: '
        f'<span class="{cls}">{esc(case.verdict)}</span></h3></summary>'
        f"{''.join(parts)}</details></section>"
    )


def render_report(title: str, cases: Sequence[ReportCase], *, intro: str = "") -> str:
    """The whole report as one HTML document."""
    failed = [c for c in cases if not c.passed]
    stamp = dt.datetime.now(dt.UTC).strftime("%Y-%m-%d %H:%M:%SZ")
    toc = "".join(
        f'<li><a href="#case-{i}">{esc(c.name)}</a>: '
        f'<span class="{"verdict-ok" if c.passed else "verdict-fail"}">{esc(c.verdict)}</span></li>'
        for i, c in enumerate(cases)
    )
    body = (
        f"<h1>{esc(title)}</h1>"
        f'<p class="mut">Written {stamp} by sse-proxy. {esc(intro)}</p>'
        f"<p><strong>{len(cases) - len(failed)} passed, {len(failed)} failed</strong> "
        f"of {len(cases)}.</p>"
        f'<nav aria-label="cases"><details{" open" if len(cases) <= 60 else ""}>'
        f'<summary>Cases</summary><ol start="0">{toc}</ol></details></nav>'
        + "".join(_case_html(c, i) for i, c in enumerate(cases))
    )
    return page(title, body)


def write_report(path: str, title: str, cases: Sequence[ReportCase], *, intro: str = "") -> None:
    """Write the report; an unwritable path is a usage error, not a traceback."""
    text = render_report(title, cases, intro=intro)
    try:
        Path(path).write_text(text, encoding="utf-8", errors="surrogatepass")
    except OSError as exc:
        raise UsageError(f"cannot write {path!r}: {exc.strerror or exc}") from None


def write_check_report(
    path: str,
    name: str,
    chunks: Sequence[bytes],
    *,
    total: int,
    recording: Recording | None,
    dialect: str | None,
    upstream_error: bool,
    warned: bool,
) -> None:
    """``check --html``: one case, the capture, with its alerts at their byte offsets.

    A recording's strip is cut at its original reads; a raw capture has no read
    boundaries to show (check's own reads are not the stream's).
    """
    hint = None
    if recording is not None and isinstance(recording.request.get("path"), str):
        hint = dialect_for_path(recording.request["path"])
    complete = sum(map(len, chunks)) == total
    analysis = analyse(
        chunks, dialect=dialect, hint=hint, upstream_error=upstream_error, complete=complete
    )
    if recording is not None:
        cuts = []
        pos = 0
        for c in chunks[:-1]:
            pos += len(c)
            cuts.append(pos)
    else:
        cuts = []
    counts: dict[str, int] = {}
    for a in analysis.alerts:
        counts[a.name] = counts.get(a.name, 0) + 1
    diagnosis = (
        "; ".join(f"{k} × {v}" for k, v in sorted(counts.items()))
        if counts
        else "no alerts: the stream reassembles cleanly"
    )
    case = ReportCase(
        name=name,
        verdict="alerts" if warned else ("clean, with notices" if counts else "clean"),
        received=analysis.text,
        diagnosis=diagnosis,
        note=(
            f"{analysis.dialect} dialect, {len(analysis.events)} events, {total} bytes"
            + (f" in {len(chunks)} recorded reads" if recording is not None else "")
            + ("" if complete else f" (the strip and text show the first {MAX_STRIP_BYTES})")
        ),
        stream=b"".join(chunks),
        cuts=cuts,
        cut_label="read",
        passed=not warned,
        dialect=dialect,
        hint=hint,
        show_events=True,
    )
    write_report(path, f"sse-proxy check: {name}", [case])
