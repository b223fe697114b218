"""Server-rendered HTML pieces shared by the inspector and the reports.

Plain HTML and one small stylesheet, no framework: every page reads without JavaScript,
and every marker carries its byte offset in ``data-off`` (and in its title), so people,
keyboards and tests find the same thing.
"""

from __future__ import annotations

import html
import itertools
import re
from collections.abc import Sequence

from sse_proxy.core.events import SSEEvent
from sse_proxy.inspect.strip import CutChar, StripModel

__all__ = ["CSS", "esc", "page", "render_events", "render_strip", "render_timeline"]

CSS = """
:root { --fg:#1b1b1b; --bg:#fff; --mut:#666; --alert:#b00020; --read:#0a58ca; --frame:#198754;
  --cut:#fd7e14; --line:#e9ecef; }
* { box-sizing: border-box; }
body { font: 14px/1.45 system-ui, sans-serif; color: var(--fg); background: var(--bg);
  margin: 0 auto; max-width: 1200px; padding: 1rem; }
h1 { font-size: 1.3rem; } h2 { font-size: 1.1rem; margin-top: 1.5rem; }
code, pre, .strip { font-family: ui-monospace, monospace; font-size: 12.5px; }
a:focus, button:focus, select:focus, [tabindex]:focus { outline: 3px solid #ffbf47; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .2rem .5rem; border-bottom: 1px solid var(--line); }
th { background: #f6f8fa; position: sticky; top: 0; }
.mut { color: var(--mut); }
.verdict-ok { color: var(--frame); } .verdict-degraded { color: var(--cut); }
.verdict-broken, .verdict-fail { color: var(--alert); font-weight: bold; }
.strip { white-space: pre-wrap; word-break: break-all; background: #fbfbfb;
  border: 1px solid var(--line); padding: .5rem; max-height: 32rem; overflow: auto; }
.m { display: inline-block; font-size: 10px; line-height: 1; padding: 0 1px;
  border-radius: 2px; vertical-align: super; }
.read { color: #fff; background: var(--read); }
.frame { color: #fff; background: var(--frame); }
.alert { color: #fff; background: var(--alert); text-decoration: none; }
.eol { color: var(--mut); background: #eef; font-size: 9px; border-radius: 2px;
  padding: 0 1px; }
.cut { background: #ffe5cc; border: 1px solid var(--cut); }
.bad { background: #f8d7da; }
.masked { color: #aaa; }
.legend span { margin-right: 1rem; }
.bar { display: inline-block; height: .7rem; background: var(--read); vertical-align: middle; }
.stall .bar { background: var(--alert); }
.diff ins { background: #d1f0d1; text-decoration: none; }
.diff del { background: #f8d7da; }
.first { outline: 2px solid var(--alert); background: #ffd6d6; }
.cmd { display: flex; gap: .5rem; align-items: center; margin: .3rem 0; }
.cmd code { background: #f6f8fa; padding: .2rem .4rem; flex: 1; overflow-x: auto; }
details { margin: .5rem 0; }
"""


def esc(text: object) -> str:
    return html.escape(str(text), quote=True)


def page(title: str, body: str, *, script: str = "") -> str:
    """A whole, self-contained page: inline CSS, optional inline script, nothing fetched."""
    js = f"<script>{script}</script>" if script else ""
    return (
        '<!DOCTYPE html>\n<html lang="en"><head><meta charset="utf-8">'
        '<meta name="viewport" content="width=device-width, initial-scale=1">'
        '<link rel="icon" href="data:,">'  # no icon to fetch: nothing asks the upstream
        f"<title>{esc(title)}</title><style>{CSS}</style></head>"
        f"<body>{body}{js}</body></html>\n"
    )


_DATA_VALUE = re.compile(rb"(?m)(?:^|(?<=[\r\n]))data:[ ]?([^\r\n]*)")


def _masked_ranges(data: bytes) -> list[tuple[int, int]]:
    """Byte ranges holding message text (``data:`` values), hidden unless text is shown."""
    return [(m.start(1), m.end(1)) for m in _DATA_VALUE.finditer(data) if m.end(1) > m.start(1)]


def _text(data: bytes, lo: int, hi: int, masks: list[tuple[int, int]] | None) -> str:
    """Bytes ``lo:hi`` as escaped text; invalid bytes as hex, message text masked."""
    if lo >= hi:
        return ""
    if masks is not None:
        out = []
        pos = lo
        for a, b in masks:
            if b <= pos or a >= hi:
                continue
            if a > pos:
                out.append(_text(data, pos, a, None))
            a2, b2 = max(a, pos), min(b, hi)
            n = len(data[a2:b2].decode("utf-8", "replace"))
            out.append(
                f'<span class="masked" title="{b2 - a2} bytes of message text">{"·" * n}</span>'
            )
            pos = b2
        if pos < hi:
            out.append(_text(data, pos, hi, None))
        return "".join(out)
    piece = data[lo:hi].decode("utf-8", "backslashreplace")
    parts = re.split(r"((?:\\x[0-9a-f]{2})+)", piece)
    return "".join(
        f'<span class="bad" title="invalid UTF-8">{esc(p)}</span>' if i % 2 else esc(p)
        for i, p in enumerate(parts)
    )


_GLYPH = {"LF": "LF", "CRLF": "CRLF", "CR": "CR"}


def _cut_html(cut: CutChar, data: bytes, index: int, show_text: bool) -> str:
    raw = data[cut.start : cut.start + cut.length]
    before = " ".join(f"{b:02x}" for b in raw[: cut.boundary - cut.start])
    after = " ".join(f"{b:02x}" for b in raw[cut.boundary - cut.start :])
    shown = (
        f"{cut.char!r} U+{ord(cut.char):04X}"
        if show_text and cut.char is not None
        else "a character"
    )
    title = (
        f"{shown}: {cut.length}-byte character at byte {cut.start} cut by the read ending at "
        f"byte {cut.boundary}"
    )
    if not show_text:
        before = "··" if before else ""
        after = "··" if after else ""
    return (
        f'<span class="cut" id="cut-{index}" data-off="{cut.start}" data-boundary="{cut.boundary}"'
        f' tabindex="0" title="{esc(title)}">{before}'
        f'<span class="m read" data-off="{cut.boundary}" title="read ends at byte {cut.boundary}">'
        f"|</span>{after}</span>"
    )


def render_strip(data: bytes, model: StripModel, *, show_text: bool, label: str = "read") -> str:
    """The byte strip: bytes as text with markers at their offsets (``data-off``)."""
    masks = None if show_text else _masked_ranges(data)
    reads = set(model.boundaries)
    frames = set(model.frame_ends)
    eols = {e.offset: e for e in model.line_endings}
    cuts = {c.start: (i, c) for i, c in enumerate(model.cut_chars)}
    cut_bounds = {c.boundary for c in model.cut_chars}
    alerts: dict[int, list[tuple[int, str, str]]] = {}
    for i, a in enumerate(model.alerts):
        alerts.setdefault(a.offset, []).append((i, a.name, a.detail))
    points = sorted(
        {
            0,
            model.size,
            *reads,
            *frames,
            *eols,
            *(e.end for e in eols.values()),
            *cuts,
            *(c.start + c.length for _, c in cuts.values()),
            *alerts,
        }
    )
    out: list[str] = []
    read_no = {e: n for n, e in enumerate(model.read_ends, 1)}
    pos = 0
    for p in points:
        if p < pos:
            continue
        if p > pos:
            out.append(
                f'<span data-off="{pos}" title="bytes {pos}-{p - 1}">'
                f"{_text(data, pos, p, masks)}</span>"
            )
            pos = p
        for i, name, detail in alerts.get(p, ()):
            out.append(
                f'<a class="m alert" id="alert-{i}" href="#alert-{i}" data-off="{p}" '
                f'data-name="{esc(name)}" title="{esc(name)} at byte {p}: {esc(detail)}">'
                f"! {esc(name.removeprefix('sse.'))}</a>"
            )
        if p in reads and p not in cut_bounds:
            out.append(
                f'<span class="m read" data-off="{p}" '
                f'title="{label} {read_no.get(p, "?")} ends at byte {p}">|</span>'
            )
        if p in frames:
            out.append(
                f'<span class="m frame" data-off="{p}" title="frame ends at byte {p}">¶</span>'
            )
        if p in cuts:
            i, cut = cuts[p]
            out.append(_cut_html(cut, data, i, show_text))
            pos = cut.start + cut.length
            continue
        if p in eols:
            e = eols[p]
            out.append(
                f'<span class="eol" data-off="{p}" data-kind="{e.kind}" '
                f'title="{e.kind} at byte {p}">{_GLYPH[e.kind]}</span>' + "\n"
            )
            pos = e.end
    more = (
        f'<p class="mut">Showing the first {model.size} of {model.total} bytes.</p>'
        if model.total > model.size
        else ""
    )
    legend = (
        '<p class="legend"><span><span class="m read">|</span> '
        f'{label} boundary</span><span><span class="m frame">¶</span> frame end</span>'
        '<span><span class="eol">LF</span> <span class="eol">CRLF</span> '
        '<span class="eol">CR</span> line endings</span>'
        '<span><span class="m alert">! name</span> alert</span>'
        '<span><span class="cut">c3 | a9</span> character cut by a '
        f"{label}</span></p>"
    )
    strip = "".join(out)
    return f'{legend}<div class="strip" role="region" aria-label="byte strip">{strip}</div>{more}'


def render_events(events: Sequence[SSEEvent], *, show_text: bool, limit: int = 2000) -> str:
    rows = []
    for e in events[:limit]:
        data = esc(e.data) if show_text else f'<span class="mut">{len(e.data)} characters</span>'
        rows.append(
            f"<tr><td>{e.ordinal}</td><td>{e.start}</td><td>{esc(e.type)}</td>"
            f"<td>{esc(e.id) if e.id is not None else ''}</td><td><code>{data}</code></td></tr>"
        )
    more = (
        f'<p class="mut">{len(events) - limit} more events not shown.</p>'
        if len(events) > limit
        else ""
    )
    return (
        '<table class="events"><thead><tr><th>#</th><th>byte</th><th>type</th><th>id</th>'
        f"<th>data</th></tr></thead><tbody>{''.join(rows)}</tbody></table>{more}"
    )


def render_timeline(
    times: Sequence[tuple[float, int]], *, stall_s: float = 1.0, limit: int = 2000
) -> str:
    """Arrivals: per read its time, gap since the one before, size; long gaps are stalls."""
    if not times:
        return '<p class="mut">No reads.</p>'
    gaps = [times[0][0]] + [b[0] - a[0] for a, b in itertools.pairwise(times)]
    widest = max(gaps) or 1.0
    rows = []
    offset = 0
    for i, ((t, n), gap) in enumerate(zip(times, gaps, strict=True)):
        if i < limit:
            stall = gap >= stall_s
            width = max(1, round(200 * gap / widest))
            rows.append(
                f'<tr class="{"stall" if stall else ""}"><td>{i + 1}</td><td>{t * 1000:.1f}</td>'
                f"<td>+{gap * 1000:.1f}{' <strong>stall</strong>' if stall else ''}</td>"
                f'<td><span class="bar" style="width:{width}px"></span></td>'
                f"<td>{offset}</td><td>{n}</td></tr>"
            )
        offset += n
    more = (
        f'<p class="mut">{len(times) - limit} more reads not shown.</p>'
        if len(times) > limit
        else ""
    )
    return (
        '<table class="timeline"><thead><tr><th>read</th><th>at ms</th><th>gap ms</th>'
        "<th></th><th>first byte</th><th>bytes</th></tr></thead>"
        f"<tbody>{''.join(rows)}</tbody></table>{more}"
    )
