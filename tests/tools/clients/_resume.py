"""A client that resumes its stream after a drop (stdlib only), and the ways to get it wrong.

Raw SSE (``SSE_PROXY_DIALECT=text``): GET ``SSE_PROXY_STREAM_URL``, parse ``id:`` and
``retry:`` as the spec says (an id counts once its event is dispatched, an id holding NULL
is ignored, ``retry`` only when all digits), and after a drop (or the stream's end)
reconnect after the retry delay with ``Last-Event-ID``; a 204 ends it. OpenAI Responses
(``responses``): POST the background request of ``SSE_PROXY_STREAM_BODY``, keep the
response id and the last ``sequence_number``, and after a drop ``GET
/v1/responses/{id}?stream=true&starting_after=N``; ``response.completed`` ends it, an error
answer is a failure (exit 1). Gemini Interactions (``gemini``): POST the interaction, keep
its id and the last ``event_id``, and after a drop GET ``SSE_PROXY_RESUME_URL`` with them;
``interaction.completed`` ends it, an error answer is a failure.

Each buggy client changes one thing: it reconnects without its cursor (``cursor=False``),
ignores ``retry`` (``honour_retry=False``: at once), or never reconnects
(``reconnect=False``: what it has, exit 0). A client that restarts without its cursor stops
at a clean end of the body (it cannot tell it from the answer's end), so it does not loop.
"""

from __future__ import annotations

import http.client
import json
import os
import sys
import time
from urllib.parse import urlsplit

from tests.tools.clients._sse import emit

_GIVE_UP = 20  # reconnects: a client that loops forever is not what these test


class _Stream:
    """One request's events: (event, data, id in force) as they dispatch; the stream's
    retry (ms) and whether it ended cleanly (else: cut)."""

    def __init__(self) -> None:
        self.buf = b""
        self.data: list[str] = []
        self.event = ""
        self.pending_id: str | None = None
        self.last_id: str | None = None
        self.retry: int | None = None

    def feed(self, chunk: bytes) -> list[tuple[str, str]]:
        self.buf += chunk
        out = []
        while b"\n" in self.buf:
            raw, _, self.buf = self.buf.partition(b"\n")
            line = raw.decode("utf-8").rstrip("\r")
            if not line:
                if self.pending_id is not None:
                    self.last_id = self.pending_id  # the id counts at dispatch
                    self.pending_id = None
                if self.data:
                    out.append((self.event or "message", "\n".join(self.data)))
                self.data, self.event = [], ""
                continue
            if line.startswith(":"):
                continue
            name, _, value = line.partition(":")
            value = value[1:] if value.startswith(" ") else value
            if name == "data":
                self.data.append(value)
            elif name == "event":
                self.event = value
            elif name == "id" and "\0" not in value:
                self.pending_id = value
            elif name == "retry" and value.isascii() and value.isdigit():
                self.retry = int(value)
        return out


def _open(method: str, url: str, body: bytes | None, headers: dict[str, str]) -> tuple[int, object]:
    parts = urlsplit(url)
    conn = http.client.HTTPConnection(parts.hostname or "127.0.0.1", parts.port, timeout=30)
    target = parts.path + (f"?{parts.query}" if parts.query else "")
    conn.request(method, target, body=body, headers={"Accept": "text/event-stream", **headers})
    resp = conn.getresponse()
    return resp.status, resp


def _events(resp: object, stream: _Stream) -> tuple[list[tuple[str, str, str | None]], bool]:
    """Every event of the response with the id in force at its dispatch, and whether the
    body ended cleanly (False: the connection broke)."""
    out: list[tuple[str, str, str | None]] = []
    try:
        while chunk := resp.read1(65536):  # type: ignore[attr-defined]
            for event, data in stream.feed(chunk):
                out.append((event, data, stream.last_id))
    except (http.client.HTTPException, OSError):
        return out, False
    return out, True


def _text(cursor: bool, honour_retry: bool, reconnect: bool) -> None:
    url = os.environ["SSE_PROXY_STREAM_URL"]
    parts: list[str] = []
    last_id: str | None = None
    retry = 3.0
    for _ in range(_GIVE_UP):
        headers = {"Last-Event-ID": last_id} if cursor and last_id is not None else {}
        status, resp = _open("GET", url, None, headers)
        if status == 204:
            break
        if status != 200:
            emit("".join(parts))
            sys.exit(f"HTTP {status}: {resp.read()[:200]!r}")  # type: ignore[attr-defined]
        stream = _Stream()
        stream.last_id = last_id
        events, clean = _events(resp, stream)
        parts += [data for _event, data, _id in events]
        last_id = stream.last_id
        if stream.retry is not None:
            retry = stream.retry / 1000
        if not reconnect or (clean and not cursor):
            break  # (without a cursor a clean end is taken for the answer's)
        time.sleep(retry if honour_retry else 0.0)
    emit("".join(parts))


def _responses(cursor: bool, reconnect: bool) -> None:
    base = os.environ["OPENAI_BASE_URL"].rstrip("/")
    body = os.environ["SSE_PROXY_STREAM_BODY"].encode()
    auth = {"Authorization": f"Bearer {os.environ.get('OPENAI_API_KEY', 'x')}"}
    parts: list[str] = []
    response_id: str | None = None
    seq: int | None = None
    done = False
    for attempt in range(_GIVE_UP):
        if attempt == 0:
            headers = {**auth, "Content-Type": "application/json"}
            status, resp = _open("POST", f"{base}/responses", body, headers)
        else:
            after = f"&starting_after={seq}" if cursor and seq is not None else ""
            status, resp = _open(
                "GET", f"{base}/responses/{response_id}?stream=true{after}", None, auth
            )
        if status != 200:
            emit("".join(parts))
            sys.exit(f"HTTP {status}: {resp.read()[:300]!r}")  # type: ignore[attr-defined]
        events, _clean = _events(resp, _Stream())
        for _event, data, _id in events:
            obj = json.loads(data)
            number = obj.get("sequence_number")
            if cursor and seq is not None and isinstance(number, int) and number <= seq:
                continue  # had it
            if isinstance(number, int):
                seq = number if seq is None else max(seq, number)
            if obj.get("type") == "response.created":
                response_id = obj["response"]["id"]
            elif obj.get("type") == "response.output_text.delta":
                parts.append(obj.get("delta") or "")
            elif obj.get("type") == "response.completed":
                done = True
            elif obj.get("type") == "error":
                emit("".join(parts))
                sys.exit(f"error event: {data[:200]}")
        if done or not reconnect or response_id is None:
            break
        time.sleep(0.2)
    emit("".join(parts))
    if not done and reconnect:
        sys.exit("the stream ended without response.completed")


def _interactions(cursor: bool, reconnect: bool) -> None:
    url = os.environ["SSE_PROXY_STREAM_URL"]
    body = os.environ["SSE_PROXY_STREAM_BODY"].encode()
    template = os.environ["SSE_PROXY_RESUME_URL"]
    parts: list[str] = []
    interaction_id = ""
    last: str | None = None
    done = False
    for attempt in range(_GIVE_UP):
        if attempt == 0:
            headers = {"Content-Type": "application/json"}
            status, resp = _open("POST", url, body, headers)
        else:
            target = template.format(interaction_id=interaction_id, event_id=last)
            if not cursor or last is None:
                target = target.split("&last_event_id=")[0]
            status, resp = _open("GET", target, None, {})
        if status != 200:
            emit("".join(parts))
            sys.exit(f"HTTP {status}: {resp.read()[:300]!r}")  # type: ignore[attr-defined]
        events, _clean = _events(resp, _Stream())
        for _event, data, _id in events:
            obj = json.loads(data)
            last = obj.get("event_id") or last
            kind = obj.get("event_type")
            if kind == "interaction.created":
                interaction_id = obj["interaction"]["id"]
            elif kind == "step.delta" and obj["delta"].get("type") == "text":
                parts.append(obj["delta"]["text"])
            elif kind == "interaction.completed":
                done = True
            elif kind == "error":
                emit("".join(parts))
                sys.exit(f"error event: {data[:200]}")
        if done or not reconnect or not interaction_id:
            break
        time.sleep(0.2)
    emit("".join(parts))
    if not done and reconnect:
        sys.exit("the stream ended without interaction.completed")


def run(*, cursor: bool = True, honour_retry: bool = True, reconnect: bool = True) -> None:
    """Stream the answer, resuming as told; print its text."""
    dialect = os.environ.get("SSE_PROXY_DIALECT", "text")
    if dialect == "responses":
        _responses(cursor, reconnect)
    elif dialect == "gemini":
        _interactions(cursor, reconnect)
    else:
        _text(cursor, honour_retry, reconnect)
