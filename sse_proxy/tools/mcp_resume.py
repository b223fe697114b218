"""The mock MCP server's drops, the MCP way: cut a tool call's stream, and resume it or not
as the client's revision says.

A drop fault (``--fault drop``, ``X-Mock-Fault``; :data:`~sse_proxy.rechunk.timefaults.DROPS`)
cuts a ``tools/call`` stream where its :class:`~sse_proxy.rechunk.timefaults.Timeline` says:
among the notifications, the response left to come. What the client must do next is its
revision's:

* up to 2025-11-25 the stream's events carry ids naming it (``s1-0`` the priming event,
  ``s1-1``...) and it opens with ``retry:``; after the cut the client waits that long and
  reconnects with ``GET`` and ``Last-Event-ID``; the server sends the events of *that*
  stream after that id, then the response, and never another stream's (a cursor naming a
  stream of another session, or none, is a 400). ``drop_start`` sends no priming event
  and cuts the first message: no id arrived, nothing can be resumed, and the client must
  report the failure or call again under a new request id. ``drop_primed`` cuts right
  after the priming event (the client resumes from ``s1-0``), ``drop_twice`` cuts the
  resumed stream again inside its first event (before any new id, so the second reconnect
  names the cursor of the first), ``drop_retry_invalid``/``drop_retry_large`` write their
  ``retry:`` block just before the cut;
* 2026-07-28 has no resumption: the events carry no ids, a ``GET`` gets 405, and the
  client must re-issue the lost request under a new request id; a stream the client
  closes (or that breaks) is a cancelled call (:attr:`~.mcp_server.McpServer.cancelled`).

Every stream whose events carry ids is kept (the last thousand), so a client whose stream
was cut by something else (the chaos proxy's drop: ``X-SSE-Proxy-Chaos: fault=drop``, a
network) resumes it the same way. Each ``tools/call`` and each ``GET`` of a session (or,
without sessions, of the server) is the next *attempt* of its conversation: ``drop`` cuts
attempt 0, ``drop_twice`` attempts 0 and 1, so a re-issued call or a resumed stream runs
whole. Every such request is logged as the resumable streams' are
(:data:`~sse_proxy.tools.mock_resume.SERVED`), with its request id and stream name: what
the test-client's ``resume`` group judges a client by.
"""

from __future__ import annotations

import re
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Final

from aiohttp import web

from sse_proxy.rechunk.shapes.rewriter import split_frames
from sse_proxy.rechunk.timefaults import DROPS, Timeline
from sse_proxy.server.delivery import stream_kind
from sse_proxy.tools.fixtures import mcp
from sse_proxy.tools.fixtures.resume import Resumable, after, retry_frame
from sse_proxy.tools.mock_base import request_seed, request_timing
from sse_proxy.tools.mock_resume import CURSOR_LIMIT, Served, log_served, stream_events

__all__ = ["McpDrops", "event_cursor", "events_of"]

_ID_LINE: Final = re.compile(rb"^id: ?([!-~]+)-(\d{1,9})\r?$", re.MULTILINE)
_STORE_LIMIT: Final = 1_000
_SESSION: Final = "Mcp-Session-Id"


def event_cursor(event_id: str) -> tuple[str, int] | None:
    """``("s1", 3)`` for the event id ``s1-3`` (a stream's name and its event's number);
    None for anything else."""
    name, sep, number = event_id.rpartition("-")
    if not sep or not name or not number.isascii() or not number.isdigit() or len(number) > 9:
        return None
    return name, int(number)


def events_of(body: bytes) -> list[Resumable]:
    """A tool call's stream as its events, each with the number its id carries (an event
    without an id: the one after the last)."""
    out: list[Resumable] = []
    for frame in split_frames(body):
        found = _ID_LINE.search(frame)
        number = int(found.group(2)) if found else (out[-1].cursor + 1 if out else 1)
        out.append(Resumable(number, frame))
    return out


@dataclass(slots=True)
class _Stream:
    """A stream a client can resume: its session, its events, the retry it set (seconds)."""

    session: str | None
    events: list[Resumable]
    retry: float | None


@dataclass(slots=True)
class McpDrops:
    """One MCP server's cut streams and conversations (see the module docstring)."""

    streams: OrderedDict[tuple[str | None, str], _Stream] = field(default_factory=OrderedDict)
    attempts: dict[str | None, int] = field(default_factory=dict)

    def _attempt(self, session: str | None) -> int:
        attempt = self.attempts.pop(session, 0)
        self.attempts[session] = attempt + 1  # (last: the oldest session goes first)
        while len(self.attempts) > _STORE_LIMIT:
            del self.attempts[next(iter(self.attempts))]
        return attempt

    def _store(self, session: str | None, name: str, stream: _Stream) -> None:
        self.streams[(session, name)] = stream
        while len(self.streams) > _STORE_LIMIT:
            self.streams.popitem(last=False)

    def keep(self, session: str | None, call: mcp.McpCall, body: bytes) -> None:
        """Keep a stream the server sends whole (its events carry ids) for a client that
        loses it on the way and resumes it (a GET of it is no attempt of a drop)."""
        retry = None if call.sse.retry is None else call.sse.retry / 1000
        self._store(session, call.sse.stream, _Stream(session, events_of(body), retry))

    @staticmethod
    def fields(fault: str, sse: mcp.StreamFields) -> mcp.StreamFields:
        """The SSE fields of a stream ``fault`` cuts: ``drop_start`` has no priming event
        (no id arrives before the cut)."""
        if fault == "drop_start" and sse.priming:
            return mcp.StreamFields(sse.stream, False, sse.ids, sse.retry)
        return sse

    async def serve_call(
        self,
        request: web.Request,
        call: mcp.McpCall,
        body: bytes,
        fault: str,
        session: str | None,
    ) -> tuple[web.StreamResponse, bool]:
        """The stream of a ``tools/call`` under the drop ``fault``: cut on the attempts it
        cuts, kept for a resume when its events carry ids; and whether it went out whole."""
        attempt = self._attempt(session)
        sse = call.sse
        resumable = sse.ids and bool(sse.stream)
        retry = None if sse.retry is None or fault == "drop_start" else sse.retry / 1000
        if fault == "drop_retry_large":
            retry = request_timing(request).retry_large
        served = log_served(
            request,
            Served(
                at=time.monotonic(),
                method="POST",
                target=request.rel_url.raw_path_qs[:2048],
                dialect="mcp",
                cursor=None,
                cursor_kind=None,
                attempt=attempt,
                fault=fault,
                retry=retry,
                request_id=call.id,
                stream=sse.stream if resumable else None,
            ),
        )
        events = events_of(body)
        if resumable:
            self._store(session, sse.stream, _Stream(session, events, retry))
        timeline = Timeline(
            fault,
            request_timing(request),
            stream_kind("mcp"),
            seed=request_seed(request),
            attempt=attempt,
        )
        resp = await stream_events(request, served, events, b"", timeline)
        return resp, served.ended_at is not None

    def log_refused(self, request: web.Request, fault: str | None, status: int) -> None:
        """A ``GET`` answered without a stream (405: no cursor, or a revision without
        resumption; 400: a cursor of no stream here): logged while a drop is on, as a
        reconnect that got nothing."""
        if fault is None or fault not in DROPS:
            return
        raw = request.headers.get("Last-Event-ID")
        log_served(
            request,
            Served(
                at=time.monotonic(),
                method="GET",
                target=request.rel_url.raw_path_qs[:2048],
                dialect="mcp",
                cursor=None if raw is None else raw[:CURSOR_LIMIT],
                cursor_kind=None if raw is None else "last_event_id",
                attempt=-1,
                fault=fault,
                status=status,
                ended_at=time.monotonic(),
            ),
        )

    async def serve_resume(
        self, request: web.Request, fault: str | None, raw: str
    ) -> web.StreamResponse:
        """``GET`` with ``Last-Event-ID: raw``: the events of that stream after that id (the
        drop cuts them again on an attempt it cuts), or a 400 for a cursor that names no
        stream of the request's session."""
        session = request.headers.get(_SESSION)
        found = event_cursor(raw) if len(raw) <= CURSOR_LIMIT else None
        stream = None if found is None else self.streams.get((session, found[0]))
        if found is None or stream is None or found[1] > stream.events[-1].cursor:
            self.log_refused(request, fault, 400)
            shown = raw if len(raw) <= CURSOR_LIMIT else f"{raw[:CURSOR_LIMIT]}... ({len(raw)} B)"
            return web.json_response(
                {
                    "jsonrpc": "2.0",
                    "id": None,
                    "error": {
                        "code": -32600,
                        "message": f"Last-Event-ID {shown!r} names no event of a stream of "
                        "this session",
                    },
                },
                status=400,
            )
        name, number = found
        attempt = self._attempt(session)
        served = log_served(
            request,
            Served(
                at=time.monotonic(),
                method="GET",
                target=request.rel_url.raw_path_qs[:2048],
                dialect="mcp",
                cursor=raw,
                cursor_kind="last_event_id",
                attempt=attempt,
                fault=fault,
                delivered=number,
                retry=stream.retry,
                stream=name,
            ),
        )
        timeline = None
        if fault is not None and fault in DROPS:
            timeline = Timeline(
                fault,
                request_timing(request),
                stream_kind("mcp"),
                seed=request_seed(request),
                attempt=attempt,
            )
        head = b"" if stream.retry is None else retry_frame(stream.retry)
        return await stream_events(request, served, after(stream.events, number), head, timeline)
