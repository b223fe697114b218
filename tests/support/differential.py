"""The core against the oracle: run both on one stream, say exactly what differs.

Shared by ``tests/core/test_differential.py`` (hypothesis, in the suite) and
``fuzz/fuzz_core.py --differential`` (by hand, for minutes). The core is fed the reads it
is given and closed; the oracle (:mod:`tests.support.oracle`) reads the whole stream at once, so
any difference is either a core bug or a cut dependence.
"""

from __future__ import annotations

import itertools
from collections.abc import Sequence
from dataclasses import dataclass

from sse_proxy.core import (
    Alert,
    CrlfFraming,
    ErrorEvent,
    InvalidJson,
    Limits,
    OversizedFrame,
    ReplacementChar,
    StreamReassembler,
    ToolCallInvalid,
    Truncated,
    UnterminatedFrame,
)
from tests.support.cuts import seeded_splits
from tests.support.oracle import DEFAULT_LIMIT, OracleAlert, Reference, reference

__all__ = ["CoreRun", "compare", "core_run", "project", "random_split", "split_at"]


@dataclass(frozen=True)
class CoreRun:
    events: tuple[tuple[object, ...], ...]
    alerts: tuple[OracleAlert, ...]
    text: str
    frame_ends: tuple[int, ...]
    text_length: int
    tentative: tuple[tuple[int, int], ...] = ()  # (tentative_end, where that read ended)
    line_endings: dict[str, int] | None = None  # as the summary line reports them
    counted: tuple[str, ...] = ()  # reads after which bytes_fed was not the bytes fed


def project(alert: Alert) -> OracleAlert | None:
    """A core alert as the oracle's tuple; ``None`` for what the oracle does not model
    (tool calls the stream got wrong)."""
    if isinstance(alert, ReplacementChar):
        return (
            "replacement_char",
            alert.cause,
            alert.byte_offset,
            alert.event_index,
            alert.count,
        )
    if isinstance(alert, UnterminatedFrame):
        return ("unterminated_frame", alert.pending_bytes, alert.byte_offset)
    if isinstance(alert, OversizedFrame):
        return ("oversized_frame", alert.kind, alert.limit, alert.byte_offset)
    if isinstance(alert, CrlfFraming):
        c = alert.counts
        return ("crlf_framing", c["lf"], c["crlf"], c["cr"], alert.mixed)
    if isinstance(alert, ToolCallInvalid):
        return None
    if isinstance(alert, InvalidJson):
        return ("invalid_json", alert.byte_offset, alert.event_index)
    if isinstance(alert, ErrorEvent):
        return ("error_event", alert.byte_offset, alert.event_index)
    if isinstance(alert, Truncated):
        return ("truncated", alert.reason, alert.dialect, alert.byte_offset)
    return ("unknown", alert.name)


def core_run(
    pieces: Sequence[bytes],
    dialect: str,
    *,
    max_line: int = DEFAULT_LIMIT,
    max_frame: int = DEFAULT_LIMIT,
    quiet: bool = False,
) -> CoreRun:
    """Feed ``pieces`` one by one into a fresh core, close it, collect everything.

    ``quiet``: the proxy's passthrough hot path (no events, no frame ends, the text only
    counted), whose alerts and text length must be the same."""
    r = StreamReassembler(
        dialect,
        limits=Limits(max_line=max_line, max_frame=max_frame),
        emit_events=not quiet,
        frame_ends=not quiet,
        keep_text=not quiet,
    )
    events: list[tuple[object, ...]] = []
    alerts: list[OracleAlert] = []
    ends: list[int] = []
    outs = []
    tentative: list[tuple[int, int]] = []
    counted: list[str] = []
    fed = 0
    for piece in pieces:
        outs.append(r.feed(piece))
        fed += len(piece)
        if r.bytes_fed != fed and len(counted) < 3:
            counted.append(f"bytes_fed={r.bytes_fed} after {fed} bytes")
        if outs[-1].tentative_end is not None:
            tentative.append((outs[-1].tentative_end, fed))
    outs.append(r.close())
    if outs[-1].tentative_end is not None:
        tentative.append((outs[-1].tentative_end, -1))  # close must settle, not defer
    for out in outs:
        events += [(e.type, e.data, e.id, e.retry, e.ordinal, e.start) for e in out.events]
        alerts += [a for a in map(project, out.alerts) if a is not None]
        ends += out.frame_ends
    summary = r.summary()
    if summary["bytes"] != fed:
        counted.append(f"summary bytes={summary['bytes']} after close, {fed} fed")
    return CoreRun(
        tuple(events),
        tuple(alerts),
        r.text,
        tuple(ends),
        summary["text_length"],
        tuple(tentative),
        summary["line_endings"],
        tuple(counted),
    )


def _sort_key(alert: OracleAlert) -> tuple[str, ...]:
    return tuple(map(repr, alert))


def _tentative_diffs(
    stream: bytes, pieces: Sequence[bytes], ref: Reference, got: Sequence[tuple[int, int]]
) -> list[str]:
    """A read that ends with the CR of a blank line reports that offset as its tentative
    frame end (the real end is there, or one byte on if a LF follows); no other does."""
    ends, crlf = set(ref.frame_ends), set(ref.crlf_frame_ends)
    want = []
    for b in itertools.accumulate(len(p) for p in pieces):
        if stream[b - 1 : b] == b"\r" and (b + 1 in crlf or (b in ends and b not in crlf)):
            want.append((b, b))
    if list(got) != want:
        return [f"tentative ends (end, read end): core={list(got)[:10]} oracle={want[:10]}"]
    return []


def compare(
    stream: bytes,
    pieces: Sequence[bytes],
    dialect: str,
    *,
    max_line: int = DEFAULT_LIMIT,
    max_frame: int = DEFAULT_LIMIT,
    ref: Reference | None = None,
    quiet: bool = False,
) -> str | None:
    """``None`` when the core fed ``pieces`` agrees with the oracle on ``stream``, else a
    readable account of every difference (with the stream, cuts, dialect and limits).
    ``ref``: the oracle's answer for these arguments, when the caller already has it.
    ``quiet``: check the passthrough hot path instead (alerts and text length only)."""
    assert b"".join(pieces) == stream
    try:
        core = core_run(pieces, dialect, max_line=max_line, max_frame=max_frame, quiet=quiet)
    except Exception as exc:
        core = None
        crash = f"core raised {type(exc).__name__}: {exc}"
    if ref is None:
        ref = reference(stream, dialect, max_line=max_line, max_frame=max_frame)
    cuts = list(itertools.accumulate(len(p) for p in pieces))[:-1]
    head = (
        f"dialect={dialect} max_line={max_line} max_frame={max_frame}"
        f"{' (quiet: passthrough path)' if quiet else ''}\n"
        f"  stream={stream!r:.600}\n  cuts={cuts[:60]}"
    )
    if core is None:
        return f"{head}\n  {crash}"
    diffs: list[str] = list(core.counted)
    if core.line_endings != ref.line_endings:
        diffs.append(f"line_endings: core={core.line_endings} oracle={ref.line_endings}")
    if quiet:
        if core.events:
            diffs.append(f"quiet run built {len(core.events)} events")
        if core.text_length != len(ref.text):
            diffs.append(f"text_length: core={core.text_length} oracle={len(ref.text)}")
        ref = Reference((), ref.alerts, "", (), (), ref.line_endings)
        core = CoreRun((), core.alerts, "", (), 0)
    ref_events = tuple((e.type, e.data, e.id, e.retry, e.ordinal, e.start) for e in ref.events)
    if core.events != ref_events:
        for i, (a, b) in enumerate(itertools.zip_longest(core.events, ref_events)):
            if a != b:
                diffs.append(f"event {i}: core={a!r:.300} oracle={b!r:.300}")
                break
        diffs.append(f"events: core has {len(core.events)}, oracle {len(ref_events)}")
    if core.text != ref.text:
        diffs.append(f"text: core={core.text!r:.300} oracle={ref.text!r:.300}")
    core_alerts = sorted(core.alerts, key=_sort_key)
    ref_alerts = sorted(ref.alerts, key=_sort_key)
    if core_alerts != ref_alerts:
        only_core = [a for a in core_alerts if a not in ref_alerts]
        only_ref = [a for a in ref_alerts if a not in core_alerts]
        diffs.append(
            f"alerts: {len(core_alerts)} vs {len(ref_alerts)}; core only {only_core[:8]}; "
            f"oracle only {only_ref[:8]}"
        )
    if core.frame_ends != ref.frame_ends:
        diffs.append(f"frame_ends: core={core.frame_ends[:20]} oracle={ref.frame_ends[:20]}")
    if not quiet:
        diffs += _tentative_diffs(stream, pieces, ref, core.tentative)
    if not diffs:
        return None
    return head + "\n  " + "\n  ".join(diffs)


def split_at(data: bytes, cuts: Sequence[int]) -> list[bytes]:
    """``data`` cut at each offset in ``cuts`` (outside ``(0, len)`` and repeats ignored)."""
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(data)}), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def random_split(data: bytes, k: int, seed: int) -> list[bytes]:
    """``data`` in up to ``k`` reads, cut where ``random.Random(seed)`` says."""
    return seeded_splits(data, k, seed)
