"""The fix for a bug family, said in the language of the client under test.

CMD's runtime is read off the command (``node client.mjs``, ``python -m app``, ``deno run``,
``bun``, ``npx vitest``, a script's ``#!`` line or its file extension); when it is known,
the hint is the one-line fix an author of that language needs (``decoder.decode(chunk,
{stream: true})`` with one decoder per stream, ``codecs.getincrementaldecoder``); when it
is not, the runtime-neutral one.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from typing import Final

__all__ = ["hint_for", "runtime_of"]

_JS: Final = "javascript"
_PY: Final = "python"
_RUNTIMES: Final[dict[str, str]] = {
    "node": _JS,
    "nodejs": _JS,
    "deno": _JS,
    "bun": _JS,
    "npx": _JS,
    "npm": _JS,
    "pnpm": _JS,
    "yarn": _JS,
    "tsx": _JS,
    "vitest": _JS,
    "python": _PY,
    "pytest": _PY,
    "uv": _PY,
}
_EXTENSIONS: Final[dict[str, str]] = {
    ".js": _JS,
    ".mjs": _JS,
    ".cjs": _JS,
    ".ts": _JS,
    ".mts": _JS,
    ".py": _PY,
}


def _named(word: str) -> str | None:
    base = os.path.basename(word).lower()
    if base in _RUNTIMES:
        return _RUNTIMES[base]
    if base.startswith("python"):
        return _PY
    return _EXTENSIONS.get(os.path.splitext(base)[1])


def runtime_of(command: Sequence[str]) -> str | None:
    """``javascript`` (node, deno, bun), ``python``, or None when CMD does not say."""
    if not command:
        return None
    if command[0] == "--browser":  # test-client --browser NAME --script FILE.js
        return _JS
    if command[0] == "--":
        command = command[1:]
        if not command:
            return None
    found = _named(command[0])
    if found is None and os.path.isfile(command[0]):
        try:
            with open(command[0], "rb") as f:
                first = f.readline(200)
        except OSError:
            first = b""
        if first.startswith(b"#!"):
            words = first[2:].decode("utf-8", "replace").split()
            found = next((r for w in words if (r := _named(w)) is not None), None)
    if found is None and len(command) > 1:
        found = next((r for w in command[1:3] if (r := _named(w)) is not None), None)
    return found


_HINTS: Final[dict[str, dict[str | None, str]]] = {
    "character boundary": {
        _JS: "create one TextDecoder per stream and call decoder.decode(chunk, {stream: "
        "true}) on every read (or pipe the body through new TextDecoderStream()); "
        "`new TextDecoder().decode(chunk)` per read cuts characters in two",
        _PY: "decode with one codecs.getincrementaldecoder('utf-8')() per stream, or split "
        "lines on bytes and decode whole lines; bytes.decode() per read cuts characters",
        None: "decode with one stateful (incremental) UTF-8 decoder per stream, or split "
        "lines on bytes and decode whole lines",
    },
    "frame boundary": {
        _JS: "keep a string buffer across reads, split it on /\\r\\n|\\r|\\n/, and "
        "dispatch an event only at a blank line (or use eventsource-parser's "
        "createParser and feed() every decoded read)",
        _PY: "keep a buffer across reads and dispatch only at a blank line (httpx-sse's "
        "iter_sse() or response.iter_lines() do this)",
        None: "buffer across reads and dispatch an event only at a blank line",
    },
    "whitespace trimming": {
        _JS: "take the value after 'data:' and drop one leading space only "
        "(v.startsWith(' ') ? v.slice(1) : v); never .trim() a delta",
        _PY: "take line[5:] and drop one leading space only (v[1:] if v.startswith(' ') "
        "else v); never .strip() a delta",
        None: "strip exactly one space after 'data:' and never trim a delta",
    },
    "spec conformance (final CR)": {
        _JS: "when the body ends, treat a held trailing CR as a line end and dispatch the "
        "pending event (with eventsource-parser: feed a final '\\n' before "
        "reset({consume: true}))",
        _PY: "when the body ends, treat a held trailing CR as a line end and dispatch the "
        "pending event",
        None: "at the end of the stream, a held trailing CR ends the line: dispatch",
    },
    "parser (hang)": {
        _JS: "an EventSource reconnects when the stream ends: call es.close() at the "
        "terminal marker; a reader loop must end when read() returns done",
        _PY: "end the loop at the terminal marker or when the body ends; a parser "
        "waiting for '\\n\\n' never sees a bare-CR stream end",
        None: "end at the terminal marker or at the end of the body",
    },
    "silent truncation": {
        _JS: "throw when the body ends without the terminal marker ([DONE], "
        "message_stop, response.completed), inside a frame, or after an error event",
        _PY: "raise when the body ends without the terminal marker ([DONE], "
        "message_stop, response.completed), inside a frame, or after an error event",
        None: "fail when the stream ends without its terminal marker",
    },
    "wiring (the script's default export)": {
        _JS: "export default async function ({ url, body, headers, dialect }) { ... return "
        "text; } (the harness awaits the default export for the streamed text)",
        None: "the script's default export must be an async function that resolves to the "
        "streamed text",
    },
    "time boundary (stall kept alive by comments)": {
        _JS: "a read timeout, or an idle timer every byte resets, never fires while comments "
        "arrive: keep a timer only text deltas reset (then controller.abort()), or bound the "
        "whole answer with fetch(url, {signal: AbortSignal.timeout(ms)}); EventSource has no "
        "timeout at all: a watchdog timer that calls es.close()",
        _PY: "httpx's read timeout (the openai and anthropic SDKs' timeout=) never fires while "
        "comments arrive: time the text itself, a deadline reset on each text delta "
        "(asyncio.timeout around each step of the stream, or a watchdog that closes the "
        "response), or bound the whole answer",
        None: "give up when no text arrived for a while, whatever else arrives: a read timeout "
        "never fires while comments or pings keep the connection busy",
    },
    "time boundary (silent stall)": {
        _JS: "set a deadline: the openai SDK's timeout option (new OpenAI({timeout: ms})), "
        "fetch(url, {signal: AbortSignal.timeout(ms)}) for the whole answer, or an "
        "AbortController a read timer resets; EventSource has none: a watchdog timer that "
        "calls es.close()",
        _PY: "set a read timeout: OpenAI(timeout=httpx.Timeout(600, read=30)) (anthropic and "
        "httpx alike), requests' timeout=(connect, read); a default read timeout of minutes "
        "is a hang to a user",
        None: "set a read timeout (or a deadline on the whole answer)",
    },
    "time boundary (waits for the close)": {
        _JS: "stop at the terminal marker ([DONE], message_stop, response.completed): break "
        "out of the read loop and call reader.cancel() (EventSource: es.close()); never wait "
        "for the body to end",
        _PY: "stop at the terminal marker ([DONE], message_stop, response.completed) and close "
        "the response; never wait for the body to end",
        None: "end at the terminal marker, not at the end of the body",
    },
    "time boundary (no whole-answer deadline)": {
        _JS: "bound the whole answer: fetch(url, {signal: AbortSignal.timeout(ms)}) (the "
        "openai SDK takes the same signal in a request's options)",
        _PY: "bound the whole answer: asyncio.timeout(total) around the stream, or a deadline "
        "checked at each event (httpx's timeouts are per read, never total)",
        None: "put a deadline on the whole answer",
    },
    "time boundary (silent truncation after a stall)": {
        _JS: "a stall that ends the answer is a failure: throw when the stream ends, or a "
        "deadline fires, before the terminal marker",
        _PY: "a stall that ends the answer is a failure: raise when the stream ends, or a "
        "deadline fires, before the terminal marker",
        None: "report a stall as a failure, never as the end of the answer",
    },
    "mcp (priming event)": {
        _JS: "skip an event whose data is empty before you parse it (if (!event.data) return;"
        " it only carries an id to resume from), or use the official SDK's "
        "StreamableHTTPClientTransport, which does",
        _PY: "skip an event whose data is empty before you parse it (if not sse.data: "
        "continue; it only carries an id to resume from), or use the official SDK's "
        "streamable_http_client, which does",
        None: "skip an event whose data is empty (a priming event: an id to resume from, "
        "no message) before parsing it as JSON",
    },
    "mcp (hang on a broken stream)": {
        _JS: "the official SDK leaves a request whose stream ended without the response and "
        "without an event id pending until its request timeout (60 s; typescript-sdk#2739, "
        "fix PR #2830): pass callTool(params, undefined, {timeout: ms}) (or settle the "
        "request when the stream ends and cannot resume), then call again if you retry",
        _PY: "mcp 1.x waits forever here (python-sdk#3441, a backport of the 2.x fix): upgrade "
        "to mcp 2.x, which fails the call at once with McpError -32000 ('SSE stream ended "
        "without a response'), or bound the call: call_tool(..., "
        "read_timeout_seconds=timedelta(seconds=...))",
        None: "fail the call when its stream ends without the JSON-RPC response and without "
        "an event id to resume from (or re-issue it under a new request id); bound every "
        "call with a timeout",
    },
    "mcp (re-issued under the same id)": {
        None: "give a re-issued request a new JSON-RPC id (a counter per session): the id "
        "of a request whose stream broke is spent",
    },
    "mcp (no resume)": {
        _JS: "resume a tool call's stream that broke: the official SDK's "
        "StreamableHTTPClientTransport does for a stream that had an event id (GET with "
        "Last-Event-ID after the retry delay); by hand, keep the last event id and, after the "
        "drop, wait the stream's retry: then fetch(url, {method: 'GET', headers: "
        "{'Last-Event-ID': id, 'Mcp-Session-Id': sid, 'MCP-Protocol-Version': v}}); a stream "
        "cut before any id cannot be resumed: reject the call, never wait for it (the SDK "
        "waits for the request's timeout, 60 s: callTool(params, undefined, {timeout: ms}))",
        _PY: "resume a tool call's stream that broke: the official SDK's streamable_http_client "
        "does (GET with Last-Event-ID after the retry delay); by hand, catch "
        "httpx.RemoteProtocolError, wait the stream's retry: and GET with headers "
        "{'Last-Event-ID': last_id, 'mcp-session-id': sid}; a stream cut before any id "
        "cannot be resumed: raise (mcp 1.x hangs there; 2.x raises McpError -32000)",
        None: "after a drop, wait the retry delay and reconnect with GET and Last-Event-ID; "
        "without an id, report the failure or call again under a new id",
    },
    "mcp (no re-issue)": {
        _JS: "in 2026-07-28 a broken stream loses the request: catch the rejected callTool and "
        "call it again (the SDK gives the new request a new id); never resume it by GET",
        _PY: "in 2026-07-28 a broken stream loses the request: catch McpError (-32000, 'SSE "
        "stream ended without a response') and call_tool again (a new request, a new id)",
        None: "re-issue the lost request as a new request with a new request id",
    },
    "mcp (Last-Event-ID lost on a reconnect)": {
        _JS: "carry the last event id over every reconnect: a resumed stream that drops before "
        "a new id must be resumed from the same id again; StreamableHTTPClientTransport sends "
        "no Last-Event-ID then (typescript-sdk#2499, fix PRs #2509/#2745): pass "
        "resumptionToken and onresumptiontoken in the request options and resume with the "
        "latest token yourself until the fix is released",
        _PY: "carry the last event id over every reconnect (keep it outside the stream you "
        "read): a resumed stream that drops before a new id is resumed from the same id again",
        None: "keep the cursor across reconnects: the last event id received, whichever "
        "stream it came on",
    },
    "mcp (resumed past its cursor)": {
        _JS: "take an event's id when the event is dispatched (its blank line), not at its id: "
        "line: eventsource-parser's onEvent gives it right",
        _PY: "take an event's id when the event is dispatched (its blank line), not at its id: "
        "line",
        None: "the cursor is the id of the last event received whole",
    },
    "mcp (reconnect too early)": {
        _JS: "wait the stream's retry: (milliseconds, all digits) before the GET; the "
        "official SDK does (reconnectionOptions apply only without one)",
        _PY: "wait the stream's retry: (milliseconds, all digits) before the GET; the "
        "official SDK does (1 s without one)",
        None: "wait the retry delay in force before reconnecting",
    },
    "mcp (reconnect loop)": {
        _JS: "reconnect once per drop, with a limit (reconnectionOptions.maxRetries), and stop "
        "once the response is in or the server refuses (405, 400, 404)",
        _PY: "reconnect once per drop with a limit that a stream which opens and ends again "
        "does not reset (python-sdk#2393, #3257); stop once the response is in",
        None: "reconnect once per drop, with a limit; stop once the response is in",
    },
    "mcp (re-issued instead of resumed)": {
        None: "a stream that had an event id is resumed (GET with Last-Event-ID), not called "
        "again: a new call runs the tool a second time",
    },
    "mcp (no end after resuming)": {
        None: "take the result when the JSON-RPC response arrives on the resumed stream, "
        "and end the call",
    },
    "mcp (resumed result misread)": {
        None: "the resumed stream goes on with the same call: its notifications and its "
        "response carry the id of the request whose stream broke",
    },
    "mcp (duplicate result)": {
        None: "one response per request: a response replayed after a resume, or a retried "
        "call's, is printed once",
    },
    "mcp (stall kept alive by comments)": {
        _JS: "set the request's timeout (client.callTool(params, undefined, {timeout: ms})): "
        "the SDK's is 60 s and comments never reset it; resetTimeoutOnProgress: true resets "
        "it on progress notifications only",
        _PY: "set a read timeout on the call (session.call_tool(..., "
        "read_timeout_seconds=timedelta(seconds=...))): the SDK's httpx read timeout is "
        "300 s and every comment resets it",
        None: "time the tool call's messages, not its bytes: give up when no message came "
        "for a while, whatever comments keep the stream busy",
    },
    "mcp (silent stall)": {
        _JS: "set the request's timeout (client.callTool(params, undefined, {timeout: ms})); "
        "the SDK's default is 60 s",
        _PY: "set a read timeout on the call (session.call_tool(..., "
        "read_timeout_seconds=timedelta(seconds=...))); the SDK's default is 300 s",
        None: "give every tool call a deadline",
    },
    "mcp (lingers after the result)": {
        None: "take the result when the JSON-RPC response arrives and stop reading the "
        "stream; never wait for it to close",
    },
    "mcp (no whole-call deadline)": {
        _JS: "bound the whole call: callTool(params, undefined, {timeout: ms, "
        "maxTotalTimeout: ms})",
        _PY: "bound the whole call: anyio.fail_after(seconds) around call_tool",
        None: "put a deadline on the whole tool call",
    },
    "mcp (exit 0 without the result)": {
        None: "a tool call without its JSON-RPC response failed: report it, never print "
        "what came before as the result",
    },
    "connection boundary (duplicated)": {
        _JS: "resume from the last event you received whole: EventSource does it by itself "
        "(keep one EventSource; a new EventSource(url) forgets its lastEventId); with fetch, "
        "keep the last id and send it as Last-Event-ID (Responses: the last sequence_number as "
        "starting_after), or skip events whose number you already have",
        _PY: "keep the last id (Responses: the last sequence_number; Gemini Interactions: the "
        "last event_id) and reconnect with it: headers={'Last-Event-ID': last_id}, or "
        "client.responses.retrieve(id, stream=True, starting_after=seq), or "
        "client.interactions.get(id, stream=True, last_event_id=event_id); a restart without "
        "it replays the answer from the start",
        None: "reconnect with the cursor of the last event received whole (Last-Event-ID, "
        "starting_after, last_event_id), or skip what you already have",
    },
    "connection boundary (lost)": {
        _JS: "take an event's id only when the event is dispatched (at its blank line), never "
        "when its id: line is read: a block cut after its id: line never arrived "
        "(eventsource does it right; @microsoft/fetch-event-source does not)",
        _PY: "take an event's id only when the event is dispatched (at its blank line): a "
        "block cut after its id: line never arrived",
        None: "the cursor is the last event received whole: an id in a block cut before its "
        "blank line does not count",
    },
    "connection boundary (no resume)": {
        _JS: "after a drop, reconnect: EventSource does unless you close() it in onerror "
        "(check es.readyState === EventSource.CONNECTING: it is retrying); "
        "fetchEventSource: return from onerror (a delay in ms) instead of throwing; with the "
        "openai SDK, catch the error and call client.responses.retrieve(id, {stream: true, "
        "starting_after: seq})",
        _PY: "catch the dropped connection (httpx.RemoteProtocolError, openai.APIConnectionError, "
        "google-genai's APIConnectionError) and resume: client.responses.retrieve(id, "
        "stream=True, starting_after=seq), client.interactions.get(id, stream=True, "
        "last_event_id=event_id), or a new request with Last-Event-ID; never take a cut "
        "stream for the whole answer",
        None: "after a drop, resume from your cursor; a cut stream is not the answer",
    },
    "connection boundary (too early)": {
        _JS: "wait the stream's retry: delay (the last all-digits one) before reconnecting; "
        "fetchEventSource takes 'retry: 10ms' as 10: ignore a retry: that is not all digits",
        _PY: "wait the stream's retry: delay (the last value made of digits only) before "
        "reconnecting",
        None: "wait the retry: delay in force before reconnecting; ignore a retry: that is not "
        "all digits",
    },
    "connection boundary (storm)": {
        _JS: "reconnect once per drop, after the retry delay, with a backoff and a limit; an "
        "error that comes again (a bad header, a 4xx) is not cured by retrying",
        _PY: "reconnect once per drop, after the retry delay, with a backoff and a limit",
        None: "reconnect once per drop, after the retry delay, with a backoff",
    },
    "connection boundary (looped after 204)": {
        _JS: "a 204 No Content means stop: EventSource does; fetchEventSource retries it "
        "unless onopen throws on response.status === 204 (or onerror throws)",
        _PY: "a 204 No Content (or any non-200 answer) to a reconnect ends the stream: stop",
        None: "stop reconnecting at a 204 No Content",
    },
    "connection boundary (no end after resuming)": {
        _JS: "end when the answer is whole: EventSource reconnects after every end, so close "
        "it when its readyState is CLOSED in onerror (a 204 came) or at your own end marker",
        _PY: "end at the terminal marker, or when a reconnect gets 204",
        None: "end when the answer is whole (a terminal marker, a 204 on the reconnect)",
    },
    "connection boundary (refused resume taken for the end)": {
        _JS: "a resume answered with an error (400: too old) is a failure: throw, never "
        "return the part you had",
        _PY: "a resume answered with an error (openai.BadRequestError: too old) is a failure: "
        "raise it, never return the part you had",
        None: "report a refused resume as a failure",
    },
    "output flood": {
        _JS: "write only the streamed text with process.stdout.write; log with console.error",
        _PY: "write only the streamed text to sys.stdout; log to sys.stderr",
        None: "print only the streamed text on stdout",
    },
}
_SPEC_HINTS: Final[dict[str | None, str]] = {
    _JS: "parse the event stream as the spec says (lines end at CRLF, LF or CR; skip "
    "comments and a leading BOM; data-less blocks dispatch nothing); eventsource-parser "
    "does it",
    _PY: "parse the event stream as the spec says (lines end at CRLF, LF or CR; skip "
    "comments and a leading BOM; data-less blocks dispatch nothing); httpx-sse does most",
    None: "parse the event stream as the spec says",
}


def hint_for(family: str, runtime: str | None) -> str | None:
    """The fix for ``family`` (a :class:`~.diagnose.Diagnosis` family) in ``runtime``."""
    table = _HINTS.get(family)
    if table is None and family.startswith("spec conformance"):
        table = _SPEC_HINTS
    if table is None:
        base = family.split(" (where ", 1)[0]
        table = _HINTS.get(base)
    if table is None:
        return None
    return table.get(runtime) or table.get(None)
