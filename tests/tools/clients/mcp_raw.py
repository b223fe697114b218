"""A raw MCP client on the standard library: the handshake, one tool call, its result.

``python -m tests.tools.clients.mcp_raw [--revision R] [--deadline S] [--reissue] [--bug
NAME]``. Without ``--bug`` it is correct: ``initialize``, ``notifications/initialized``
(2025-11-25; with ``--revision 2026-07-28`` no handshake, the ``_meta`` envelope and its
headers on the call instead), a ``tools/call`` of SSE_PROXY_MCP_TOOL with SSE_PROXY_MCP_ARGS
and a progress token, the stream read with a stateful decoder and a WHATWG parser that
skips events with empty data (a priming event), the result's text items joined and printed
as soon as the response arrives, ``DELETE`` at the end; an error, a stream without the
response or a reset exits 1, as does ``--deadline`` seconds without a message (comments
are no message). ``--reissue``: a stream that broke without the response is called again
once, under a new request id (what 2026-07-28 asks of a client that retries). ``--resume``:
a stream that broke is resumed as its revision says: up to 2025-11-25, after the stream's
``retry`` delay (1 s without one), by ``GET`` with ``Last-Event-ID`` (the id of the last event
dispatched, carried over streams), again after each drop; without any id to resume from, and
in 2026-07-28, by calling again under a new request id. Stdlib only,
so a case takes milliseconds, and each ``read1`` follows one proxy write. Each ``--bug`` is
one mistake clients make:

* ``decode-each-read``: decodes every read on its own (a character cut across reads is
  lost to U+FFFD);
* ``first-item``: prints the first text item of the result only;
* ``twice``: prints the result twice (as a client that prints a replayed response again);
* ``exit-zero``: takes a stream that ended without its response, or an error, for an
  empty answer and exits 0;
* ``parse-empty``: ``json.loads`` every event's data, a priming event's empty data too;
* ``waits-for-close``: reads the stream to its end before it takes the response;
* ``reissue-same-id``: re-issues a broken call under the same request id;
* ``hangs-on-broken-stream``: waits forever for the response of a call whose stream broke
  (the official TypeScript SDK's until its request timeout, typescript-sdk#2739; mcp 1.x's,
  python-sdk#3441);
* ``drop-cursor-second-reconnect`` (with ``--resume``): each stream starts without a cursor,
  so a resumed stream that drops before a new id is reconnected without ``Last-Event-ID``
  (the official TypeScript SDK's, typescript-sdk#2499); the 405 that gets ends it (exit 1);
* ``ignores-retry`` (with ``--resume``): reconnects at once, whatever ``retry`` says;
* ``reconnect-loop`` (with ``--resume``): takes the end of a resumed stream for another drop
  and reconnects again, the response in hand (a count reset by a stream that opened:
  python-sdk#2393, #3257), until its limit.
"""

from __future__ import annotations

import argparse
import codecs
import http.client
import json
import os
import sys
import time
from typing import Any
from urllib.parse import urlsplit

from tests.tools.clients._sse import LineParser, emit

BUGS = (
    "decode-each-read",
    "first-item",
    "twice",
    "exit-zero",
    "parse-empty",
    "waits-for-close",
    "reissue-same-id",
    "hangs-on-broken-stream",
    "drop-cursor-second-reconnect",
    "ignores-retry",
    "reconnect-loop",
)
_RECONNECTS = 5
LEGACY = "2025-11-25"
MODERN = "2026-07-28"


class Broken(Exception):
    """The stream ended, or broke, without the response."""


class Cursor:
    """Where a stream can be resumed from: the last event id dispatched, the retry (s)."""

    def __init__(self) -> None:
        self.last_id: str | None = None
        self.retry = 1.0


class _IdParser(LineParser):
    """The parser, with ``id`` (taken at the event's blank line, as EventSource does) and
    ``retry`` (all digits only)."""

    def __init__(self, dispatch: Any, cursor: Cursor) -> None:
        super().__init__(dispatch)
        self.cursor = cursor
        self.pending: str | None = None

    def line(self, line: str) -> None:
        if not line and self.pending is not None:
            self.cursor.last_id, self.pending = self.pending, None
        name, _, value = line.partition(":")
        if name == "id" and "\0" not in value:
            self.pending = self.value(value)
        elif name == "retry" and self.value(value).isascii() and self.value(value).isdigit():
            self.cursor.retry = int(self.value(value)) / 1000
        super().line(line)


class Session:
    def __init__(self, url: str, revision: str) -> None:
        parts = urlsplit(url)
        self.target = parts.path + (f"?{parts.query}" if parts.query else "")
        self.conn = http.client.HTTPConnection(
            parts.hostname or "127.0.0.1", parts.port, timeout=30
        )
        self.revision = revision
        self.session: str | None = None

    @property
    def modern(self) -> bool:
        return self.revision >= MODERN

    def post(self, message: dict[str, Any]) -> http.client.HTTPResponse:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        if self.modern:
            headers.update({"MCP-Protocol-Version": self.revision, "Mcp-Method": message["method"]})
            name = (message.get("params") or {}).get("name")
            if name is not None:
                headers["Mcp-Name"] = name
        elif self.session is not None:
            headers.update({"Mcp-Session-Id": self.session, "MCP-Protocol-Version": self.revision})
        self.conn.request("POST", self.target, body=json.dumps(message), headers=headers)
        return self.conn.getresponse()

    def handshake(self) -> None:
        if self.modern:
            return
        params = {
            "protocolVersion": self.revision,
            "capabilities": {},
            "clientInfo": {"name": "raw", "version": "1"},
        }
        resp = self.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})
        if resp.status != 200:
            sys.exit(f"initialize: HTTP {resp.status}")
        json.loads(resp.read())
        self.session = resp.getheader("Mcp-Session-Id")
        self.post({"jsonrpc": "2.0", "method": "notifications/initialized"}).read()

    def delete(self) -> None:
        """End the session, as far as the connection still lets it (best effort)."""
        if self.session is not None:
            try:
                self.conn.request("DELETE", self.target, headers={"Mcp-Session-Id": self.session})
                self.conn.getresponse().read()
            except (OSError, http.client.HTTPException):
                pass


def call(
    s: Session, rid: int, bug: str | None, deadline: float, cursor: Cursor | None = None
) -> dict[str, Any]:
    """The response to one tool call; :class:`Broken` when the stream has none."""
    args = json.loads(os.environ.get("SSE_PROXY_MCP_ARGS", "{}"))
    tool = os.environ["SSE_PROXY_MCP_TOOL"]
    meta: dict[str, Any] = {"progressToken": f"raw-{rid}"}
    if s.modern:
        meta.update(
            {
                "io.modelcontextprotocol/protocolVersion": s.revision,
                "io.modelcontextprotocol/clientCapabilities": {},
                "io.modelcontextprotocol/clientInfo": {"name": "raw", "version": "1"},
            }
        )
    params = {"name": tool, "arguments": args, "_meta": meta}
    resp = s.post({"jsonrpc": "2.0", "id": rid, "method": "tools/call", "params": params})
    if resp.status != 200:
        sys.exit(f"tools/call: HTTP {resp.status}")
    if (resp.getheader("Content-Type") or "").startswith("application/json"):
        return json.loads(resp.read())  # type: ignore[no-any-return]
    return read(s, resp, rid, bug, deadline, cursor or Cursor())


def read(
    s: Session,
    resp: http.client.HTTPResponse,
    rid: int,
    bug: str | None,
    deadline: float,
    cursor: Cursor,
) -> dict[str, Any]:
    """The response to ``rid`` on the stream ``resp``; :class:`Broken` when it has none."""
    found: list[dict[str, Any]] = []
    last = time.monotonic()

    def dispatch(event: str, data: str) -> None:
        nonlocal last
        if not data and bug != "parse-empty":
            return  # a priming event: an id to resume from, no message
        message = json.loads(data)
        last = time.monotonic()
        if message.get("id") == rid and ("result" in message or "error" in message):
            found.append(message)

    parser = _IdParser(dispatch, cursor)
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    sock = s.conn.sock
    try:
        while not found or bug == "waits-for-close":
            left = last + deadline - time.monotonic()
            if left <= 0:
                sys.exit(f"stalled: no message for {deadline:g} s")
            if sock is not None:
                sock.settimeout(left)
            try:
                chunk = resp.read1(65536)
            except TimeoutError:
                continue  # the deadline is checked above
            if not chunk:
                break
            if bug == "decode-each-read":
                parser.feed(chunk.decode("utf-8", "replace"))
            else:
                parser.feed(decoder.decode(chunk))
    except (http.client.IncompleteRead, ConnectionError) as exc:
        raise Broken(repr(exc)) from None
    if not found:
        raise Broken("the stream ended without the response")
    s.conn.close()  # the response is in: the rest of the stream is not waited for
    return found[0]


def resume(
    s: Session, rid: int, bug: str | None, deadline: float, cursor: Cursor
) -> dict[str, Any]:
    """The response to ``rid`` after its stream broke: resumed by GET with Last-Event-ID
    after the retry delay, again after each drop; re-issued under a new id where there is
    nothing to resume from (no id arrived, or 2026-07-28)."""
    answer: dict[str, Any] | None = None
    for attempt in range(1, _RECONNECTS + 1):
        s.conn.close()
        if s.modern or cursor.last_id is None:  # nothing to resume: a new request
            rid += 0 if bug == "reissue-same-id" else 1
            print(f"re-issuing the call as request {rid}", file=sys.stderr)
            try:
                return call(s, rid, bug, deadline, cursor)
            except Broken as exc:
                print(f"the re-issued call broke: {exc}", file=sys.stderr)
                continue
        time.sleep(0.0 if bug == "ignores-retry" else cursor.retry)
        headers = {"Accept": "text/event-stream", "Last-Event-ID": cursor.last_id}
        if bug == "drop-cursor-second-reconnect" and not cursor.last_id:
            del headers["Last-Event-ID"]  # the cursor was the first stream's, not this one's
        if s.session is not None:
            headers.update({"Mcp-Session-Id": s.session, "MCP-Protocol-Version": s.revision})
        s.conn.request("GET", s.target, headers=headers)
        resp = s.conn.getresponse()
        if resp.status != 200:
            sys.exit(f"reconnect {attempt}: HTTP {resp.status}")
        if bug == "drop-cursor-second-reconnect":
            cursor.last_id = None  # each stream's cursor starts empty
        try:
            got = read(s, resp, rid, bug, deadline, cursor)
            if bug != "reconnect-loop":
                return got
            answer = got  # (and the end of the stream taken for a drop)
        except Broken as exc:
            print(f"the resumed stream broke: {exc}", file=sys.stderr)
            if cursor.last_id is None and bug == "drop-cursor-second-reconnect":
                cursor.last_id = ""  # (sent as no header at all)
    if answer is not None:
        return answer
    sys.exit(f"gave up after {_RECONNECTS} reconnects")


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bug", choices=BUGS)
    ap.add_argument("--revision", default=LEGACY)
    ap.add_argument("--deadline", type=float, default=30.0)
    ap.add_argument("--reissue", action="store_true")
    ap.add_argument("--resume", action="store_true")
    opts = ap.parse_args()
    bug = opts.bug
    s = Session(os.environ["SSE_PROXY_STREAM_URL"], opts.revision)
    s.handshake()
    answer: dict[str, Any] | None = None
    cursor = Cursor()
    try:
        answer = call(s, 1, bug, opts.deadline, cursor)
    except Broken as exc:
        print(f"the call broke: {exc}", file=sys.stderr)
        if bug == "hangs-on-broken-stream":
            while True:  # the response that never comes
                time.sleep(60)
        if opts.resume:
            answer = resume(s, 1, bug, opts.deadline, cursor)
        elif opts.reissue or bug == "reissue-same-id":
            s.conn.close()
            answer = call(s, 1 if bug == "reissue-same-id" else 2, bug, opts.deadline)
        elif bug != "exit-zero":
            return 1
    s.delete()
    if answer is None or "error" in answer:
        if bug == "exit-zero":
            return 0
        print(f"no result: {answer}", file=sys.stderr)
        return 1
    texts = [c["text"] for c in answer["result"]["content"] if c.get("type") == "text"]
    text = texts[0] if bug == "first-item" else "".join(texts)
    emit(text + "\n" + text if bug == "twice" else text)
    return 1 if answer["result"].get("isError") else 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except Broken as exc:
        sys.exit(f"the call broke again: {exc}")
