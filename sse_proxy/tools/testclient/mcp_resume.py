"""The ``resume`` group on MCP clients: a tool call's stream drops, and what the client does.

The case's mock MCP server performs the drop the MCP way (:mod:`sse_proxy.tools.mcp_resume`)
and logs every ``tools/call`` and ``GET`` of the case as the resumable streams' requests are
logged (:class:`~sse_proxy.tools.mock_resume.Served`); the verdict is counted from that log,
the calls the server answered and what the client printed, in the terms of the revision the
client spoke:

* 2025-11-25 (and before, when the stream had ids): after the cut, wait the stream's
  ``retry`` and reconnect with ``GET`` and ``Last-Event-ID``, the id of the last event
  received, carried over every reconnect; the result once, exact. A stream cut before any
  id cannot be resumed: reporting the failure (exit != 0) or calling again under a new
  request id both pass, a hang or an exit 0 without the result does not;
* 2026-07-28: no resumption; the lost request is re-issued under a new request id.

Failures, family ``mcp (...)``: no resume (a hang, a silent exit 0, giving up), no re-issue
(2026-07-28), ``Last-Event-ID`` lost on a reconnect (a ``GET`` without it, on the second
one: typescript-sdk#2499), resumed past its cursor (an id taken before its event arrived),
reconnect too early (``retry`` ignored), reconnect loop (more reconnects than drops),
re-issued under the same id, re-issued instead of resumed (the tool runs twice), the
result twice. ``drop_primed`` and the ``retry`` variants are not applicable to a client of
2026-07-28 (no priming, no ``retry``).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Final

from sse_proxy.tools.fixtures import mcp
from sse_proxy.tools.mcp_resume import event_cursor
from sse_proxy.tools.mock_resume import Served
from sse_proxy.tools.testclient.diagnose import Diagnosis
from sse_proxy.tools.testclient.mcp import REISSUE_SAME_ID
from sse_proxy.tools.testclient.resume import EARLY, ResumeSeen

__all__ = [
    "FAMILIES",
    "diagnose_mcp_resume",
    "mcp_reconnects_line",
]

_LEGACY_ONLY: Final = frozenset({"drop_primed", "drop_retry_invalid", "drop_retry_large"})
_BARE_GETS: Final = 2
"""GETs without a cursor a client may make besides (the Python SDK opens its own GET stream,
and tries once more on 405)."""

FAMILIES: Final[dict[str, str]] = {
    "no_resume": "mcp (no resume)",
    "no_reissue": "mcp (no re-issue)",
    "cursor_lost": "mcp (Last-Event-ID lost on a reconnect)",
    "lost": "mcp (resumed past its cursor)",
    "too_early": "mcp (reconnect too early)",
    "storm": "mcp (reconnect loop)",
    "same_id": REISSUE_SAME_ID,
    "reissued": "mcp (re-issued instead of resumed)",
    "duplicated": "mcp (duplicate result)",
    "hang": "mcp (no end after resuming)",
    "wrong": "mcp (resumed result misread)",
}
"""The diagnosis family of each way an MCP client gets a drop wrong."""
_OUTCOMES: Final[dict[str, str]] = {
    "no_resume": "no_resume",
    "no_reissue": "no_resume",
    "cursor_lost": "no_resume",
    "lost": "lost",
    "too_early": "too_early",
    "storm": "storm",
    "same_id": "wrong",
    "reissued": "duplicated",
    "duplicated": "duplicated",
    "hang": "hang",
    "wrong": "wrong",
}
_ORDER: Final = (
    "same_id",
    "cursor_lost",
    "no_resume",
    "no_reissue",
    "lost",
    "reissued",
    "too_early",
)
_RULES: Final[dict[bool, str]] = {
    False: "MCP 2025-11-25 (Streamable HTTP, resumability): after a drop, wait the stream's "
    "retry and reconnect with GET and Last-Event-ID, the id of the last event received "
    "(carried over every reconnect); the server sends that stream's events after it, then "
    "the response; a stream with no id cannot be resumed",
    True: "MCP 2026-07-28 (SEP-2575): no resumption; a broken response stream loses the "
    "in-flight request, and the client MUST re-issue it as a new request with a new request id",
}


def _show(text: str, limit: int = 48) -> str:
    return json.dumps(text[:limit], ensure_ascii=False) + ("..." if len(text) > limit else "")


def _id_of(served: Served) -> str | None:
    """The event id of the last event ``served`` delivered whole (None: none, or no ids)."""
    if served.stream is None or served.delivered is None:
        return None
    return f"{served.stream}-{served.delivered}"


def _reconnect(served: Served) -> bool:
    """A request that goes on with the call: a ``tools/call`` or a ``GET`` with a cursor."""
    return served.method == "POST" or served.cursor is not None


def diagnose_mcp_resume(
    kind: str,
    *,
    seen: ResumeSeen,
    calls: Sequence[mcp.McpCall],
    expected: str,
    output: str,
    exit_code: int | None,
    hung: bool,
    patience: float,
) -> tuple[str, Diagnosis | None]:
    """(outcome, diagnosis) of a ``resume`` case on an MCP client; None: a pass (or, outcome
    ``not_applicable``, a drop the client's revision does not have)."""
    modern = bool(calls) and calls[0].modern
    rule = f"{kind}: {_RULES[modern]}"

    def verdict(family: str, reason: str, also: tuple[str, ...] = ()) -> tuple[str, Diagnosis]:
        return _OUTCOMES[family], Diagnosis(FAMILIES[family], reason, rule, also=also)

    if not calls:
        return "no_resume", Diagnosis(
            "mcp (no tool call)",
            f"the tool was never called: the session did not get that far, or it called "
            f"another tool than SSE_PROXY_MCP_TOOL ({mcp.TOOL})",
            rule,
        )
    if modern and kind in _LEGACY_ONLY:
        return "not_applicable", None
    requests = seen.requests
    cuts = seen.cuts
    if not cuts:
        return verdict("no_resume", f"the stream was never cut ({len(requests)} requests)")
    first = requests[cuts[0]]
    cut_said = "the drop cut the tool call's stream" + (
        f" {first.cut_at - seen.started:.1f} s in" if first.cut_at is not None else ""
    )
    if _id_of(first) is not None:
        cut_said += f", after event {_id_of(first)}"
    elif not modern:
        cut_said += ", before any event id"
    calls_seen = [r for r in requests if r.method == "POST"]
    reconnects = sum(1 for r in requests if _reconnect(r)) - 1  # (the first call is none)
    bare = sum(1 for r in requests if not _reconnect(r))
    if reconnects > len(cuts) or bare > _BARE_GETS + len(cuts):
        return verdict(
            "storm",
            f"reconnect loop: {reconnects + bare} reconnects for {len(cuts)} "
            f"drop{'s' if len(cuts) > 1 else ''} ("
            + ", ".join(
                f"{r.method} {r.cursor or ''}".strip() + f" at {r.at - seen.started:.2f} s"
                for r in requests[cuts[0] + 1 :][:6]
            )
            + "): "
            "reconnect once per drop, after the retry delay, and stop once the response is in "
            "or a reconnect is refused",
        )
    found: list[tuple[str, str]] = []
    for n, i in enumerate(cuts):
        cut = requests[i]
        want = _id_of(cut) if not modern else None
        later = requests[i + 1 :]
        nxt = next((r for r in later if _reconnect(r)), None)
        lone = next((r for r in later if not _reconnect(r)), None)
        which = "" if n == 0 else f" after drop {n + 1}"
        if nxt is None:
            if lone is not None and want is not None:
                delay = lone.at - (cut.cut_at or cut.at)
                if n:  # the resumed stream was cut before any new event
                    said = (
                        f"Last-Event-ID lost on the {'second' if n == 1 else 'next'} "
                        f"reconnect: {cut_said}; the client resumed with Last-Event-ID: "
                        f"{cut.cursor}, drop {n + 1} cut that stream before any new event, "
                        f"and {delay:.2f} s later the client reconnected with a GET without "
                        f"Last-Event-ID (answered {lone.status}) where its cursor was still "
                        f"{want}: it kept a cursor per stream, and the resumed stream had "
                        "given it none (typescript-sdk#2499: lastEventId is not seeded from "
                        "the resumption token); the call never got its response"
                    )
                else:
                    said = (
                        f"Last-Event-ID lost on a reconnect: {cut_said}; {delay:.2f} s later "
                        f"the client reconnected with a GET without Last-Event-ID (answered "
                        f"{lone.status}) where its cursor was {want}; the call never got its "
                        "response"
                    )
                found.append(("cursor_lost", said))
            elif hung:
                found.append(
                    (
                        "no_reissue" if modern else "no_resume",
                        f"no {'re-issue' if modern else 'resume'}{which}: {cut_said}; the "
                        f"client neither {'called again' if modern else 'reconnected'} nor "
                        f"reported it, and was still running {patience:g} s later: a hang",
                    )
                )
            elif exit_code == 0 and output != expected:
                found.append(
                    (
                        "no_reissue" if modern else "no_resume",
                        f"no {'re-issue' if modern else 'resume'}{which}: {cut_said}; the "
                        f"client exited 0 with {len(output)} of the result's {len(expected)} "
                        "characters: a lost call taken for an answer",
                    )
                )
            elif modern:
                found.append(
                    (
                        "no_reissue",
                        f"no re-issue{which}: {cut_said}; in 2026-07-28 the request is lost "
                        f"with it, and the client gave up (exit {exit_code}) instead of calling "
                        "again under a new request id",
                    )
                )
            elif want is not None:
                found.append(
                    (
                        "no_resume",
                        f"no resume{which}: {cut_said}; the client gave up (exit {exit_code}) "
                        f"instead of reconnecting with Last-Event-ID: {want}",
                    )
                )
            break
        delay = nxt.at - (cut.cut_at or cut.at)
        if nxt.method == "POST":
            if nxt.request_id is not None and nxt.request_id == calls_seen[0].request_id:
                found.append(
                    (
                        "same_id",
                        f"re-issued under the same id: {cut_said}; the client called the tool "
                        f"again under the request id it already had ({nxt.request_id!r}): a "
                        "request id is never used twice in a session, and a retry is a new "
                        "request with a new id",
                    )
                )
            elif want is not None:
                found.append(
                    (
                        "reissued",
                        f"re-issued instead of resumed: {cut_said}; the client called the tool "
                        f"again (request {nxt.request_id!r}) instead of reconnecting with GET "
                        f"and Last-Event-ID: {want}: the tool ran twice",
                    )
                )
            continue
        if modern:
            found.append(
                (
                    "no_reissue",
                    f"no re-issue: {cut_said}; the client tried to resume with GET and "
                    f"Last-Event-ID: {nxt.cursor} (answered {nxt.status}): 2026-07-28 has no "
                    "resumption; call again under a new request id",
                )
            )
            break
        got = event_cursor(nxt.cursor or "")
        mine = event_cursor(want) if want is not None else None
        if got is None or mine is None or got[0] != mine[0] or got[1] > mine[1]:
            found.append(
                (
                    "lost",
                    f"resumed past its cursor: {cut_said}; the client reconnected with "
                    f"Last-Event-ID: {nxt.cursor}, where the last event it received whole was "
                    f"{want or '(none)'}"
                    + (
                        " (the cut fell after the next event's id: line, before its data: an "
                        "id counts once its event is dispatched)"
                        if got is not None and mine is not None and got[0] == mine[0]
                        else ""
                    )
                    + f" (answered {nxt.status})",
                )
            )
        retry = cut.retry
        if retry is not None and delay < EARLY * retry:
            found.append(
                (
                    "too_early",
                    f"reconnect too early: {cut_said}; the client reconnected {delay:.2f} s "
                    f"later, before the retry delay in force ({retry * 1000:.0f} ms"
                    + (
                        ": the 'retry: 10ms' just before the cut is not all digits and is ignored"
                        if kind == "drop_retry_invalid"
                        else ""
                    )
                    + ")",
                )
            )
    if found:
        found.sort(key=lambda f: _ORDER.index(f[0]))
        family, reason = found[0]
        also = tuple(dict.fromkeys(_OUTCOMES[f] for f, _ in found[1:]))
        also = tuple(a for a in also if a != _OUTCOMES[family])
        if also:
            reason += "; also " + ", ".join(a.replace("_", " ") for a in also)
        return verdict(family, reason, also)
    resumed = any(r.method == "GET" and r.cursor is not None for r in requests)
    if not resumed and len(calls_seen) == len(cuts) and exit_code not in (0, None) and not hung:
        return "pass", None  # nothing to resume from, and the failure was reported
    if hung:
        return verdict(
            "hang",
            f"no end: {cut_said}; the client went on, but was still running {patience:g} s "
            "after its last request: take the result when the response arrives",
        )
    twice = [expected + sep + expected for sep in ("", "\n", "\r\n")]
    if output in twice:
        return verdict(
            "duplicated",
            f"the result twice: {cut_said}; the client resumed, and printed the result twice: "
            "a response replayed after a resume is the same response; print it once",
        )
    if output != expected:
        return verdict(
            "wrong",
            f"{cut_said}; the client went on but printed {len(output)} of the result's "
            f"{len(expected)} characters (exit {exit_code}): {_show(output)}",
        )
    if exit_code != 0:
        return verdict(
            "no_resume",
            f"{cut_said}; the client printed the whole result, but exited {exit_code}",
        )
    return "pass", None


def mcp_reconnects_line(seen: ResumeSeen) -> str:
    """``1 (0.51 s, Last-Event-ID s1-4)`` or ``1 (re-issued as 2)``: what followed the
    first drop."""
    requests = seen.requests
    cuts = seen.cuts
    if not cuts:
        return "0"
    later = [r for r in requests[cuts[0] + 1 :] if _reconnect(r)]
    if not later:
        bare = [r for r in requests[cuts[0] + 1 :] if r.method == "GET"]
        return f"{len(bare)} (GET without Last-Event-ID)" if bare else "0"
    cut = requests[cuts[0]]
    first = later[0]
    if first.method == "POST":
        return f"{len(later)} (re-issued as {first.request_id!r})"
    delay = first.at - (cut.cut_at or cut.at)
    return f"{len(later)} ({delay:.2f} s, Last-Event-ID {first.cursor})"
