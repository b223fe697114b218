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

An MCP tool call (``--dialect mcp``) has its text whole in its response, so the fault falls
among its progress notifications and log messages, and the verdicts say it in MCP's terms
(family ``mcp (...)``): the result never came (a stall), still waiting after the result (a
linger: the response ends the call), exit 0 without the result.
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
    "MCP_FAMILIES",
    "STALL_SECONDS",
    "Notes",
    "Timing",
    "diagnose_stall",
    "keepalive_every",
    "notes_before",
    "proxy_settings",
    "sent_before",
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

MCP_FAMILIES: Final[dict[str, str]] = {
    "stall_keepalive": "mcp (stall kept alive by comments)",
    "stall_silent": "mcp (silent stall)",
    "linger": "mcp (lingers after the result)",
    "drip": "mcp (no whole-call deadline)",
    "truncated": "mcp (exit 0 without the result)",
}
"""The same, for an MCP tool call."""

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


_MCP_RULES: Final[dict[str, str]] = {
    "stall_keepalive": "a tool call whose messages stop is stalled whatever keeps its "
    "stream busy: comments are not progress; give up when no message came for a while "
    "(in 2026-07-28 closing the stream is what cancels the call)",
    "stall_silent": "a tool call must be given up on after a deadline: a request timeout "
    "(reset by progress notifications, where the tool sends them)",
    "linger": "the JSON-RPC response ends the tool call: take the result when it arrives; "
    "the stream may stay open after it",
    "drip": "only a deadline on the whole call ends a call whose messages keep coming slowly",
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


def sent_before(body: bytes, dialect: str, kind: str) -> bytes:
    """The bytes the fault lets through before it begins (a linger: all of them)."""
    timeline = Timeline(kind, TimeSettings(stall=1.0, linger=1.0), stream_kind(dialect))
    sent: list[bytes] = []
    for frame in split_frames(body):
        pieces = timeline.frame(frame)
        if timeline.began:
            break
        sent += [piece for piece, _ in pieces]
    return b"".join(sent)


def text_before(body: bytes, dialect: str, kind: str) -> str:
    """The text the fault lets through before it begins (a linger: all of it)."""
    described = DIALECTS.get(dialect)
    reassembler = StreamReassembler(dialect if described is not None else None)
    reassembler.feed(sent_before(body, dialect, kind))
    reassembler.close()
    return reassembler.text


@dataclass(frozen=True, slots=True)
class Notes:
    """An MCP tool call's notifications (progress, log messages): how many arrived before
    the fault, of how many."""

    before: int
    total: int


def _notes(body: bytes) -> int:
    return sum(1 for frame in split_frames(body) if b'"method":"notifications/' in frame)


def notes_before(body: bytes, kind: str) -> Notes:
    """The notifications of MCP stream ``body`` that ``kind`` lets through, of all."""
    return Notes(_notes(sent_before(body, "mcp", kind)), _notes(body))


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
    notes: Notes | None = None,
) -> tuple[str, Diagnosis | None]:
    """(outcome, diagnosis) of a ``stalls`` case; the diagnosis of a pass is None, that of
    an ``info`` outcome (a drip, without ``strict_drip``) says what was seen. ``notes``:
    an MCP tool call's notifications (its verdicts are said in MCP's terms)."""
    if notes is not None:
        return _diagnose_mcp(
            kind,
            expected=expected,
            notes=notes,
            output=output,
            exit_code=exit_code,
            hung=hung,
            timing=timing,
            every=every,
            strict_drip=strict_drip,
        )
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


def _diagnose_mcp(
    kind: str,
    *,
    expected: str,
    notes: Notes,
    output: str,
    exit_code: int | None,
    hung: bool,
    timing: Timing,
    every: float,
    strict_drip: bool,
) -> tuple[str, Diagnosis | None]:
    """:func:`diagnose_stall` for an MCP tool call: the same verdicts, in MCP's words."""
    patience = timing.patience
    into = None if timing.began is None else timing.ended - timing.began
    at = "" if timing.began is None else f" in the first {timing.began:.1f} s"
    arrived = (
        f"{notes.before} of the call's {notes.total} progress notifications and log "
        f"messages arrived{at}"
    )
    rule = f"{kind}: {_MCP_RULES[kind]}"
    family = MCP_FAMILIES[kind]
    if kind == "linger":
        then = (
            "the JSON-RPC response (the result) arrived"
            + ("" if timing.began is None else f" {timing.began:.1f} s in")
            + ", then the stream stayed open (it lingers)"
        )
        if hung:
            return "hang", Diagnosis(
                family,
                f"hang: still waiting after the result: {then}; the client was still "
                f"running {patience:g} s later (--patience) and was stopped: it waits for "
                "the stream to close instead of taking the response",
                rule,
            )
        if exit_code != 0:
            return "crash", Diagnosis(
                family,
                f"reported failure although the result had arrived: {then}, and "
                f"{into or 0:.1f} s later the client exited {exit_code}: its deadline fired "
                "while it waited for the stream to close",
                rule,
            )
        if output != expected:
            return "wrong", Diagnosis(
                family,
                f"{then}; the client exited 0 but printed {len(output)} characters, not the "
                f"result's {len(expected)}",
                rule,
            )
        return "pass", None
    if hung:
        if kind == "drip":
            reason = (
                f"no whole-call deadline within {patience:g} s: {arrived}, then the rest at "
                f"{DRIP_RATE:g} bytes a second, and the client was still reading when stopped"
            )
            if not strict_drip:
                return "info", Diagnosis(family, f"information: {reason}", rule)
            return "hang", Diagnosis(family, f"hang: {reason}", rule)
        if kind == "stall_keepalive":
            then = f"only {_keepalive('mcp')} every {every:g} s"
        else:
            then = "nothing at all"
        return "hang", Diagnosis(
            family,
            f"hang: the result never came: {arrived}, then for {patience:g} s {then}; the "
            "client was still waiting at the harness's limit (--patience) and was stopped",
            rule,
        )
    if exit_code == 0 and output != expected:
        when = "" if into is None else f" {into:.1f} s into it"
        return "silent", Diagnosis(
            MCP_FAMILIES["truncated"],
            f"exit 0 without the result: {arrived}, then {_NOUNS[kind]}; the client exited "
            f"0{when} with {len(output)} of the result's {len(expected)} characters: the "
            "caller takes a call that never answered for one that did",
            rule,
        )
    return "pass", None
