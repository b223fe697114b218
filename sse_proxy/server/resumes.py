"""Resumed streams, joined to the streams they resume.

A client that lost its connection reconnects with a cursor: raw SSE (and MCP) with
``Last-Event-ID`` to the same URL, OpenAI Responses with ``GET .../responses/{id}?stream=
true&starting_after=N``, Gemini Interactions with ``GET .../interactions/{id}?stream=true&
last_event_id=E``. The proxy remembers, per route, what its recent streams delivered last
(:class:`ResumeTable`, bounded in bytes): the id a client of the stream holds at its end (an
id counts once its event ended, as the spec says), an id whose event was cut, a Responses
stream's last ``sequence_number`` and its response id, an interaction's last ``event_id``
and its id. A request that carries a
cursor is looked up there (:meth:`ResumeTable.find`, at admission: one header and the query
string are read, and nothing else); when the stream it resumes is found, the request is its
continuation (:class:`Resume`): its summary says which stream it resumed, with which cursor,
after how long, and how the cursor meets what that stream delivered:

* ``exact``: the cursor is the last event the stream delivered whole;
* ``overlap``: it is before that one: the events after it come again
  (``sse.resume_overlap``), twice on the screen of a client that does not skip them;
* ``gap``: it is past it (the id of an event that was cut, or later): events are lost
  (``sse.resume_gap``, and the resumed stream's verdict is broken);
* ``replay``: a Responses stream (or an interaction) asked for again without a cursor (the
  openai SDKs' helpers do it on purpose and skip what they had);
* ``unknown``: ids that cannot be ordered (not numbers, and not the last one).

Numbers are compared as numbers; any other id only as the last one or the cut one. The
table lives in one process: with ``--workers`` a resume that lands on another worker is
not joined. A resume is forwarded like any request, to its route's upstream: nothing in a
cursor chooses where it goes.
"""

from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Any, Final

from aiohttp import web

from sse_proxy.cache import BoundedCache, size_of
from sse_proxy.core.alerts import Alert, ResumeGap, ResumeOverlap

__all__ = ["CURSOR_CHARS", "Delivered", "Resume", "ResumeTable"]

CURSOR_CHARS: Final = 200
"""The longest cursor kept and logged (a longer one is cut: ids are short)."""
_BUDGET: Final = 1 << 20
_RESPONSES: Final = "/responses/"
_INTERACTIONS: Final = "/interactions/"


@dataclass(frozen=True, slots=True)
class Delivered:
    """What one stream delivered, remembered at its end.

    ``last``: the cursor a client of it holds (raw SSE: the last id of an event that ended;
    Responses: the last ``sequence_number``); ``cut``: an id whose event the stream cut;
    ``origin`` and ``attempt``: its chain (the first stream's id; 0 for the first);
    ``text_length``: the chain's text so far (its streams' together).
    """

    stream_id: str
    origin: str
    attempt: int
    ended: float
    last: str | None
    cut: str | None
    text_length: int


@dataclass(frozen=True, slots=True)
class Resume:
    """A request that resumes a stream: its cursor (``kind``: ``last_event_id``,
    ``starting_after`` or ``event_id``: an interaction's), the stream it resumes (``of``:
    None when the proxy saw none), ``match`` (see the module), ``events`` that overlap or
    are missing (when the cursors are numbers), ``gap_s`` since that stream ended, and the
    Responses ``response_id`` (an interaction's id)."""

    kind: str
    cursor: str | None
    of: Delivered | None = None
    match: str | None = None
    events: int | None = None
    gap_s: float | None = None
    response_id: str | None = None

    @property
    def attempt(self) -> int:
        """This stream's place in its chain (1: the first resume; 0: no known origin)."""
        return 0 if self.of is None else self.of.attempt + 1

    @property
    def origin(self) -> str | None:
        return None if self.of is None else self.of.origin

    def fields(self) -> dict[str, Any]:
        """For the resumed stream's log lines (``stream.resumed``, its summary)."""
        of = self.of
        return {
            "resumed_from": None if of is None else of.stream_id,
            "resume_origin": None if of is None else of.origin,
            "resume_attempt": self.attempt,
            "resume_kind": self.kind,
            "resume_cursor": self.cursor,
            "resume_delivered": None if of is None else of.last,
            "resume_match": self.match,
            "resume_events": self.events,
            "resume_gap_s": self.gap_s,
        }

    def alert(self) -> Alert | None:
        """``sse.resume_gap`` or ``sse.resume_overlap``, when the cursors say so."""
        of = self.of
        if of is None or self.cursor is None:
            return None
        if self.match == "gap":
            return ResumeGap(
                resumed_from=of.stream_id, cursor=self.cursor, delivered=of.last, events=self.events
            )
        if self.match == "overlap":
            return ResumeOverlap(
                resumed_from=of.stream_id, cursor=self.cursor, delivered=of.last, events=self.events
            )
        return None


def _number(text: str | None) -> int | None:
    if text is None or not text.isascii() or not text.isdigit() or len(text) > 18:
        return None
    return int(text)


def _compare(cursor: str, of: Delivered) -> tuple[str, int | None]:
    """How ``cursor`` meets what ``of`` delivered: (match, events over or missing)."""
    if cursor == of.last:
        return "exact", 0
    if cursor == of.cut:
        return "gap", 1
    given, last = _number(cursor), _number(of.last)
    if given is None or last is None:
        return "unknown", None
    if given < last:
        return "overlap", last - given
    return "gap", given - last


def response_id_of(path: str, marker: str = _RESPONSES) -> str | None:
    """The response id of a ``GET .../responses/{id}`` path (an interaction's id of
    ``.../interactions/{id}``, with that ``marker``; None: not such a path)."""
    head, found, rest = path.rpartition(marker)
    if not found or not rest or "/" in rest or not head:
        return None
    return rest[:CURSOR_CHARS]


class ResumeTable:
    """What recent streams delivered last, per route (bounded in bytes: see
    :class:`~sse_proxy.cache.BoundedCache`)."""

    __slots__ = ("_seen",)

    def __init__(self, budget: int = _BUDGET) -> None:
        self._seen: BoundedCache[tuple[str, ...], Delivered] = BoundedCache(budget)

    def find(self, request: web.Request, route: str) -> Resume | None:
        """The resume a request is (None: it carries no cursor): the stream it resumes, if
        this proxy saw it, and how its cursor meets what that stream delivered."""
        last_id = request.headers.get("Last-Event-ID")
        if last_id is not None:
            cursor = last_id[:CURSOR_CHARS]
            path = request.path
            seen = self._seen
            of: Delivered | None = seen.get(("id", route, path, cursor)) or seen.get(
                ("cut", route, path, cursor)
            )
            if of is None:
                of = seen.get(("path", route, path))
            return self._resume("last_event_id", cursor, of)
        if request.method != "GET":
            return None
        path = request.path
        if _RESPONSES in path:
            marker, kind, param = _RESPONSES, "starting_after", "starting_after"
        elif _INTERACTIONS in path:
            marker, kind, param = _INTERACTIONS, "event_id", "last_event_id"
        else:
            return None
        query = request.query
        if query.get("stream") != "true":
            return None
        response_id = response_id_of(path, marker)
        if response_id is None:
            return None
        raw = query.get(param)
        after = None if raw is None else raw[:CURSOR_CHARS]
        found = self._seen.get(("resp", route, response_id))
        return self._resume(kind, after, found, response_id)

    @staticmethod
    def _resume(
        kind: str, cursor: str | None, of: Delivered | None, response_id: str | None = None
    ) -> Resume:
        if of is None:
            return Resume(kind, cursor, response_id=response_id)
        gap = round(max(time.monotonic() - of.ended, 0.0), 3)
        if cursor is None:  # a Responses stream (an interaction) asked for again from its start
            last = _number(of.last)
            events = None if last is None else last + 1
            return Resume(kind, None, of, "replay", events, gap, response_id)
        match, events = _compare(cursor, of)
        return Resume(kind, cursor, of, match, events, gap, response_id)

    def remember(
        self,
        route: str,
        path: str,
        stream_id: str,
        *,
        resume: Resume | None,
        last: str | None,
        cut: str | None,
        response_id: str | None,
        text_length: int,
    ) -> None:
        """What a stream delivered, at its end: under its ids (raw SSE, MCP) or its
        response id (Responses, an interaction), for the stream that may resume it."""
        if last is None and resume is not None and response_id is None:
            last = resume.cursor  # nothing new arrived: the client holds the cursor it came with
        if last is None and cut is None:
            return
        of = None if resume is None else resume.of
        delivered = Delivered(
            stream_id=stream_id,
            origin=stream_id if of is None else of.origin,
            attempt=0 if resume is None else resume.attempt,
            ended=time.monotonic(),
            last=None if last is None else last[:CURSOR_CHARS],
            cut=None if cut is None else cut[:CURSOR_CHARS],
            text_length=text_length + (0 if of is None else of.text_length),
        )
        cost = size_of(stream_id, path, route) + 200
        seen = self._seen
        if response_id is not None:
            seen.set(("resp", route, response_id), delivered, cost)
            return
        if delivered.last is not None:
            seen.set(("id", route, path, delivered.last), delivered, cost)
        if delivered.cut is not None:
            seen.set(("cut", route, path, delivered.cut), delivered, cost)
        seen.set(("path", route, path), delivered, cost)

    def __len__(self) -> int:
        return len(self._seen)
