"""Shared plumbing of the small test-subject clients: one request, raw reads, delta text.

Run a client from the repository root as a module, e.g.
``sse-proxy test-client -- python -m tests.tools.clients.reference``.

Stdlib only, so a client starts in milliseconds. ``http.client`` returns at most one HTTP
chunk per ``read1``, so each read follows one proxy write (unless a write arrives in parts),
which is what lets these clients show their bugs reliably. The correct pieces live here;
each buggy client replaces exactly one of them.
"""

from __future__ import annotations

import codecs
import http.client
import json
import os
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from urllib.parse import urlsplit

Dispatch = Callable[[str, str], None]


class Deadline(Exception):
    """A client's deadline fired (its message says which)."""


def reads(wait: Callable[[], tuple[float, str]] | None = None) -> Iterator[bytes]:
    """POST the dialect's streaming body to SSE_PROXY_STREAM_URL; yield the raw reads.

    ``wait``: before each read, (seconds it may take, what that deadline is); the read
    raises :class:`Deadline` past it (a socket timeout: a read timeout, or less when a
    deadline of the client's own is nearer). Default: a 30 s read timeout.
    """
    url = urlsplit(os.environ["SSE_PROXY_STREAM_URL"])
    body = os.environ.get("SSE_PROXY_STREAM_BODY", "{}").encode()
    conn = http.client.HTTPConnection(url.hostname or "127.0.0.1", url.port, timeout=30)
    target = url.path + (f"?{url.query}" if url.query else "")
    conn.request(
        "POST",
        target,
        body=body,
        headers={"Content-Type": "application/json", "Accept": "text/event-stream"},
    )
    sock = conn.sock
    resp = conn.getresponse()
    if resp.status != 200:
        sys.exit(f"HTTP {resp.status}: {resp.read()[:200]!r}")
    while True:
        what = "read timeout"
        if wait is not None and sock is not None:
            left, what = wait()
            if left <= 0:
                raise Deadline(what)
            sock.settimeout(left)
        try:
            chunk = resp.read1(65536)
        except TimeoutError:
            raise Deadline(what) from None
        if not chunk:
            break
        yield chunk
    conn.close()


def delta_text(dialect: str, event: str, data: str) -> str:
    """The message text one event carries, per dialect (``text``: the data itself)."""
    if dialect == "text":
        return data
    if data == "[DONE]":
        return ""
    obj = json.loads(data)
    if dialect == "openai":  # the message is choice 0's (n > 1 interleaves the others)
        choices = obj.get("choices") or []
        return "".join(
            (c.get("delta") or {}).get("content") or "" for c in choices if not c.get("index")
        )
    if dialect == "anthropic":
        delta = obj.get("delta") or {}
        return delta.get("text") or "" if obj.get("type") == "content_block_delta" else ""
    if dialect == "responses":
        return obj.get("delta") or "" if obj.get("type") == "response.output_text.delta" else ""
    if dialect == "gemini":  # candidate 0's parts, thoughts left out
        return "".join(
            p.get("text") or ""
            for c in obj.get("candidates") or []
            if c.get("index", 0) == 0
            for p in (c.get("content") or {}).get("parts") or []
            if not p.get("thought")
        )
    raise SystemExit(f"unknown dialect {dialect!r}")


class LineParser:
    """A correct WHATWG event-stream parser over text: CR, LF, CRLF; BOM; one space."""

    def __init__(self, dispatch: Dispatch) -> None:
        self.dispatch = dispatch
        self.buf = ""
        self.pending_cr = False
        self.first = True
        self.data: list[str] = []
        self.event = ""

    def feed(self, text: str) -> None:
        if self.first and text:
            self.first = False
            text = text.removeprefix("\ufeff")
        if self.pending_cr and text.startswith("\n"):
            text = text[1:]
        self.pending_cr = False
        self.buf += text
        while True:
            cut = min((i for i in (self.buf.find("\r"), self.buf.find("\n")) if i >= 0), default=-1)
            if cut < 0:
                return
            line = self.buf[:cut]
            if self.buf[cut] == "\r":
                if cut + 1 == len(self.buf):
                    self.pending_cr = True
                    self.buf = ""
                else:
                    skip = 2 if self.buf[cut + 1] == "\n" else 1
                    self.buf = self.buf[cut + skip :]
            else:
                self.buf = self.buf[cut + 1 :]
            self.line(line)

    def line(self, line: str) -> None:
        if not line:
            if self.data:
                self.dispatch(self.event or "message", "\n".join(self.data))
            self.data, self.event = [], ""
            return
        if line.startswith(":"):
            return
        name, _, value = line.partition(":")
        value = self.value(value)
        if name == "data":
            self.data.append(value)
        elif name == "event":
            self.event = value

    def value(self, raw: str) -> str:
        return raw[1:] if raw.startswith(" ") else raw


def emit(text: str) -> None:
    """Print the answer as UTF-8 whatever the locale says."""
    sys.stdout.buffer.write(text.encode("utf-8", "surrogatepass"))
    sys.stdout.buffer.flush()


_TERMINAL = {
    "openai": "[DONE]",
    "anthropic": "message_stop",
    "responses": "response.completed",
    "gemini": "finishReason",  # a candidate that finished
}


def failure(dialect: str, event: str, data: str) -> str | None:
    """Why this event means the answer failed (an error event), else None."""
    if event == "error":
        return f"error event: {data[:200]}"
    if dialect != "text" and data.startswith("{"):
        obj = json.loads(data)
        if isinstance(obj, dict) and (obj.get("type") == "error" or "error" in obj):
            return f"error event: {data[:200]}"
    return None


def is_terminal(dialect: str, data: str) -> bool:
    marker = _TERMINAL.get(dialect)
    if dialect == "gemini":
        return f'"{marker}"' in data
    if marker is None:
        return False
    if data == marker:
        return True
    try:
        obj = json.loads(data)
    except ValueError:
        return False
    return isinstance(obj, dict) and obj.get("type") == marker


@dataclass
class Call:
    name: str | None = None
    args: list[str] = field(default_factory=list)


class ToolCalls:
    """Assembles the tool calls of a stream (``SSE_PROXY_TOOLS``): fragments joined per
    call, calls kept apart by index (item, block), printed after the text in order."""

    def __init__(self, dialect: str) -> None:
        self.dialect = dialect
        self.calls: dict[object, Call] = {}
        self.order: dict[object, int] = {}

    def call(self, key: object, order: int) -> Call:
        if key not in self.calls:
            self.calls[key] = Call()
            self.order[key] = order
        return self.calls[key]

    def fragment(self, key: object, order: int, fragment: dict[str, object]) -> None:
        """One OpenAI tool-call fragment (id, name and arguments may all be there)."""
        call = self.call(key, order)
        fn = fragment.get("function") or {}
        assert isinstance(fn, dict)
        if fn.get("name"):
            call.name = str(fn["name"])
        if fn.get("arguments"):
            call.args.append(str(fn["arguments"]))

    def event(self, event: str, data: str) -> None:
        if data == "[DONE]" or not data.startswith("{"):
            return
        obj = json.loads(data)
        if self.dialect == "openai":
            for choice in obj.get("choices") or []:
                if choice.get("index"):
                    continue
                for fragment in (choice.get("delta") or {}).get("tool_calls") or []:
                    index = fragment.get("index", 0)
                    self.fragment(index, index, fragment)
        elif self.dialect == "anthropic":
            index = obj.get("index", 0)
            block = obj.get("content_block") or {}
            if obj.get("type") == "content_block_start" and block.get("type") == "tool_use":
                self.call(index, index).name = block.get("name")
            delta = obj.get("delta") or {}
            if delta.get("type") == "input_json_delta" and index in self.calls:
                self.calls[index].args.append(delta.get("partial_json") or "")
        elif self.dialect == "responses":
            item = obj.get("item") or {}
            if obj.get("type") == "response.output_item.added" and item.get("type") == (
                "function_call"
            ):
                self.call(item.get("id"), obj.get("output_index", 0)).name = item.get("name")
            if obj.get("type") == "response.function_call_arguments.delta":
                key = obj.get("item_id")
                if key in self.calls:
                    self.calls[key].args.append(obj.get("delta") or "")
        elif self.dialect == "gemini":
            for cand in obj.get("candidates") or []:
                if cand.get("index", 0):
                    continue
                for part in (cand.get("content") or {}).get("parts") or []:
                    fc = part.get("functionCall")
                    if fc:
                        n = len(self.calls)
                        call = self.call(n, n)
                        call.name = fc.get("name")
                        call.args.append(json.dumps(fc.get("args") or {}))

    def lines(self) -> str:
        keys = sorted(self.calls, key=lambda k: self.order[k])
        return "".join(
            f"\ntool_call {self.calls[k].name} {''.join(self.calls[k].args) or '{}'}" for k in keys
        )


def run(
    make_parser: Callable[[Dispatch], object],
    decode_each_read: bool = False,
    *,
    report_faults: bool = False,
    text_of: Callable[[str, str, str], str] = delta_text,
    calls: Callable[[str], ToolCalls] = ToolCalls,
    stop_at_marker: bool = True,
    read_timeout: float = 30.0,
    stall_after: float | None = None,
    whole_deadline: float | None = None,
    deadline_is_the_end: bool = False,
) -> None:
    """Stream, parse with ``make_parser(dispatch)``'s ``feed``, print the joined text
    (each event's text from ``text_of``); with ``SSE_PROXY_TOOLS`` set, then the calls
    assembled by ``calls(dialect)``, a ``tool_call NAME ARGS`` line each.

    ``report_faults``: exit non-zero on an error event, on a stream without its terminal
    marker, or one that ends inside a frame, as a careful client does. ``stop_at_marker``:
    stop reading at the terminal marker (else: at the body's end). Deadlines, each a
    non-zero exit with the text so far printed: ``read_timeout`` between two reads,
    ``stall_after`` seconds without text, ``whole_deadline`` seconds for the whole answer;
    ``deadline_is_the_end``: a fired deadline ends the answer instead (exit 0).
    """
    dialect = os.environ.get("SSE_PROXY_DIALECT", "openai")
    parts: list[str] = []
    ended = False
    tools = calls(dialect) if os.environ.get("SSE_PROXY_TOOLS") else None
    started = last_text = time.monotonic()

    def dispatch(event: str, data: str) -> None:
        nonlocal ended, last_text
        if report_faults:
            why = failure(dialect, event, data)
            if why:
                emit("".join(parts))
                sys.exit(why)
        ended = ended or is_terminal(dialect, data)
        text = text_of(dialect, event, data)
        if text:
            last_text = time.monotonic()
        parts.append(text)
        if tools is not None and dialect != "text":
            tools.event(event, data)

    def wait() -> tuple[float, str]:
        now = time.monotonic()
        limits = [(read_timeout, f"read timeout ({read_timeout:g} s)")]
        if stall_after is not None:
            limits.append((last_text + stall_after - now, f"no text for {stall_after:g} s"))
        if whole_deadline is not None:
            limits.append((started + whole_deadline - now, f"deadline ({whole_deadline:g} s)"))
        return min(limits)

    parser = make_parser(dispatch)
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    try:
        for chunk in reads(wait):
            text = chunk.decode("utf-8", "replace") if decode_each_read else decoder.decode(chunk)
            parser.feed(text)  # type: ignore[attr-defined]
            if stop_at_marker and ended:
                break
    except Deadline as exc:
        emit("".join(parts))
        if deadline_is_the_end:
            return
        sys.exit(f"stalled: {exc}")
    parser.feed(decoder.decode(b"", final=True))  # type: ignore[attr-defined]
    emit("".join(parts) + (tools.lines() if tools is not None else ""))
    if report_faults and dialect in _TERMINAL and not ended:
        sys.exit("the stream ended without its terminal marker: the answer is incomplete")
