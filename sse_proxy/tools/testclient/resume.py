"""The ``resume`` group: drops mid-stream, and what a client does about them.

Each case is a drop (:data:`~sse_proxy.rechunk.timefaults.DROPS`) that the case's mock
upstream performs on a resumable stream (:mod:`sse_proxy.tools.mock_resume`): raw SSE
resumed by ``Last-Event-ID`` (``--dialect text``: an ``EventSource``'s), OpenAI Responses in
background mode resumed by ``GET /v1/responses/{id}?stream=true&starting_after=N``, Gemini
Interactions by ``GET /v1beta/interactions/{id}?stream=true&last_event_id=E``. The
mock logs every request of the case (:class:`~sse_proxy.tools.mock_resume.Served`: when it
came, its cursor, what it was sent, where it was cut), and the verdict is counted from that
log and what the client printed, family ``connection boundary (...)``:

* ``pass``: resumed exactly: the text equal, one reconnect per drop, each from the last
  event it had whole, after the ``retry`` delay (a client that replays the whole stream
  and skips what it had passes too);
* ``duplicated``: it restarted without its cursor, or from an older one, and showed what it
  had again (the repeated span is shown);
* ``lost``: it resumed past what it had (the id of an event that was cut), a span is gone;
* ``no_resume``: it never reconnected: it hung, or returned part of the answer (exit 0: a
  silent truncation), or gave up with an error;
* ``too_early``: it reconnected before the ``retry`` delay in force (it ignored ``retry``,
  or took an invalid one);
* ``storm``: more reconnects than drops;
* ``looped``: it reconnected after a 204 No Content (the stream's end, or a refusal);
* a refused resume (``drop_too_old``) must be reported: exit 0 is ``silent``, still running
  at the patience's end ``hang``.

The client's limit is the case's last activity (a request, a cut, a stream's end) plus the
patience, plus the ``retry`` delay while a reconnect is due.
"""

from __future__ import annotations

import difflib
import itertools
import json
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Final

from sse_proxy.core import StreamReassembler
from sse_proxy.core.dialects.registry import DIALECTS
from sse_proxy.tools.fixtures.resume import EVENT_ID_PREFIX, resumable
from sse_proxy.tools.mock_resume import Served
from sse_proxy.tools.testclient.diagnose import Diagnosis

__all__ = [
    "EARLY",
    "FAMILIES",
    "NOTES",
    "RESUME_LARGE",
    "RESUME_PACE",
    "RESUME_RETRY",
    "ResumeLog",
    "ResumeSeen",
    "diagnose_resume",
    "reconnects_line",
    "resume_kinds",
    "text_through",
]

RESUME_RETRY: Final = 0.5
"""The ``retry`` of the cases' streams, in seconds: short, and Firefox's least."""
RESUME_LARGE: Final = 4.0
"""``drop_retry_large``'s: longer than the clients' own defaults (Chromium's and the
``eventsource`` package's 3 s, ``fetch-event-source``'s 1 s)."""
RESUME_PACE: Final = 0.005
"""Seconds between the events of the cases' streams: paced as tokens come, so a client
reads what came before a drop (a burst cut at once may never reach a browser's page)."""
EARLY: Final = 0.75
"""A reconnect sooner than this share of the ``retry`` delay in force is too early."""
STORM_STOP: Final = 4
"""Reconnects past the expected ones after which a case is stopped (a storm is plain)."""

FAMILIES: Final[dict[str, str]] = {
    "duplicated": "connection boundary (duplicated)",
    "lost": "connection boundary (lost)",
    "no_resume": "connection boundary (no resume)",
    "too_early": "connection boundary (too early)",
    "storm": "connection boundary (storm)",
    "looped": "connection boundary (looped after 204)",
    "hang": "connection boundary (no end after resuming)",
    "refused": "connection boundary (refused resume taken for the end)",
    "wrong": "connection boundary (resumed stream misread)",
}
"""The diagnosis family of each way a client gets a drop wrong."""
NOTES: Final[dict[str, str]] = {
    "replayed": "connection boundary (replayed)",
    "in_flight": "connection boundary (lost in flight)",
}
"""The family of each information note: a resume that passes, with something to know."""

_KINDS: Final[dict[str, tuple[str, ...]]] = {
    "last_event_id": (
        "drop",
        "drop_twice",
        "drop_start",
        "drop_primed",
        "drop_retry_invalid",
        "drop_retry_large",
        "drop_id_nul",
        "drop_idless",
        "drop_204",
    ),
    "starting_after": ("drop", "drop_twice", "drop_start", "drop_too_old"),
    "event_id": ("drop", "drop_twice", "drop_start", "drop_too_old"),
    "rpc": (
        "drop",
        "drop_twice",
        "drop_start",
        "drop_primed",
        "drop_retry_invalid",
        "drop_retry_large",
    ),
}
"""The drops each way of resuming has: the spec's variants are raw SSE's (ids, retry, 204),
a cursor too old is the Responses API's own error; MCP's (``rpc``: :mod:`.mcp_resume`) are
a tool call's stream cut after the priming event, before any id, twice, after a ``retry``."""
_RULES: Final[dict[str, str]] = {
    "last_event_id": "after a drop, reconnect after the retry delay with Last-Event-ID: the "
    "id of the last event received whole (an id holding NULL is ignored, and the last id "
    "carries over events without one); the server sends the events after it; a 204 means "
    "stop (WHATWG HTML, server-sent events)",
    "starting_after": "after a drop, resume with GET /v1/responses/{id}?stream=true&"
    "starting_after=N, N the sequence_number of the last event received; the resumed stream "
    "has no response.created; an error (too old) ends the answer as a failure",
    "event_id": "after a drop, resume with GET /v1beta/interactions/{id}?stream=true&"
    "last_event_id=E, E the event_id of the last event received whole; an error (too old) "
    "ends the answer as a failure",
}


def resume_kinds(dialect: str) -> tuple[str, ...]:
    """The drops that apply to ``dialect`` (none: its API cannot resume a stream, or the
    mock does not serve one)."""
    described = DIALECTS.get(dialect)
    if described is not None and described.rpc:
        return _KINDS["rpc"]
    by = None if described is None else described.resumes_by
    return _KINDS.get(by or "", ())


def text_through(dialect: str, cursor: int | None) -> str:
    """The answer's text in the events up to ``cursor`` (None: none of them)."""
    if cursor is None:
        return ""
    events = [e for e in resumable(dialect) if e.cursor <= cursor]
    reassembler = StreamReassembler(dialect, emit_events=False)
    reassembler.feed(b"".join(e.frame for e in events))
    reassembler.close(abandoned=True)
    return reassembler.text


@dataclass(frozen=True, slots=True)
class ResumeSeen:
    """What the case's mock saw: every request, from the client's start (seconds)."""

    requests: tuple[Served, ...]
    started: float

    @property
    def cuts(self) -> list[int]:
        """The indices of the requests that were cut."""
        return [i for i, s in enumerate(self.requests) if s.cut_at is not None]

    def fields(self) -> list[dict[str, Any]]:
        """For the JSON report: each request, its cursor and what it got, in seconds."""

        def at(t: float | None) -> float | None:
            return None if t is None else round(t - self.started, 3)

        out: list[dict[str, Any]] = []
        for s in self.requests:
            item: dict[str, Any] = {
                "at_s": at(s.at),
                "method": s.method,
                "cursor": s.cursor,
                "cursor_kind": s.cursor_kind,
                "status": s.status,
                "first": s.first,
                "delivered": s.delivered,
                "cut_at_s": at(s.cut_at),
                "ended_at_s": at(s.ended_at),
            }
            if s.dialect == "mcp":  # a tool call's JSON-RPC id, the stream its ids name
                item.update(request_id=s.request_id, stream=s.stream)
            out.append(item)
        return out


def _cursor(given: str | None) -> int | None:
    """A cursor's event number (an Interactions ``event_id`` of the mock's holds one)."""
    number = None if given is None else given.removeprefix(EVENT_ID_PREFIX)
    return int(number) if number is not None and number.isdigit() else None


def _behind(requests: Sequence[Served], cut: int) -> tuple[int, int] | None:
    """(the event the reconnect after the cut request ``cut`` named, the last event sent
    whole before that cut), when the cursor names an earlier one; else None."""
    if cut + 1 >= len(requests):
        return None
    sent, named = requests[cut].delivered, _cursor(requests[cut + 1].cursor)
    return (named, sent) if sent is not None and named is not None and named < sent else None


def _show(text: str, limit: int = 48) -> str:
    shown = json.dumps(text[:limit], ensure_ascii=False)
    return shown + ("..." if len(text) > limit else "")


def _spans(expected: str, output: str) -> tuple[str, str]:
    """(the text the output has twice, the text it lacks): its inserted and deleted spans."""
    extra: list[str] = []
    gone: list[str] = []
    matcher = difflib.SequenceMatcher(None, expected, output, autojunk=False)
    for op, a1, a2, b1, b2 in matcher.get_opcodes():
        if op in ("insert", "replace"):
            extra.append(output[b1:b2])
        if op in ("delete", "replace"):
            gone.append(expected[a1:a2])
    return "".join(extra), "".join(gone)


def _name(kind: str | None) -> str:
    if kind == "event_id":
        return "last_event_id"
    return "Last-Event-ID" if kind in (None, "last_event_id") else "starting_after"


def _said(served: Served, kind: str) -> str:
    """``with Last-Event-ID: 24``, ``without starting_after``: ``kind`` the dialect's cursor
    (a request without one names none)."""
    name = _name(served.cursor_kind or kind)
    return f"without {name}" if served.cursor is None else f"with {name}: {served.cursor}"


def diagnose_resume(
    kind: str,
    *,
    dialect: str,
    seen: ResumeSeen,
    output: str,
    exit_code: int | None,
    hung: bool,
    patience: float,
) -> tuple[str, Diagnosis | None, str]:
    """(outcome, diagnosis, expected text) of a ``resume`` case; a pass has no diagnosis
    (a whole replay the client skipped through is ``info``: it passes, with a note)."""
    cursor_kind = DIALECTS[dialect].resumes_by or "last_event_id"
    rule = f"{kind}: {_RULES[cursor_kind]}"
    requests = seen.requests
    cuts = seen.cuts
    whole = text_through(dialect, resumable(dialect)[-1].cursor)
    expected = whole
    if kind in ("drop_204", "drop_too_old") and cuts:
        expected = text_through(dialect, requests[cuts[0]].delivered)
    # A 204 resends nothing, so the last events before the cut are the client's only if
    # they reached it; its cursor says what it had whole (one that names an earlier event
    # and printed through it lost them in flight: the network's doing, not its own).
    in_flight = _behind(requests, cuts[0]) if kind == "drop_204" and cuts else None
    if in_flight is not None and output == text_through(dialect, in_flight[0]):
        expected = output
    else:
        in_flight = None

    def verdict(outcome: str, family: str, reason: str) -> tuple[str, Diagnosis, str]:
        return outcome, Diagnosis(FAMILIES[family], reason, rule), expected

    if not cuts:
        return verdict(
            "no_resume",
            "no_resume",
            "the stream was never cut: the client made no request the drop could fall in "
            f"({len(requests)} requests)",
        )
    first_cut = requests[cuts[0]]
    had = text_through(dialect, first_cut.delivered)
    when = f"{first_cut.cut_at - seen.started:.1f} s in" if first_cut.cut_at else ""
    cut_said = f"the drop cut the stream {when}, after " + (
        "no event"
        if first_cut.delivered is None
        else f"event {first_cut.delivered} ({len(had)} of the answer's {len(whole)} characters)"
    )
    refused = [i for i, s in enumerate(requests) if s.status in (204, 400)]
    after_refusal = list(requests[refused[0] + 1 :]) if refused else []
    if refused and requests[refused[0]].status == 204 and after_refusal:
        first = requests[refused[0]]
        return verdict(
            "looped",
            "looped",
            f"looped after 204: the reconnect {first.at - seen.started:.1f} s in got 204 No "
            f"Content, and the client made {len(after_refusal)} more requests (the last "
            f"{after_refusal[-1].at - first.at:.1f} s later): a 204 means stop",
        )
    # raw SSE: the reconnect after the end too (it gets the 204)
    allowed = len(cuts) + (1 if cursor_kind == "last_event_id" else 0)
    reconnects = len(requests) - 1
    storm = None
    if reconnects > allowed:
        gaps = [b.at - a.at for a, b in itertools.pairwise(requests)]
        storm = (
            f"storm: {reconnects} reconnects for {len(cuts)} drops "
            f"({', '.join(f'{g:.2f}' for g in gaps[:6])} s apart): a client reconnects once "
            "per drop, after the retry delay"
        )
        restarts = [
            requests[i + 1]
            for i in cuts
            if i + 1 < len(requests)
            and requests[i + 1].cursor is None
            and requests[i].delivered is not None
        ]
        if restarts:
            storm += (
                f"; it reconnected {_said(restarts[0], cursor_kind)} after a drop, so each "
                "time the stream came again from its start, and nothing could tell it the "
                "answer was whole"
            )
    # each drop and the request after it: what went wrong, worst first, the rest as "also"
    # (a storm too: one that restarts without its cursor is told to stop by nothing, so
    # its storm is the restarts', and what they showed twice comes first)
    found: list[tuple[str, str]] = []
    for n, i in enumerate(cuts):
        cut = requests[i]
        nxt = requests[i + 1] if i + 1 < len(requests) else None
        if nxt is None and storm is not None:
            break  # the harness stopped the storm: the client did not give up
        if nxt is None:
            shown = f"{len(output)} of the answer's {len(whole)} characters"
            if hung:
                reason = (
                    f"no resume: {cut_said}; the client never reconnected and was still "
                    f"running {patience:g} s later (--patience), with {shown} printed: a hang"
                )
            elif exit_code == 0:
                reason = (
                    f"no resume: {cut_said}; the client never reconnected and exited 0 with "
                    f"{shown}: a silent truncation, part of an answer taken for the whole"
                )
            else:
                reason = (
                    f"no resume: {cut_said}; the client gave up (exit {exit_code}) instead of "
                    "resuming the stream its API lets it resume"
                )
            if n:
                reason = reason.replace("no resume: ", f"no resume after drop {n + 1}: ", 1)
            found.append(("no_resume", reason))
            break
        want = cut.delivered
        given = nxt.cursor
        got = _cursor(given)
        delay = nxt.at - (cut.cut_at or cut.at)
        if given is not None and (got is None or want is None or got > want):
            lost = text_through(dialect, got) if got is not None else ""
            missing = lost[len(text_through(dialect, want)) :] if want is not None else lost
            found.append(
                (
                    "lost",
                    f"lost: {cut_said}; the client resumed {_said(nxt, cursor_kind)}, past event "
                    f"{want if want is not None else '(none)'}, the last it had whole (the cut "
                    "fell after the next event's id, before its data): "
                    + (f"{_show(missing)} is never shown" if missing else "an event is skipped"),
                )
            )
        if want is not None and (got is None or got < want):
            extra, _gone = _spans(expected, output)
            if extra:  # what it had came again, and it showed it again
                found.append(
                    (
                        "duplicated",
                        f"duplicated: {cut_said}; the client reconnected "
                        f"{_said(nxt, cursor_kind)}, so the stream came again from "
                        + ("its start" if got is None else f"after event {got}")
                        + f", and it showed {_show(extra)} twice ({len(extra)} characters "
                        "repeated)",
                    )
                )
        retry = cut.retry
        if retry is not None and delay < EARLY * retry:
            found.append(
                (
                    "too_early",
                    f"too early: {cut_said}; the client reconnected {delay:.2f} s later, "
                    f"before the retry delay in force ({retry * 1000:.0f} ms"
                    + (
                        ", the stream's last valid retry: the 'retry: 10ms' just before the "
                        "cut is not all digits and is ignored"
                        if kind == "drop_retry_invalid"
                        else ""
                    )
                    + ")",
                )
            )
    if storm is not None:
        found.append(("storm", storm))
    if found:
        order = ("no_resume", "lost", "duplicated", "storm", "too_early")
        found.sort(key=lambda f: order.index(f[0]))
        outcome, reason = found[0]
        also = tuple(dict.fromkeys(o for o, _ in found[1:] if o != outcome))
        if also:
            reason += "; also " + ", ".join(o.replace("_", " ") for o in also)
        return outcome, Diagnosis(FAMILIES[outcome], reason, rule, also=also), expected
    if kind == "drop_too_old":
        if hung:
            return verdict(
                "hang",
                "refused",
                f"hang: {cut_said}; the resume was refused as too old (400), and the client "
                f"was still running {patience:g} s later: it must report the failure",
            )
        if exit_code == 0:
            return verdict(
                "silent",
                "refused",
                f"silent: {cut_said}; the resume was refused as too old (400), and the client "
                f"exited 0 with {len(output)} of the answer's {len(whole)} characters",
            )
        return "pass", None, expected
    if hung:
        return verdict(
            "hang",
            "hang",
            f"hang: {cut_said}; the client resumed"
            + (", got 204 on the reconnect" if kind == "drop_204" else " and got the rest")
            + f", but was still running {patience:g} s after the last request: it never "
            "ended (an EventSource reconnects after every end: close it at the end)",
        )
    if output != expected:
        extra, gone = _spans(expected, output)
        if extra and not gone:
            return verdict(
                "duplicated",
                "duplicated",
                f"duplicated: {cut_said}; the client resumed from the right cursor, but shows "
                f"{_show(extra)} twice ({len(extra)} characters): it kept text of an event "
                "that was cut",
            )
        failed = f"exit {exit_code}" if exit_code else "exit 0"
        how = "from the right cursor but"
        behind = next(((i, b) for i in cuts if (b := _behind(requests, i)) is not None), None)
        if behind is not None:
            i, (_, sent) = behind
            how = (
                f"{_said(requests[i + 1], cursor_kind)}, before event {sent}, the last one "
                "sent whole before the cut, and"
            )
        return (
            "crash" if exit_code else "wrong",
            Diagnosis(
                FAMILIES["wrong"],
                f"{cut_said}; the client resumed {how} printed "
                f"{len(output)} of the answer's {len(expected)} characters ({failed})"
                + (f", without {_show(gone)}" if gone else ""),
                rule,
            ),
            expected,
        )
    if exit_code != 0:
        return verdict(
            "no_resume",
            "no_resume",
            f"{cut_said}; the client resumed and printed the whole answer, but exited {exit_code}",
        )
    replays = [requests[i + 1] for i in cuts if i + 1 < len(requests)]
    replayed = [r for r in replays if r.cursor is None and requests[cuts[0]].delivered is not None]
    if replayed:
        again = replayed[0]
        reason = (
            f"information: {cut_said}; the client asked for the whole stream again "
            f"({_said(again, cursor_kind)}) and skipped what it had: the upstream sends it "
            "all twice"
        )
        if again.status != 200:  # (a 204 or a refusal: nothing came twice this time)
            reason = (
                f"information: {cut_said}; the client reconnected {_said(again, cursor_kind)}"
                f" and stopped at the {again.status}: an upstream that answered would have "
                "sent the whole stream again"
            )
        return "info", Diagnosis(NOTES["replayed"], reason, rule), expected
    if in_flight is not None:
        named, sent = in_flight
        reason = (
            f"information: {cut_said}; the client resumed with its cursor at event {named}, "
            f"before event {sent}, the last one sent whole before the cut: what came after event "
            f"{named} was lost with the connection, and it stopped at the 204 with the text "
            "its cursor names"
        )
        return "info", Diagnosis(NOTES["in_flight"], reason, rule), expected
    return "pass", None, expected


def reconnects_line(seen: ResumeSeen) -> str:
    """``1 (0.51 s, Last-Event-ID 21)``: the reconnects after the first request."""
    requests: Sequence[Served] = seen.requests
    if len(requests) < 2:
        return "0"
    first = requests[1]
    cut = next((s for s in requests if s.cut_at is not None), None)
    delay = "" if cut is None or cut.cut_at is None else f"{first.at - cut.cut_at:.2f} s, "
    cursor = "no cursor" if first.cursor is None else f"{_name(first.cursor_kind)} {first.cursor}"
    return f"{len(requests) - 1} ({delay}{cursor})"


class ResumeLog:
    """The requests of a case's mock, as they come (its ``SERVED`` list, once started)."""

    def __init__(self) -> None:
        self.requests: list[Served] = []

    def deadline(self, patience: float) -> float | None:
        """When the client must have gone on: its last activity plus the patience (and the
        retry delay, while a reconnect is due); now, in a storm; None before the first
        drop (the case's timeout rules)."""
        requests = self.requests
        cuts = [s for s in requests if s.cut_at is not None]
        if not cuts:
            return None
        if len(requests) - 1 > len(cuts) + 1 + STORM_STOP:
            return 0.0
        last = requests[-1]
        moments = [last.at, last.cut_at or 0.0, last.ended_at or 0.0]
        wait = patience + (last.retry or 0.0 if last.cut_at is not None else 0.0)
        # a request of the client's own after the cut (an MCP client's GET stream) does not
        # shorten the retry delay the reconnect waits
        cut = cuts[-1]
        due = (cut.cut_at or 0.0) + (cut.retry or 0.0) + patience
        return max(max(moments) + wait, due)
