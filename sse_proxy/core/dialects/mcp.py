"""MCP Streamable HTTP: one JSON-RPC message per event; the stream ends with the response.

A tool call an agent makes through a remote MCP server comes back as an SSE stream of
progress notifications, log messages and, last, the JSON-RPC response to the POSTed
request. Every ``data`` must be one JSON-RPC message (an object with ``"jsonrpc": "2.0"``:
a request, a notification, a result or an error; a batch array only in the 2025-03-26
revision); an event with empty data is a priming event (legal, it only carries an id).
The response must answer a request the client sent on this stream (the request's ids come
from the proxy, :class:`~sse_proxy.core.rpcrequest.RpcRequest`), once; the text is the
result's text content, its ``type: text`` items joined, which is what a client prints.

What is read per request for the summary: method and tool (from the request), progress
and log notifications, the outcome (a result, a tool error: ``isError``, or a JSON-RPC
error and its code), priming, ``retry`` and the event ids the stream carried, so that a
resumed stream can be checked against the one it resumes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Final, Literal

import msgspec

from sse_proxy.core.alerts import (
    Alert,
    McpInvalidMessage,
    McpNotificationInvalid,
    McpUnexpectedMessage,
)
from sse_proxy.core.dialects.base import INVALID, JsonAccumulator
from sse_proxy.core.dialects.descriptor import Dialect
from sse_proxy.core.rpcrequest import Key, id_key, show_id
from sse_proxy.core.streammeta import StreamMeta

__all__ = ["DIALECT", "LOG_LEVELS", "McpAccumulator"]

LOG_LEVELS: Final = frozenset(
    {"debug", "info", "notice", "warning", "error", "critical", "alert", "emergency"}
)
"""The log levels of ``notifications/message`` (RFC 5424's eight)."""

_PROGRESS: Final = "notifications/progress"
_LOG: Final = "notifications/message"
_MAX_IDS = 64
"""Distinct event ids kept per stream (the first ones and the last: what resuming needs)."""
_MAX_TOKENS = 64
"""Progress tokens whose last value is followed (a request has one)."""
_MAX_BATCH = 256
"""Items read of one batch array (a real one holds a few)."""


# The two notifications a long tool call is made of, as types msgspec checks while it
# decodes (as the OpenAI dialect's common chunk): a payload decodes into one of these
# exactly when it is that notification, well-formed, so the per-event path asks no question
# of it in Python. Anything else (a response, an odd field, a bad type) fails to decode and
# takes the general path, which says what is wrong. gc=False: no cycles, the most frequent
# allocations of such a stream.
# Only the fields that are checked: msgspec skips the others (a progress message, a log
# message's data) without building them, which is half the cost of such an event.
class _ProgressParams(msgspec.Struct, gc=False):
    progressToken: str | int  # (the protocol's field names)
    progress: int | float


class _LogParams(msgspec.Struct, gc=False):
    level: str


class _Note(msgspec.Struct, tag_field="method", forbid_unknown_fields=True, gc=False):
    jsonrpc: Literal["2.0"]


class _Progress(_Note, tag="notifications/progress"):
    params: _ProgressParams


class _Log(_Note, tag="notifications/message"):
    params: _LogParams


_decode_note = msgspec.json.Decoder(_Progress | _Log).decode
_NOT_A_NOTE = (msgspec.ValidationError, msgspec.DecodeError, RecursionError)


@dataclass(frozen=True, slots=True)
class _Answer:
    """How a request was answered: ``result``, ``tool_error`` (``isError``) or ``error``."""

    id: str
    outcome: str
    error_code: int | None = None


class McpAccumulator(JsonAccumulator):
    """The messages of one MCP stream, checked against the request the proxy saw go out.

    Without a request (``check``, a stream read on its own) the first response is the one
    the stream owed and ends it; with one, every request of the POST must be answered, once,
    and a GET (which owes none) ends whenever it ends.
    """

    def __init__(self, alerts: list[Alert], *, keep_text: bool = True) -> None:
        super().__init__(alerts, keep_text=keep_text)
        self._parts = self.text_parts()
        self.progress = 0
        self.logs = 0
        self.notifications = 0
        self.server_requests = 0
        self.responses = 0
        self.primed = 0
        self.retry: int | None = None
        self.event_ids: list[str] = []
        """The distinct event ids of the stream, in order (the first few and the last)."""
        self._answers: dict[Key | None, _Answer] = {}
        self._progress_at: dict[object, float] = {}  # by raw token (a str, an int)
        self._done = False
        self._track_ids: bool | None = None  # settled at the first event, with the request
        self._tokens: frozenset[object] | None = None  # the request's progress tokens
        self._meta = StreamMeta()

    # -- per event ------------------------------------------------------------------------

    def accept(self, etype: str, data: str, index: int, offset: int) -> None:
        track = self._track_ids
        if track is None:
            track = self._setup()
        if track:
            self._note_id()
        if not data:
            self._empty(index, offset)
            return
        try:
            note = _decode_note(data)
        except _NOT_A_NOTE:
            pass
        else:  # a well-formed progress notification or log message: the common event
            if self._done:
                self._unexpected(McpUnexpectedMessage.AFTER_RESPONSE, index, offset)
            if isinstance(note, _Progress):
                self.progress += 1
                params = note.params
                token = params.progressToken  # a str or an int: "1" and 1 are two keys
                tokens = self._tokens
                if tokens is not None and token not in tokens:
                    self._notification(McpNotificationInvalid.PROGRESS_TOKEN, index, offset)
                at = self._progress_at
                last = at.get(token)
                if last is None:
                    if len(at) < _MAX_TOKENS:
                        at[token] = params.progress
                elif params.progress > last:
                    at[token] = params.progress
                else:
                    self._notification(McpNotificationInvalid.PROGRESS_ORDER, index, offset)
            else:
                self.logs += 1
                if note.params.level not in LOG_LEVELS:
                    self._notification(McpNotificationInvalid.LOG_LEVEL, index, offset)
            return
        obj = self.parse_any(data, index, offset)
        if obj is INVALID:
            return
        if self._done:
            self._unexpected(McpUnexpectedMessage.AFTER_RESPONSE, index, offset)
        if type(obj) is dict:
            self._message(obj, data, index, offset)
        elif type(obj) is list:
            self._batch(obj, data, index, offset)
        else:
            self._invalid(McpInvalidMessage.NOT_OBJECT, index, offset)

    def _setup(self) -> bool:
        """What the first event decides, once: the progress tokens the request sent, and
        whether the stream's event ids (and ``retry``) are followed: a resumed stream's
        are, and those of a stream whose first event has an id (a server that gives ids
        gives them from the start; a stream without is not asked about them per event)."""
        rpc = self.rpc_request
        if rpc is not None and rpc.expects_response:
            self._tokens = frozenset(c.progress_token[1] for c in rpc.calls if c.progress_token)
        last_id, retry = self.frame_info()
        if retry is not None:
            self.retry = retry
        self._track_ids = last_id is not None or (rpc is not None and rpc.last_event_id is not None)
        return self._track_ids

    def _message(self, obj: dict[str, Any], data: str, index: int, offset: int) -> None:
        if obj.get("jsonrpc") != "2.0":
            self._invalid(McpInvalidMessage.NOT_JSONRPC, index, offset)
            return
        method = obj.get("method")
        if method is None:
            if "result" in obj or "error" in obj:
                self._response(obj, data, index, offset)
            else:
                self._invalid(McpInvalidMessage.NO_KIND, index, offset)
            return
        if type(method) is not str or "result" in obj or "error" in obj:
            self._invalid(McpInvalidMessage.NO_KIND, index, offset)
            return
        if "id" in obj:  # a request from the server (sampling, elicitation, ping)
            if id_key(obj["id"]) is None:
                self._invalid(McpInvalidMessage.BAD_ID, index, offset)
                return
            self.server_requests += 1
            rpc = self.rpc_request
            if rpc is not None and rpc.modern:
                self._unexpected(McpUnexpectedMessage.SERVER_REQUEST, index, offset)
            return
        if method == _PROGRESS:
            self._progress(obj.get("params"), index, offset)
        elif method == _LOG:
            self.logs += 1
            params = obj.get("params")
            level = params.get("level") if type(params) is dict else None
            if type(level) is not str or level not in LOG_LEVELS:
                self._notification(McpNotificationInvalid.LOG_LEVEL, index, offset)
        else:
            self.notifications += 1

    def _progress(self, params: object, index: int, offset: int) -> None:
        self.progress += 1
        if type(params) is not dict:
            self._notification(McpNotificationInvalid.PROGRESS_TOKEN, index, offset)
            return
        raw = params.get("progressToken")
        key = id_key(raw)
        token = None if key is None else raw  # the raw value: as the typed path keys it
        tokens = self._tokens
        if key is None or (tokens is not None and token not in tokens):
            self._notification(McpNotificationInvalid.PROGRESS_TOKEN, index, offset)
        value = params.get("progress")
        kind = type(value)
        if kind is not int and kind is not float:
            self._notification(McpNotificationInvalid.PROGRESS_VALUE, index, offset)
            return
        at = self._progress_at
        last = at.get(token)
        if last is not None and value <= last:  # type: ignore[operator]
            self._notification(McpNotificationInvalid.PROGRESS_ORDER, index, offset)
        if last is not None or len(at) < _MAX_TOKENS:
            at[token] = value  # type: ignore[assignment]

    def _response(self, obj: dict[str, Any], data: str, index: int, offset: int) -> None:
        if "result" in obj and "error" in obj:
            self._invalid(McpInvalidMessage.NO_KIND, index, offset)
            return
        raw = obj.get("id", INVALID)
        key = id_key(raw)
        if key is None and not (raw is None and "error" in obj):  # null: an error to nobody
            self._invalid(McpInvalidMessage.BAD_ID, index, offset)
            return
        self.responses += 1
        shown = show_id(raw)
        rpc = self.rpc_request
        if rpc is not None:
            if rpc.expects_response and rpc.call(key) is None:
                self._unexpected(McpUnexpectedMessage.UNKNOWN_ID, index, offset, shown)
                return
            if rpc.http_method == "GET" and rpc.last_event_id is None:
                self._unexpected(McpUnexpectedMessage.RESPONSE_ON_GET, index, offset, shown)
        if key in self._answers:
            self._unexpected(McpUnexpectedMessage.DUPLICATE_RESPONSE, index, offset, shown)
            return
        self._answers[key] = self._answer(obj, shown, data, index, offset)
        if (
            rpc is None
            or not rpc.expects_response
            or all(c.key in self._answers for c in rpc.calls)
        ):
            self._done = True
            self.terminal_seen = True

    def _answer(
        self, obj: dict[str, Any], shown: str, data: str, index: int, offset: int
    ) -> _Answer:
        """The outcome of a response; a result's text items are the message text."""
        if "error" in obj:
            err = obj["error"]
            code = err.get("code") if type(err) is dict else None
            self.error_event(obj, index, offset)
            return _Answer(shown, "error", code if type(code) is int else None)
        result = obj["result"]
        if type(result) is not dict:
            return _Answer(shown, "result")
        content = result.get("content")
        if type(content) is list:
            for item in content:
                if type(item) is dict and item.get("type") == "text":
                    text = item.get("text")
                    if type(text) is str:
                        self._parts.append(text)
                        if "\ufffd" in text:
                            self._fffd(text, data, index, offset)
        return _Answer(shown, "tool_error" if result.get("isError") is True else "result")

    def _batch(self, items: list[Any], data: str, index: int, offset: int) -> None:
        """A batch array: 2025-03-26 only (and to a client that sent one)."""
        rpc = self.rpc_request
        if not items or rpc is None or not rpc.batches_allowed:
            self._invalid(McpInvalidMessage.BATCH, index, offset)
        for item in items[:_MAX_BATCH]:
            if type(item) is dict:
                self._message(item, data, index, offset)
            else:
                self._invalid(McpInvalidMessage.NOT_OBJECT, index, offset)

    def _empty(self, index: int, offset: int) -> None:
        """An event with empty data: a priming event when it has an id (its ``retry`` is
        how long a client waits before it reconnects)."""
        last_id, retry = self.frame_info()
        if retry is not None:
            self.retry = retry
        if last_id is None:
            return
        self.primed += 1
        if not self._track_ids:
            self._track_ids = True
            self._note_id()
        rpc = self.rpc_request
        if self.primed == 1 and rpc is not None and rpc.before_priming:
            self._unexpected(McpUnexpectedMessage.PRIMING_UNSUPPORTED, index, offset)

    def _note_id(self) -> None:
        last_id, retry = self.frame_info()
        if retry is not None:
            self.retry = retry
        ids = self.event_ids
        if last_id is None or (ids and ids[-1] == last_id):
            return
        if len(ids) < _MAX_IDS:
            ids.append(last_id)
        else:
            ids[-1] = last_id

    # -- alerts ---------------------------------------------------------------------------

    def _invalid(self, reason: str, index: int, offset: int) -> None:
        self.alerts.append(McpInvalidMessage(reason=reason, byte_offset=offset, event_index=index))

    def _unexpected(self, reason: str, index: int, offset: int, shown: str | None = None) -> None:
        self.alerts.append(
            McpUnexpectedMessage(reason=reason, byte_offset=offset, event_index=index, id=shown)
        )

    def _notification(self, reason: str, index: int, offset: int) -> None:
        self.alerts.append(
            McpNotificationInvalid(reason=reason, byte_offset=offset, event_index=index)
        )

    # -- end of stream and what is reported ---------------------------------------------------

    def finish(self) -> None:
        rpc = self.rpc_request
        if rpc is not None and not rpc.expects_response:
            self.terminal_seen = True  # a GET, or a POST of a notification: nothing owed

    @property
    def text(self) -> str:
        return "".join(self._parts)

    def stream_meta(self) -> StreamMeta:
        """The response id is the JSON-RPC id; the finish reasons are the outcomes."""
        meta = self._meta
        answers = list(self._answers.values())
        meta.response_id = answers[0].id if answers else None
        meta.finish_reasons = [a.outcome for a in answers]
        return meta

    def summary_fields(self) -> dict[str, Any]:
        """The ``mcp`` object of ``stream.summary``: the (first) request and its outcome."""
        rpc = self.rpc_request
        call = rpc.calls[0] if rpc is not None and rpc.calls else None
        answer = next(iter(self._answers.values()), None)
        if call is not None:
            answer = self._answers.get(call.key, answer)
        fields: dict[str, Any] = {
            "method": call.method if call is not None else None,
            "tool": call.tool if call is not None else None,
            "request_id": call.id if call is not None else (answer.id if answer else None),
            "protocol_version": rpc.protocol_version if rpc is not None else None,
            "outcome": answer.outcome if answer is not None else None,
            "error_code": answer.error_code if answer is not None else None,
            "progress": self.progress,
            "logs": self.logs,
            "notifications": self.notifications,
            "server_requests": self.server_requests,
            "responses": self.responses,
            "primed": self.primed > 0,
            "retry_ms": self.retry,
            "event_ids": len(self.event_ids),
            "resumed": rpc is not None and rpc.last_event_id is not None,
        }
        if rpc is not None and len(rpc.calls) > 1:
            fields["requests"] = len(rpc.calls)
        return {"mcp": fields}

    def details(self) -> dict[str, Any]:
        return {
            **self.summary_fields()["mcp"],
            "answers": [
                {"id": a.id, "outcome": a.outcome, "error_code": a.error_code}
                for a in self._answers.values()
            ],
            "event_id_list": list(self.event_ids),
        }


DIALECT: Final = Dialect(
    name="mcp",
    title="MCP Streamable HTTP",
    accumulator=McpAccumulator,
    aliases=("model_context_protocol", "model-context-protocol"),
    path_suffixes=("/mcp",),
    hint_headers=("Mcp-Session-Id", "MCP-Protocol-Version"),
    example_path="/mcp",
    example_body={
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {
            "name": "stream_text",
            "arguments": {"progress": 4},
            "_meta": {"progressToken": "sse-proxy-progress"},
        },
    },
    terminal_marker="the JSON-RPC response",
    terminal_frame=b'"result":',
    error_frame=b'event: message\ndata: {"jsonrpc":"2.0","id":1,"error":{"code":-32603,'
    b'"message":"Internal error"}}\n\n',
    error_ends_stream=True,
    text_at_end=True,
    rpc=True,
)
"""The Model Context Protocol's Streamable HTTP transport (2025-03-26 to 2026-07-28)."""
