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
