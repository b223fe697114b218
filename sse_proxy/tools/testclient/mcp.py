"""The MCP cases of `test-client --dialect mcp`: the upstream of each case, and what a
failure means in MCP's terms.

The client under test speaks MCP to the mock's MCP server through the proxy: it connects
to ``SSE_PROXY_STREAM_URL`` (the ``/mcp`` endpoint), calls the tool ``SSE_PROXY_MCP_TOOL``
with the JSON arguments ``SSE_PROXY_MCP_ARGS`` and prints the result's text content. Only
the tool call streams, so only it is re-chunked or broken; the handshake is JSON. Every
case has its own mock, whose MCP server answers the call with the stream the case needs,
built for the request the client sent (its id, its progress token): the fixture (byte,
rewrite and combination cases), the short fixture (``cut``) or a broken one (``faults``).

Verdicts: the result's text, exact (the same comparison as every dialect); the progress
the client was sent (it is sent only to a request that carries a ``progressToken``, so a
client that asks for none leaves progress handling untested, and the report says so); a
result printed twice (a duplicate) or in part (the first text item only); no tool call at
all (the handshake failed, or the wrong tool or arguments).
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Final

from sse_proxy.tools import fixtures
from sse_proxy.tools.fixtures import mcp
from sse_proxy.tools.testclient.diagnose import Diagnosis
from sse_proxy.tools.testclient.fixture import Fixture

if TYPE_CHECKING:
    from sse_proxy.tools.lockstep import Lockstep
    from sse_proxy.tools.mcp_server import McpServer, StreamFor
    from sse_proxy.tools.stack import Stoppable, UpstreamStarter
    from sse_proxy.tools.testclient.plan import Case

__all__ = ["MCP_ENV", "McpSeen", "explain_mcp", "mcp_lines", "mcp_upstream", "sent_short"]

MCP_ENV: Final[dict[str, str]] = {
    "SSE_PROXY_MCP_TOOL": mcp.TOOL,
    "SSE_PROXY_MCP_ARGS": json.dumps(mcp.TOOL_ARGS),
}
"""What an MCP client under test is told to call (on top of ``SSE_PROXY_STREAM_URL``)."""


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
    if kind is not None:

        def broken(call: mcp.McpCall) -> tuple[bytes, bool]:
            stream = fixture.fault(kind, request=call)
            return stream.body, stream.reset

        return broken
    return None


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

    async def start() -> tuple[Stoppable, str]:
        runner, url = await start_mock_upstream(
            seed=case.seed, lockstep=lockstep, mcp_stream=stream_for
        )
        seen.servers.append(runner.app[MCP_SERVER])
        return runner, url

    return start


def explain_mcp(
    diagnosis: Diagnosis,
    expected: str,
    output: str,
    code: int | None,
    calls: Sequence[mcp.McpCall],
) -> Diagnosis:
    """A failure said in MCP's terms where the output shows one: no tool call, the result
    printed twice, or only its first text item."""
    if not calls:
        return replace(
            diagnosis,
            family="mcp (no tool call)",
            reason=f"{diagnosis.reason}; the tool was never called: the session did not get "
            f"that far (initialize failed?) or it called another tool than "
            f"SSE_PROXY_MCP_TOOL ({mcp.TOOL}) with other arguments than SSE_PROXY_MCP_ARGS",
        )
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
    line = f"mcp: the tool was called in {called} of {cases} cases"
    if more:
        line += f" (more than once in {more})"
    if asked:
        line += f"; progress was asked for in {asked} and sent ({sent} notifications in all)"
    elif called:
        line += (
            "; progress was never asked for (no progressToken), so progress notifications "
            "were not part of the test: pass a progress callback to cover them"
        )
    return [line]
