"""The MCP cases of `test-client --dialect mcp`: the upstream of each case, and what a
failure means in MCP's terms.

The client under test speaks MCP to the mock's MCP server through the proxy: it connects
to ``SSE_PROXY_STREAM_URL`` (the ``/mcp`` endpoint), calls the tool ``SSE_PROXY_MCP_TOOL``
with the JSON arguments ``SSE_PROXY_MCP_ARGS`` and prints the result's text content. Only
the tool call streams, so only it is re-chunked or broken; the handshake is JSON. Every
case has its own mock, whose MCP server answers the call with the stream the case needs,
built for the request the client sent (its id, its progress token): the fixture (byte,
rewrite and combination cases), the short fixture (``cut``) or a broken one (``faults``).

The server gives each stream the SSE fields of the client's revision (2025-11-25: a
priming event, ``retry``, an id on every event), except the ``faults`` group's broken
streams: they carry no ids, so nothing can resume them (the ``resume`` group's drops do),
and a correct client reports the failure, or calls the tool again under a new request id
(what 2026-07-28 asks of a client that retries, the only way on after a broken stream
there), which this server then answers in full.

Verdicts: the result's text, exact (the same comparison as every dialect); the progress
the client was sent (it is sent only to a request that carries a ``progressToken``, so a
client that asks for none leaves progress handling untested, and the report says so); a
result printed twice (a duplicate) or in part (the first text item only); no tool call at
all (the handshake failed, or the wrong tool or arguments); a crash on a priming event's
empty data (parsed as JSON); a broken call re-issued under the id it already had.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Final

from sse_proxy.tools import fixtures
from sse_proxy.tools.fixtures import mcp
from sse_proxy.tools.testclient.calls import json_crash
from sse_proxy.tools.testclient.diagnose import Diagnosis
from sse_proxy.tools.testclient.fixture import Fixture
from sse_proxy.tools.testclient.plan import FAULTS

if TYPE_CHECKING:
    from sse_proxy.tools.lockstep import Lockstep
    from sse_proxy.tools.mcp_server import McpServer, StreamFor
    from sse_proxy.tools.stack import Stoppable, UpstreamStarter
    from sse_proxy.tools.testclient.plan import Case

__all__ = [
    "HANG_FAMILY",
    "MCP_ENV",
    "PRIMING_FAMILY",
    "REISSUE_SAME_ID",
    "WRONG_FAMILIES",
    "McpSeen",
    "Reissue",
    "call_fields",
    "explain_mcp",
    "hang_on_broken_stream",
    "judge_reissue",
    "mcp_lines",
    "mcp_upstream",
    "sent_short",
    "sent_stream",
]

MCP_ENV: Final[dict[str, str]] = {
    "SSE_PROXY_MCP_TOOL": mcp.TOOL,
    "SSE_PROXY_MCP_ARGS": json.dumps(mcp.TOOL_ARGS),
}
"""What an MCP client under test is told to call (on top of ``SSE_PROXY_STREAM_URL``)."""

PRIMING_FAMILY: Final = "mcp (priming event)"
HANG_FAMILY: Final = "mcp (hang on a broken stream)"
REISSUE_SAME_ID: Final = "mcp (re-issued under the same id)"
WRONG_FAMILIES: Final = frozenset({REISSUE_SAME_ID})
"""Families whose case is ``wrong`` even in the ``faults`` group (the client got the whole
answer, by a wrong way)."""
_UNRESUMABLE: Final = mcp.McpOptions(priming=False, ids=False, no_retry=True)
_SOURCES: Final = (
    "https://github.com/modelcontextprotocol/typescript-sdk/pull/1233",
    "https://github.com/modelcontextprotocol/python-sdk/pull/1719",
    "https://github.com/modelcontextprotocol/go-sdk/issues/686",
)


@dataclass
class McpSeen:
    """What one case's MCP server was asked: the tool calls it answered."""

    servers: list[McpServer] = field(default_factory=list)

    @property
    def calls(self) -> tuple[mcp.McpCall, ...]:
        return tuple(c for s in self.servers for c in s.calls)


def _stream_for(fixture: Fixture, case: Case) -> StreamFor | None:
    """The stream that answers a call in ``case`` (None: the mock's own, the fixture)."""
    dialect = fixture.dialect
    if case.cut is not None:

        def short(call: mcp.McpCall) -> tuple[bytes, bool]:
            return fixtures.clean_stream(dialect, fixtures.SHORT_TOKENS, request=call), False

        return short
    kind = case.fault
    if kind is not None and case.group == FAULTS:  # (a stall is the proxy's, on the clean one)
        calls = 0

        def broken(call: mcp.McpCall) -> tuple[bytes, bool]:
            nonlocal calls
            calls += 1
            if calls > 1:  # a client that re-issues the call gets its answer
                return fixtures.clean_stream(dialect, request=call), False
            stream = fixture.fault(kind, request=call)
            return stream.body, stream.reset

        return broken
    return None


def call_fields(calls: Sequence[mcp.McpCall] | None) -> mcp.StreamFields:
    """The SSE fields the first tool call's stream was given (none without a call)."""
    return calls[0].sse if calls else mcp.NO_FIELDS


def sent_stream(fixture: Fixture, calls: Sequence[mcp.McpCall]) -> bytes:
    """The clean stream the first tool call was answered with (the fixture's without
    one): what a fault in time was performed on."""
    if not calls:
        return fixture.body
    return fixtures.clean_stream(fixture.dialect, request=calls[0])


def sent_short(fixture: Fixture, calls: Sequence[mcp.McpCall] | None) -> bytes:
    """The short stream a cut case sent: the fixture's, or for MCP the one built for the
    request the client sent (its id and token decide where each byte is)."""
    if not calls:
        return fixture.short
    return fixtures.clean_stream(fixture.dialect, fixtures.SHORT_TOKENS, request=calls[0])


def mcp_upstream(
    fixture: Fixture, case: Case, lockstep: Lockstep | None, seen: McpSeen
) -> UpstreamStarter:
    """The mock that answers ``case``'s tool call; its MCP server is added to ``seen``."""
    from sse_proxy.tools.mock_upstream import MCP_SERVER, start_mock_upstream

    stream_for = _stream_for(fixture, case)
    broken = case.fault is not None and case.group == FAULTS
    options = _UNRESUMABLE if broken else None  # (nothing to resume from: no ids)

    async def start() -> tuple[Stoppable, str]:
        runner, url = await start_mock_upstream(
            seed=case.seed, lockstep=lockstep, mcp_stream=stream_for, mcp=options
        )
        seen.servers.append(runner.app[MCP_SERVER])
        return runner, url

    return start


@dataclass(frozen=True, slots=True)
class Reissue:
    """A broken call the client made again: the verdict (None: a pass)."""

    diagnosis: Diagnosis | None


def judge_reissue(
    calls: Sequence[mcp.McpCall] | None,
    full: str,
    output: str,
    code: int | None,
    hung: bool,
) -> Reissue | None:
    """The verdict on a ``faults`` case whose client called the tool again after the
    broken stream (None: it did not, or this is no MCP case). A new request id and the
    whole answer is a pass; the same id is a bug whatever it printed: a request id must
    never be used twice, and in 2026-07-28 a broken stream's request is lost, so the
    client "MUST re-issue it as a new request with a new request ID"."""
    if not calls or len(calls) < 2 or hung:
        return None
    ids = [(type(c.id), c.id) for c in calls]
    if len(set(ids)) < len(ids):
        return Reissue(
            Diagnosis(
                REISSUE_SAME_ID,
                f"the stream broke without the response, and the client called the tool "
                f"again under the request id it already had ({calls[0].id!r}): a request id "
                "is never used twice in a session, and after a broken stream (2026-07-28: "
                "a lost request) a retry is a new request with a new id; a server may "
                "reject it, or take it for the first",
                "re-issue: a new JSON-RPC request with a new id",
            )
        )
    if code == 0 and output == full:
        return Reissue(None)
    return None


def hang_on_broken_stream(
    diagnosis: Diagnosis, kind: str, calls: Sequence[mcp.McpCall], timeout: float
) -> Diagnosis:
    """A ``faults`` case the client hung on, said in MCP's terms: the tool call's stream
    ended with no JSON-RPC response and, without ids, nothing to resume from."""
    if not calls:
        return diagnosis
    first = calls[0]
    ids = "its events carried ids" if first.sse.ids else "no event carried an id"
    again = f", called again {len(calls) - 1} time(s)" if len(calls) > 1 else ""
    return replace(
        diagnosis,
        family=HANG_FAMILY,
        reason=f"no exit within {timeout:g} s after the tool call's stream (request id "
        f"{first.id!r}{again}) ended with no JSON-RPC response ({kind}); {ids}, so there is "
        "nothing to resume from: the request can never be answered, and the client waits "
        "for it; fail the call (or re-issue it under a new request id) when its stream ends "
        "without the response and cannot be resumed",
    )


def _priming_crash(
    diagnosis: Diagnosis, code: int | None, stderr: str, fields: mcp.StreamFields
) -> Diagnosis | None:
    """A crash on the priming event's empty data, or None."""
    if code in (0, None) or not fields.priming or not json_crash(stderr):
        return None
    event = fields.event_id(0)
    retry = "" if fields.retry is None else f"retry: {fields.retry}\\n"
    return replace(
        diagnosis,
        family=PRIMING_FAMILY,
        reason=f"the client crashed parsing a priming event's empty data as JSON: the stream "
        f'opened with "id: {event}\\n{retry}data:\\n\\n" (an event id and empty data, '
        "which a 2025-11-25 server sends first so that a client can resume), and "
        'JSON.parse("") / json.loads("") throws; skip an event whose data is empty (it '
        "carries an id, no message), as the official SDKs do since typescript-sdk#1233, "
        "python-sdk#1719 and go-sdk#686",
        rule="priming: an SSE stream of 2025-11-25 may open with an event id and empty data",
        sources=_SOURCES,
    )


def explain_mcp(
    diagnosis: Diagnosis,
    expected: str,
    output: str,
    code: int | None,
    calls: Sequence[mcp.McpCall],
    stderr: str = "",
) -> Diagnosis:
    """A failure said in MCP's terms where the output shows one: no tool call, a crash on
    the priming event, the result printed twice, or only its first text item."""
    if not calls:
        return replace(
            diagnosis,
            family="mcp (no tool call)",
            reason=f"{diagnosis.reason}; the tool was never called: the session did not get "
            f"that far (initialize failed?) or it called another tool than "
            f"SSE_PROXY_MCP_TOOL ({mcp.TOOL}) with other arguments than SSE_PROXY_MCP_ARGS",
        )
    primed = _priming_crash(diagnosis, code, stderr, call_fields(calls))
    if primed is not None:
        return primed
    if code != 0 or not expected:
        return diagnosis
    twice = [expected + sep + expected for sep in ("", "\n", "\r\n")]
    if output in twice:
        return replace(
            diagnosis,
            family="mcp (duplicate result)",
            reason="the result was printed twice: one response per request; a client that "
            "also handles a response replayed after a resume, or a retried call's, must "
            "print its result once",
        )
    items = mcp.runs(fixtures.TOKENS)
    if output in (items[0], items[-1]) and len(items) > 1:
        return replace(
            diagnosis,
            family="mcp (one content item)",
            reason=f"printed one of the result's {len(items)} text items: a tool result's "
            "content is a list; join the text of every item of type text",
        )
    return diagnosis


def mcp_lines(results: Sequence[object]) -> list[str]:
    """The report's MCP lines: the tool calls made and the progress the client was sent."""
    calls = [getattr(r, "mcp_calls", None) for r in results]
    known = [c for c in calls if c is not None]
    if not known:
        return []
    cases = len(known)
    called = sum(1 for c in known if c)
    asked = sum(1 for c in known if any(x.progress_token is not None for x in c))
    sent = sum(x.progress for c in known for x in c if x.progress_token is not None)
    more = sum(1 for c in known if len(c) > 1)
    revisions = sorted({x.revision or "none" for c in known for x in c})
    line = f"mcp: the tool was called in {called} of {cases} cases"
    if revisions:
        line += f" (revision {', '.join(revisions)})"
    if more:
        line += f", more than once in {more} (re-issued after a broken stream)"
    if asked:
        line += f"; progress was asked for in {asked} and sent ({sent} notifications in all)"
    elif called:
        line += (
            "; progress was never asked for (no progressToken), so progress notifications "
            "were not part of the test: pass a progress callback to cover them"
        )
    return [line]
