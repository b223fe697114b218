"""The mock upstream's Gemini Interactions: streamed interactions a client resumes by
``last_event_id``, and the drops that make it resume.

``POST /{version}/interactions`` (``v1``, ``v1beta``, ``v1alpha``: the google-genai SDK
uses ``v1``) with ``"stream": true`` streams the interaction
(:func:`~sse_proxy.tools.fixtures.resume.interaction_events`: every event's JSON carries
an ``event_id``) and stores it, unless ``"store": false``; without ``stream`` it answers
the completed interaction. ``GET /{version}/interactions/{id}?stream=true[&last_event_id=E]``
streams it again, all of it or the events after E; ``GET`` without ``stream`` is the
interaction. The API's errors, in Google's shape: 404 for an unknown id, 400 for an
``last_event_id`` that is no event of this interaction or comes without ``stream=true``,
400 once it is older than the resume window (``--resume-window``).

Each interaction is its own conversation: its create stream is attempt 0, each stream after
it one more. A drop (``--fault drop`` ...) cuts the attempts it names where its
:class:`~sse_proxy.rechunk.timefaults.Timeline` says (inside a seeded ``step.delta``: its
``event:`` line arrived, its data did not), ``drop_too_old`` refuses the resume as too old;
every request is logged in the resumable streams' log (:data:`~.mock_resume.SERVED`).
"""

from __future__ import annotations

import json
import time
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web

from sse_proxy.rechunk.timefaults import DROPS, StreamKind, Timeline, resume_answer
from sse_proxy.tools.fixtures.content import MESSAGE
from sse_proxy.tools.fixtures.resume import (
    EVENT_ID_PREFIX,
    Resumable,
    after,
    interaction_events,
)
from sse_proxy.tools.mock_base import request_fault, request_resume, request_seed, request_timing
from sse_proxy.tools.mock_resume import CURSOR_LIMIT, Served, log_served, stream_events

__all__ = ["DIALECT", "TOO_OLD", "create_interaction", "get_interaction", "install"]

DIALECT: Final = "gemini"
"""The dialect that reads these streams (the resumable streams' log names it)."""
KIND: Final = StreamKind(DIALECT, b'"interaction.completed"')
"""What a drop's timeline needs: the terminal event (an interaction's, not a
generateContent chunk's ``finishReason``); its text deltas are told as the dialect's."""
TOO_OLD: Final = "This interaction can no longer be streamed: it is too old to resume."
_STORE_LIMIT = 1_000


@dataclass(slots=True)
class _Interaction:
    id: str
    created: float
    fault: str | None
    seed: int
    model: str
    events: list[Resumable] = field(default_factory=list)
    attempts: int = 1


@dataclass(slots=True)
class _Store:
    interactions: OrderedDict[str, _Interaction] = field(default_factory=OrderedDict)
    made: int = 0


_STORE: Final = web.AppKey("mock_interactions", _Store)


def install(app: web.Application) -> None:
    """Give ``app`` the stored interactions."""
    app[_STORE] = _Store()


def _error(status: int, message: str) -> web.Response:
    """Google's error shape, which the SDK surfaces as its message."""
    names = {400: "INVALID_ARGUMENT", 404: "NOT_FOUND"}
    body = {"error": {"code": status, "message": message, "status": names.get(status, "")}}
    return web.json_response(body, status=status)


def _shown(raw: str) -> str:
    return raw if len(raw) <= CURSOR_LIMIT else f"{raw[:CURSOR_LIMIT]!r}... ({len(raw)} bytes)"


def _interaction(entry: _Interaction, status: str = "completed") -> dict[str, Any]:
    outputs = [{"type": "text", "text": MESSAGE}] if status == "completed" else []
    return {
        "id": entry.id,
        "object": "interaction",
        "model": entry.model,
        "status": status,
        "outputs": outputs,
    }


def _timeline(request: web.Request, entry: _Interaction, attempt: int) -> Timeline | None:
    if entry.fault is None or entry.fault not in DROPS:
        return None
    return Timeline(entry.fault, request_timing(request), KIND, seed=entry.seed, attempt=attempt)


def _served(request: web.Request, entry: _Interaction, cursor: str | None, attempt: int) -> Served:
    return log_served(
        request,
        Served(
            at=time.monotonic(),
            method=request.method,
            target=request.rel_url.raw_path_qs[:2048],
            dialect=DIALECT,
            cursor=None if cursor is None else cursor[:CURSOR_LIMIT],
            cursor_kind=None if cursor is None else "event_id",
            attempt=attempt,
            fault=entry.fault,
            response_id=entry.id,
        ),
    )


async def create_interaction(request: web.Request) -> web.StreamResponse:
    """``POST /{version}/interactions``: streamed (``"stream": true``) or answered whole."""
    try:
        body = json.loads(await request.read() or b"{}")
    except ValueError:
        return _error(400, "Invalid JSON payload received.")
    if type(body) is not dict or (not body.get("model") and not body.get("agent")):
        return _error(400, "An interaction needs a model or an agent.")
    store = request.app[_STORE]
    store.made += 1
    entry = _Interaction(
        f"v1_mock{store.made:017d}",
        time.monotonic(),
        request_fault(request),
        request_seed(request),
        str(body.get("model") or body.get("agent")),
    )
    entry.events = interaction_events(entry.id, model=entry.model)
    if body.get("store") is not False:
        store.interactions[entry.id] = entry
        while len(store.interactions) > _STORE_LIMIT:
            store.interactions.popitem(last=False)
    if body.get("stream") is not True:
        return web.json_response(_interaction(entry))
    served = _served(request, entry, None, 0)
    return await stream_events(request, served, entry.events, b"", _timeline(request, entry, 0))


def _cursor(raw: str, entry: _Interaction) -> int | web.Response:
    """The number of the event ``raw`` names, or the 400 that refuses it."""
    number = raw.removeprefix(EVENT_ID_PREFIX)
    if len(raw) > CURSOR_LIMIT or number == raw or not number.isascii() or not number.isdigit():
        return _error(400, f"Invalid last_event_id: {_shown(raw)}; no event of this interaction.")
    value = int(number)
    if not 1 <= value <= entry.events[-1].cursor:
        return _error(400, f"Invalid last_event_id: {raw} is beyond this interaction's events.")
    return value


async def get_interaction(request: web.Request) -> web.StreamResponse:
    """``GET /{version}/interactions/{id}``: the interaction, or with ``stream=true`` its
    events again (after ``last_event_id``)."""
    interaction_id = request.match_info["interaction_id"]
    entry = request.app[_STORE].interactions.get(interaction_id)
    if entry is None:
        return _error(404, f"Interaction '{_shown(interaction_id)}' not found.")
    streaming = request.query.get("stream", "").lower() == "true"
    raw = request.query.get("last_event_id")
    if not streaming:
        if raw is not None:
            return _error(400, "last_event_id can only be used if stream is true.")
        return web.json_response(_interaction(entry))
    cursor: int | None = None
    if raw is not None:
        found = _cursor(raw, entry)
        if isinstance(found, web.Response):
            _served(request, entry, raw, -1).status = 400
            return found
        cursor = found
    attempt = entry.attempts
    entry.attempts += 1
    served = _served(request, entry, raw, attempt)
    answer = resume_answer(entry.fault, attempt)
    if answer is None and time.monotonic() - entry.created > request_resume(request).resume_window:
        answer = "too_old"
    if answer is not None:
        served.ended_at = time.monotonic()
        if answer == "no_content":
            served.status = 204
            return web.Response(status=204)
        served.status = 400
        return _error(400, TOO_OLD)
    served.delivered = cursor
    events = after(entry.events, cursor)
    return await stream_events(request, served, events, b"", _timeline(request, entry, attempt))
