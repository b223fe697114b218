"""The ``stalls`` group: the faults in time, and what a client did about them.

The case's proxy performs the fault (chaos mode, ``chaos_fault``: :mod:`sse_proxy.rechunk.
timefaults`) on the clean fixture, for longer than any case lasts: the harness ends it as
soon as the client's verdict is known. The client's limit is the fault's start plus the
patience (``--patience``; the proxy says when the fault began): by then it must have
reported a stall (a non-zero exit), or, after a linger, exited with the whole answer. What
it did instead is the diagnosis, family ``time boundary (...)``:

* still running after a stall kept alive by comments: ``hang: the stall was kept alive by
  comments`` (a read timeout never fires while bytes arrive);
* still running after a silent stall: ``hang: no deadline on a silent stall``;
* exit 0 with part of the answer: ``silent truncation after a stall``;
* still running after the terminal marker: ``hang: waits for the connection to close after
  the terminal marker``;
* a drip: no whole-answer deadline within the patience is information, not a failure,
  unless ``--patience`` was given.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final

from sse_proxy.core import StreamReassembler
from sse_proxy.core.dialects.registry import DIALECTS
from sse_proxy.rechunk.shapes.rewriter import split_frames
from sse_proxy.rechunk.timefaults import COMMENT_KEEPALIVE, Timeline, TimeSettings
from sse_proxy.server.delivery import stream_kind
from sse_proxy.tools.testclient.diagnose import Diagnosis

__all__ = [
    "DRIP_RATE",
    "FAMILIES",
    "STALL_SECONDS",
    "Timing",
    "diagnose_stall",
    "keepalive_every",
    "proxy_settings",
    "text_before",
]

STALL_SECONDS: Final = 3600.0
"""How long the case's fault lasts: longer than any case; the harness ends it."""
DRIP_RATE: Final = 8.0
"""Bytes a second of the ``drip`` case."""

FAMILIES: Final[dict[str, str]] = {
    "stall_keepalive": "time boundary (stall kept alive by comments)",
    "stall_silent": "time boundary (silent stall)",
    "linger": "time boundary (waits for the close)",
    "drip": "time boundary (no whole-answer deadline)",
    "truncated": "time boundary (silent truncation after a stall)",
}
"""The diagnosis family of each way a client gets a fault in time wrong."""

_NOUNS: Final[dict[str, str]] = {
    "stall_keepalive": "a stall kept alive by comments",
    "stall_silent": "a silent stall",
    "linger": "a linger",
    "drip": "a drip",
}
_RULES: Final[dict[str, str]] = {
    "stall_keepalive": "a stream whose text stops is stalled whatever else keeps the "
    "connection busy: comments and ping events are not progress; give up when no text came "
    "for a while",
    "stall_silent": "a stream whose text stops must be given up on after a deadline",
    "linger": "the terminal marker ends the answer; the connection may stay open after it",
    "drip": "only a deadline on the whole answer ends an answer that keeps coming slowly",
}


def keepalive_every(patience: float) -> float:
    """Seconds between the keep-alives of a stall: several within the patience, and more
    often than any read timeout worth the name."""
    return max(0.1, min(0.5, patience / 6))


def proxy_settings(kind: str, patience: float) -> dict[str, Any]:
    """The case proxy's settings for fault ``kind``: chaos mode with the fault alone."""
    return {
        "mode": "chaos",
        "chaos": "",
        "chaos_fault": kind,
        "chaos_stall": STALL_SECONDS,
        "chaos_linger": STALL_SECONDS,
        "chaos_keepalive_every": keepalive_every(patience),
        "chaos_drip_rate": DRIP_RATE,
    }


def text_before(body: bytes, dialect: str, kind: str) -> str:
    """The text the fault lets through before it begins (a linger: all of it)."""
    described = DIALECTS.get(dialect)
    timeline = Timeline(kind, TimeSettings(stall=1.0, linger=1.0), stream_kind(dialect))
    sent: list[bytes] = []
    for frame in split_frames(body):
        pieces = timeline.frame(frame)
        if timeline.began:
            break
        sent += [piece for piece, _ in pieces]
    reassembler = StreamReassembler(dialect if described is not None else None)
    reassembler.feed(b"".join(sent))
    reassembler.close()
    return reassembler.text


@dataclass(frozen=True, slots=True)
class Timing:
    """When things happened in a case, in seconds from its start: the fault's start
    (None: it never began) and the client's end (its exit, or the harness stopping it)."""

    began: float | None
    ended: float
    patience: float

    def fields(self) -> dict[str, float | None]:
        """For the JSON report."""
        into = None if self.began is None else round(self.ended - self.began, 3)
        return {
            "fault_began_s": None if self.began is None else round(self.began, 3),
            "client_ended_s": round(self.ended, 3),
            "into_fault_s": into,
            "patience_s": self.patience,
        }


def _keepalive(dialect: str) -> str:
    described = DIALECTS.get(dialect)
    if described is not None and described.ping_frame is not None:
        return "the API's own ping events (event: ping)"
    return f"{COMMENT_KEEPALIVE.decode().strip()!r} comments"


def diagnose_stall(
    kind: str,
    *,
    dialect: str,
    expected: str,
    before: str,
    output: str,
    exit_code: int | None,
    hung: bool,
    timing: Timing,
    every: float,
    strict_drip: bool,
) -> tuple[str, Diagnosis | None]:
    """(outcome, diagnosis) of a ``stalls`` case; the diagnosis of a pass is None, that of
    an ``info`` outcome (a drip, without ``strict_drip``) says what was seen."""
    patience = timing.patience
    into = None if timing.began is None else timing.ended - timing.began
    arrived = f"{len(before)} of the answer's {len(expected)} characters arrived" + (
        "" if timing.began is None else f" in the first {timing.began:.1f} s"
    )
    rule = f"{kind}: {_RULES[kind]}"
    if kind == "linger":
        marker = DIALECTS[dialect].terminal_marker if dialect in DIALECTS else None
        then = (
            f"the whole answer and its terminal marker ({marker}) arrived"
            + ("" if timing.began is None else f" {timing.began:.1f} s in")
            + ", then the body stayed open"
        )
        if hung:
            return "hang", Diagnosis(
                FAMILIES["linger"],
                f"hang: waits for the connection to close after the terminal marker: {then}; "
                f"the client was still running {patience:g} s later (--patience) and was "
                "stopped",
                rule,
            )
        if exit_code != 0:
            return "crash", Diagnosis(
                FAMILIES["linger"],
                f"reported failure although the answer was complete: {then}, and "
                f"{into or 0:.1f} s later the client exited {exit_code}: its deadline fired "
                "while it waited for the connection to close",
                rule,
            )
        if output != expected:
            return "wrong", Diagnosis(
                FAMILIES["linger"],
                f"{then}; the client exited 0 but printed {len(output)} characters, not the "
                f"answer's {len(expected)}",
                rule,
            )
        return "pass", None
    if hung:
        if kind == "drip":
            reason = (
                f"no whole-answer deadline within {patience:g} s: {arrived}, then the rest at "
                f"{DRIP_RATE:g} bytes a second, and the client was still reading when "
                "stopped"
            )
            if not strict_drip:
                return "info", Diagnosis(FAMILIES["drip"], f"information: {reason}", rule)
            return "hang", Diagnosis(FAMILIES["drip"], f"hang: {reason}", rule)
        if kind == "stall_keepalive":
            reason = (
                f"hang: the stall was kept alive by comments: {arrived}, then for "
                f"{patience:g} s only {_keepalive(dialect)} every {every:g} s; the client "
                "was still waiting at the harness's limit (--patience) and was stopped"
            )
        else:
            reason = (
                f"hang: no deadline on a silent stall: {arrived}, then nothing at all for "
                f"{patience:g} s; the client was still waiting at the harness's limit "
                "(--patience) and was stopped"
            )
        return "hang", Diagnosis(FAMILIES[kind], reason, rule)
    if exit_code == 0 and output != expected:
        noun = _NOUNS[kind]
        when = "" if into is None else f" {into:.1f} s into it"
        return "silent", Diagnosis(
            FAMILIES["truncated"],
            f"silent truncation after a stall: {arrived}, then {noun}; the client exited "
            f"0{when} with {len(output)} of the answer's {len(expected)} characters: the "
            "caller takes part of an answer for the whole",
            rule,
        )
    return "pass", None
