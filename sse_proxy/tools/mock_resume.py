"""The mock upstream's resumable streams: raw SSE by ``Last-Event-ID``, OpenAI Responses
in background mode by ``starting_after``, and the drops that make a client resume.

Raw SSE (``GET|POST /v1/text``) is resumable when the request resumes (it carries
``Last-Event-ID``) or a drop fault is on: its events carry ids (:mod:`~sse_proxy.tools.
fixtures.resume`), it opens with ``retry:`` (``--retry``, 0.5 s), a reconnect gets the events
after its id, and a reconnect after the last one gets 204 No Content, which stops a spec
client. A request says nothing of the conversation it belongs to until it resumes, so
conversations are told apart by their fault and seed: a request without a cursor after one
that ended (or got its 204) starts a new conversation, one after a cut is the same
conversation's next attempt (a client that restarts without its cursor).

OpenAI Responses: ``POST /v1/responses`` with ``background: true`` stores the response
(``stream: true`` also streams it, sequence numbers from 0, queued first); ``GET
/v1/responses/{id}?stream=true[&starting_after=N]`` streams it again, all of it or the
events after N; ``GET /v1/responses/{id}`` is the response object; ``POST
/v1/responses/{id}/cancel`` cancels it. The API's errors, in its shape: 404 for an unknown
id, 400 for a response that was not created with ``background=true``, 400 once it is older
than the resume window (``--resume-window``, the API's five minutes), 400 for a cursor
that is not a number or is beyond the stream. Each response is its own conversation: its
create stream is attempt 0, each stream after it one more.

A drop (``--fault drop`` ...) cuts the streams its attempts say, where its
:class:`~sse_proxy.rechunk.timefaults.Timeline` says, by resetting the connection; a
``drop_204`` answers every reconnect 204, a ``drop_too_old`` refuses it as too old. Every
request of a resumable stream is logged (:class:`Served`, ``app[SERVED]``): what a harness
judges a client's resumption by.
"""

from __future__ import annotations

import asyncio
import json
import time
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Final

from aiohttp import web

from sse_proxy.names import MOCK_RESUMABLE_HEADER
from sse_proxy.rechunk.timefaults import DROPS, Timeline, resume_answer
from sse_proxy.server.delivery import Dropped, hold, stream_kind
from sse_proxy.tools.fixtures.content import MESSAGE
from sse_proxy.tools.fixtures.resume import (
    PRIMING,
    Resumable,
    after,
    priming_frame,
    resumable,
    retry_frame,
)
from sse_proxy.tools.mock_base import (
    error_response,
    request_delay,
    request_fault,
    request_resume,
    request_seed,
    request_timing,
    reset_connection,
    settings_of,
    start_sse,
)

__all__ = [
    "CURSOR_LIMIT",
    "SERVED",
    "Served",
    "cancel_response",
    "create_background",
    "get_response",
    "log_served",
    "resumes",
    "serve_resumable_text",
    "stream_events",
]

CURSOR_LIMIT: Final = 64
"""The longest cursor read (``Last-Event-ID``, ``starting_after``): the stream's are
numbers; anything longer is refused without being parsed."""
_LOG_LIMIT = 10_000
_STORE_LIMIT = 1_000
NOT_BACKGROUND_ID: Final = "resp_mock0000000000000001"
"""The id of every streamed response that was not created in the background."""
TOO_OLD: Final = "This response can no longer be streamed because it is more than 5 minutes old."
NOT_BACKGROUND: Final = (
    "This response cannot be streamed because it was not created with background=true."
)


@dataclass(slots=True)
class Served:
    """One request for a resumable stream, as the mock saw and answered it.

    ``at``: when it arrived (``time.monotonic``); ``cursor``: its ``Last-Event-ID`` or
    ``starting_after`` as given (``cursor_kind`` says which; None: none); ``attempt``: its
    place in the conversation (0: the first request); ``status``: the answer's; ``first``:
    the cursor of the first event it was sent; ``delivered``: of the last event it got whole
    (None: none); ``cut_at``: when a drop cut it; ``ended_at``: when it ended otherwise;
    ``retry``: the reconnection time in force when it was cut (raw SSE, MCP; seconds);
    MCP: ``request_id`` the JSON-RPC id of a ``tools/call`` (None: a GET), ``stream`` the
    name of the stream it was sent (its event ids' prefix).
    """

    at: float
    method: str
    target: str
    dialect: str
    cursor: str | None
    cursor_kind: str | None
    attempt: int
    fault: str | None
    status: int = 200
    first: int | None = None
    delivered: int | None = None
    cut_at: float | None = None
    ended_at: float | None = None
    retry: float | None = None
    response_id: str | None = None
    request_id: int | str | None = None
    stream: str | None = None


SERVED: Final = web.AppKey("mock_served", list[Served])
"""Every request of a resumable stream, in order (the last ten thousand)."""


@dataclass(slots=True)
class _Conversation:
    attempts: int = 0
    done: bool = False


@dataclass(slots=True)
class _Background:
    """A background response: its events, when it was made, its fault and conversation."""

    id: str
    created: float
    fault: str | None
    seed: int
    events: list[Resumable]
    attempts: int = 1
    status: str = "queued"


@dataclass(slots=True)
class _State:
    conversations: OrderedDict[tuple[str, str | None, int], _Conversation] = field(
        default_factory=OrderedDict
    )
    responses: OrderedDict[str, _Background] = field(default_factory=OrderedDict)
    made: int = 0


_STATE: Final = web.AppKey("mock_resume_state", _State)


def install(app: web.Application) -> None:
    """Give ``app`` what the resumable streams keep: the log and the conversations."""
    app[SERVED] = []
    app[_STATE] = _State()


def resumes(request: web.Request, fault: str | None) -> bool:
    """Whether a raw SSE request gets the resumable stream: it resumes, a drop is on, or
    resumable streams are asked for (``--resumable``, ``X-Mock-Resumable: 1``,
    ``?resumable=1``)."""
    if "Last-Event-ID" in request.headers or (fault is not None and fault in DROPS):
        return True
    asked = request.headers.get(MOCK_RESUMABLE_HEADER, request.query.get("resumable"))
    if asked is None:
        return settings_of(request).resumable
    return asked.strip().lower() not in ("", "0", "false", "no")


def log_served(request: web.Request, served: Served) -> Served:
    log = request.app[SERVED]
    if len(log) >= _LOG_LIMIT:
        del log[: _LOG_LIMIT // 10]
    log.append(served)
    return served


def _cursor(raw: str, name: str, last: int, *, low: int = 0) -> int | web.Response:
    """A cursor as a number from ``low`` to ``last``, or the 400 that refuses it."""
    shown = raw if len(raw) <= CURSOR_LIMIT else f"{raw[:CURSOR_LIMIT]!r}... ({len(raw)} bytes)"
    text = raw.strip()
    if len(raw) > CURSOR_LIMIT or not text.lstrip("-").isascii() or not text.lstrip("-").isdigit():
        return error_response(
            400, f"Invalid {name}: {shown}; expected an integer.", param=name, code="invalid_value"
        )
    value = int(text)
    if value < low:
        return error_response(
            400, f"Invalid {name}: {value}; it must be {low} or more.", param=name
        )
    if value > last:
        return error_response(
            400,
            f"Invalid {name}: {value} is beyond the last event of this stream ({last}).",
            param=name,
        )
    return value


async def stream_events(
    request: web.Request,
    served: Served,
    events: Sequence[Resumable],
    head: bytes,
    timeline: Timeline | None,
) -> web.StreamResponse:
    """``head``, then ``events`` frame by frame through ``timeline``'s drop (if any), the
    request's delay after each (``--delay``: a paced stream, as tokens come); a drop resets
    the connection. ``served`` is kept up to date as it goes."""
    delay = request_delay(request)
    resp = await start_sse(request)

    async def cut() -> None:
        served.cut_at = time.monotonic()
        await reset_connection(request)

    try:
        if head:
            await resp.write(head)
            if head.endswith(priming_frame()):
                served.delivered = PRIMING
        for event in events:
            if served.first is None:
                served.first = event.cursor
            pieces = [(event.frame, None)] if timeline is None else timeline.frame(event.frame)
            for piece, pause in pieces:
                if pause is not None:
                    await hold(pause, resp.write, cut)
                await resp.write(piece)
            served.delivered = event.cursor
            if delay:
                await asyncio.sleep(delay)
        end = None if timeline is None else timeline.end()
        if end is not None:
            await hold(end, resp.write, cut)
        await resp.write_eof()
        served.ended_at = time.monotonic()
    except (ConnectionResetError, ConnectionError, Dropped):
        pass  # cut by the drop, or the client left
    return resp


def _timeline(
    request: web.Request, dialect: str, fault: str | None, seed: int, attempt: int
) -> Timeline | None:
    if fault is None or fault not in DROPS:
        return None
    return Timeline(
        fault, request_timing(request), stream_kind(dialect), seed=seed, attempt=attempt
    )


def _refusal(served: Served, answer: str, message: str) -> web.Response:
    """A reconnect answered instead of streamed: 204, or the cursor-too-old 400."""
    served.ended_at = time.monotonic()
    if answer == "no_content":
        served.status = 204
        return web.Response(status=204)
    served.status = 400
    return error_response(400, message, param="stream", code="invalid_request_error")


# ------------------------------------------------------------------------- raw SSE


async def serve_resumable_text(request: web.Request, fault: str | None) -> web.StreamResponse:
    """``/v1/text`` as a resumable stream (see the module docstring)."""
    await request.read()
    events = resumable("text")
    last = events[-1].cursor
    raw = request.headers.get("Last-Event-ID")
    seed = request_seed(request)
    settings = request_resume(request)
    cursor: int | None = None
    if raw is not None:
        found = _cursor(raw, "Last-Event-ID", last)
        if isinstance(found, web.Response):
            log_served(request, _served(request, "text", raw, "last_event_id", -1, fault, 400))
            return found
        cursor = found
    state = request.app[_STATE]
    key = (request.path, fault, seed)
    conversation = state.conversations.get(key)
    if conversation is None or (conversation.done and cursor is None):
        conversation = state.conversations[key] = _Conversation()
        state.conversations.move_to_end(key)
        while len(state.conversations) > _STORE_LIMIT:
            state.conversations.popitem(last=False)
    attempt = conversation.attempts
    conversation.attempts += 1
    served = log_served(request, _served(request, "text", raw, "last_event_id", attempt, fault))
    answer = resume_answer(fault, attempt)
    if answer is not None:
        conversation.done = True
        return _refusal(served, answer, "This stream can no longer be resumed.")
    if cursor == last:  # the reconnect after the end: 204 stops a spec client
        conversation.done = True
        served.status = 204
        served.delivered = last
        served.ended_at = time.monotonic()
        return web.Response(status=204)
    head = retry_frame(settings.retry)
    if fault == "drop_primed" and cursor is None:
        head += priming_frame()
    timeline = _timeline(request, "text", fault, seed, attempt)
    served.delivered = cursor
    served.retry = settings.retry
    if fault == "drop_retry_large":
        served.retry = request_timing(request).retry_large
    resp = await stream_events(request, served, after(events, cursor), head, timeline)
    if served.ended_at is not None:
        conversation.done = served.delivered == last
    return resp


def _served(
    request: web.Request,
    dialect: str,
    cursor: str | None,
    kind: str,
    attempt: int,
    fault: str | None,
    status: int = 200,
    response_id: str | None = None,
) -> Served:
    shown = None if cursor is None else cursor[:CURSOR_LIMIT]
    return Served(
        at=time.monotonic(),
        method=request.method,
        target=request.rel_url.raw_path_qs[:2048],
        dialect=dialect,
        cursor=shown,
        cursor_kind=None if cursor is None else kind,
        attempt=attempt,
        fault=fault,
        status=status,
        response_id=response_id,
    )


# ------------------------------------------------------------- Responses, background


def _response_object(entry: _Background, status: str | None = None) -> dict[str, Any]:
    final = status or entry.status
    output: list[Any] = []
    if final == "completed":
        output = [
            {
                "id": "msg_mock0000000000000001",
                "type": "message",
                "status": "completed",
                "role": "assistant",
                "content": [{"type": "output_text", "text": MESSAGE, "annotations": []}],
            }
        ]
    return {
        "id": entry.id,
        "object": "response",
        "created_at": 1_700_000_000,
        "status": final,
        "background": True,
        "model": "gpt-4o-mini-2024-07-18",
        "output": output,
    }


def _not_found(response_id: str) -> web.Response:
    shown = response_id if len(response_id) <= CURSOR_LIMIT else response_id[:CURSOR_LIMIT] + "..."
    return error_response(404, f"Response with id '{shown}' not found.", param="response_id")


async def create_background(request: web.Request, stream: bool) -> web.StreamResponse:
    """``POST /v1/responses`` with ``background: true``: stored, and streamed (``stream``)
    or answered with the queued response."""
    state = request.app[_STATE]
    state.made += 1
    response_id = f"resp_bg{state.made:017d}"
    fault = request_fault(request)
    seed = request_seed(request)
    entry = _Background(
        response_id,
        time.monotonic(),
        fault,
        seed,
        resumable("responses", response_id=response_id),
    )
    state.responses[response_id] = entry
    while len(state.responses) > _STORE_LIMIT:
        state.responses.popitem(last=False)
    if not stream:
        entry.status = "completed"  # the mock's answer is ready at once
        body = json.dumps(_response_object(entry, "queued"))
        return web.Response(text=body, content_type="application/json")
    served = log_served(
        request, _served(request, "responses", None, "starting_after", 0, fault, 200, response_id)
    )
    timeline = _timeline(request, "responses", fault, seed, 0)
    resp = await stream_events(request, served, entry.events, b"", timeline)
    if served.ended_at is not None:
        entry.status = "completed"
    return resp


async def get_response(request: web.Request) -> web.StreamResponse:
    """``GET /v1/responses/{id}``: the response object, or with ``stream=true`` its events
    again (after ``starting_after``)."""
    response_id = request.match_info["response_id"]
    state = request.app[_STATE]
    entry = state.responses.get(response_id)
    streaming = request.query.get("stream", "").lower() == "true"
    raw = request.query.get("starting_after")
    if entry is None:
        if response_id == NOT_BACKGROUND_ID and streaming:
            return error_response(400, NOT_BACKGROUND, param="stream", code="invalid_request_error")
        return _not_found(response_id)
    if not streaming:
        return web.Response(
            text=json.dumps(_response_object(entry)), content_type="application/json"
        )
    cursor: int | None = None
    if raw is not None:
        found = _cursor(raw, "starting_after", entry.events[-1].cursor, low=-1)
        if isinstance(found, web.Response):
            log_served(
                request,
                _served(
                    request, "responses", raw, "starting_after", -1, entry.fault, 400, response_id
                ),
            )
            return found
        cursor = None if found < 0 else found
    attempt = entry.attempts
    entry.attempts += 1
    served = log_served(
        request,
        _served(
            request, "responses", raw, "starting_after", attempt, entry.fault, 200, response_id
        ),
    )
    if entry.status == "cancelled":
        served.status = 400
        served.ended_at = time.monotonic()
        return error_response(
            400, "This response was cancelled and can no longer be streamed.", param="stream"
        )
    answer = resume_answer(entry.fault, attempt)
    if answer is None and time.monotonic() - entry.created > request_resume(request).resume_window:
        answer = "too_old"
    if answer is not None:
        return _refusal(served, answer, TOO_OLD)
    served.delivered = cursor
    timeline = _timeline(request, "responses", entry.fault, entry.seed, attempt)
    resp = await stream_events(request, served, after(entry.events, cursor), b"", timeline)
    if served.ended_at is not None:
        entry.status = "completed"
    return resp


async def cancel_response(request: web.Request) -> web.Response:
    """``POST /v1/responses/{id}/cancel``: a background response that has not completed is
    cancelled; cancelling again returns it as it is."""
    response_id = request.match_info["response_id"]
    await request.read()
    entry = request.app[_STATE].responses.get(response_id)
    if entry is None:
        if response_id == NOT_BACKGROUND_ID:
            return error_response(
                400, "Only responses created with background=true can be cancelled."
            )
        return _not_found(response_id)
    if entry.status != "completed":
        entry.status = "cancelled"
    return web.Response(text=json.dumps(_response_object(entry)), content_type="application/json")
