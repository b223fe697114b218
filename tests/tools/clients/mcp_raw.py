"""A raw MCP client on the standard library: the handshake, one tool call, its result.

``python -m tests.tools.clients.mcp_raw [--bug NAME]``. Without ``--bug`` it is correct:
``initialize``, ``notifications/initialized``, a ``tools/call`` of SSE_PROXY_MCP_TOOL with
SSE_PROXY_MCP_ARGS and a progress token, the stream read with a stateful decoder and a
WHATWG parser, the result's text items joined and printed, ``DELETE`` at the end; an error,
a stream without the response or a reset exits 1. Stdlib only, so a case takes
milliseconds, and each ``read1`` follows one proxy write. Each ``--bug`` is one mistake
clients make:

* ``decode-each-read``: decodes every read on its own (a character cut across reads is
  lost to U+FFFD);
* ``first-item``: prints the first text item of the result only;
* ``twice``: prints the result twice (as a client that prints a replayed response again);
* ``exit-zero``: takes a stream that ended without its response, or an error, for an
  empty answer and exits 0.
"""

from __future__ import annotations

import argparse
import codecs
import http.client
import json
import os
import sys
from typing import Any
from urllib.parse import urlsplit

from tests.tools.clients._sse import LineParser, emit

BUGS = ("decode-each-read", "first-item", "twice", "exit-zero")
VERSION = "2025-11-25"


class Session:
    def __init__(self, url: str) -> None:
        parts = urlsplit(url)
        self.target = parts.path + (f"?{parts.query}" if parts.query else "")
        self.conn = http.client.HTTPConnection(
            parts.hostname or "127.0.0.1", parts.port, timeout=30
        )
        self.session: str | None = None

    def post(self, message: dict[str, Any]) -> http.client.HTTPResponse:
        headers = {
            "Content-Type": "application/json",
            "Accept": "application/json, text/event-stream",
        }
        if self.session is not None:
            headers.update({"Mcp-Session-Id": self.session, "MCP-Protocol-Version": VERSION})
        self.conn.request("POST", self.target, body=json.dumps(message), headers=headers)
        return self.conn.getresponse()

    def delete(self) -> None:
        """End the session, as far as the connection still lets it (best effort)."""
        if self.session is not None:
            try:
                self.conn.request("DELETE", self.target, headers={"Mcp-Session-Id": self.session})
                self.conn.getresponse().read()
            except (OSError, http.client.HTTPException):
                pass


def call(bug: str | None) -> dict[str, Any] | None:
    """The response to the tool call (None: the stream ended without one)."""
    s = Session(os.environ["SSE_PROXY_STREAM_URL"])
    params = {
        "protocolVersion": VERSION,
        "capabilities": {},
        "clientInfo": {"name": "raw", "version": "1"},
    }
    resp = s.post({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": params})
    if resp.status != 200:
        sys.exit(f"initialize: HTTP {resp.status}")
    json.loads(resp.read())
    s.session = resp.getheader("Mcp-Session-Id")
    resp = s.post({"jsonrpc": "2.0", "method": "notifications/initialized"})
    resp.read()
    args = json.loads(os.environ.get("SSE_PROXY_MCP_ARGS", "{}"))
    tool = os.environ["SSE_PROXY_MCP_TOOL"]
    params = {"name": tool, "arguments": args, "_meta": {"progressToken": "raw-1"}}
    resp = s.post({"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": params})
    if resp.status != 200:
        sys.exit(f"tools/call: HTTP {resp.status}")
    if (resp.getheader("Content-Type") or "").startswith("application/json"):
        answer = json.loads(resp.read())
        s.delete()
        return answer  # type: ignore[no-any-return]
    found: list[dict[str, Any]] = []

    def dispatch(event: str, data: str) -> None:
        message = json.loads(data)
        if message.get("id") == 1 and ("result" in message or "error" in message):
            found.append(message)

    parser = LineParser(dispatch)
    decoder = codecs.getincrementaldecoder("utf-8")("replace")
    try:
        while chunk := resp.read1(65536):
            if bug == "decode-each-read":
                parser.feed(chunk.decode("utf-8", "replace"))
            else:
                parser.feed(decoder.decode(chunk))
    except (http.client.IncompleteRead, ConnectionError) as exc:
        if bug != "exit-zero":
            sys.exit(f"the stream broke: {exc!r}")
    s.delete()
    return found[0] if found else None


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--bug", choices=BUGS)
    bug = ap.parse_args().bug
    answer = call(bug)
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
    sys.exit(main())
