"""The mock upstream's MCP server: Streamable HTTP at ``/mcp``, as the official SDKs speak it.

One tool, ``stream_text`` (:mod:`sse_proxy.tools.fixtures.mcp`), whose call is answered as
an SSE stream: log messages and progress notifications, then the result, whose text is the
fixture's answer. What else a client sends on its way there is answered as the
specification says, so that both official SDKs, a raw client and the proxy in between meet
what a real server does:

* revisions up to 2025-11-25 (the handshake era): ``initialize`` negotiates the revision
  (the client's if known, else 2025-11-25) and assigns an ``Mcp-Session-Id``; a request
  with an unknown session gets 404, ``DELETE`` ends a session; ``notifications/*`` and
  posted responses get 202; ``tools/list``, ``ping`` and ``logging/setLevel`` a JSON
  response; a GET (the server's own stream) 405, as the specification allows.
* 2026-07-28 (stateless): a request carries its revision in ``MCP-Protocol-Version`` and
  in ``params._meta``, which must agree (400 otherwise); no session, no handshake; results
  carry ``resultType`` and the server's info; log messages only when the request asked.
* ``server/discover`` (a 2026-07-28 request) is answered as that revision says: the
  revisions served (both eras: this is a dual-era server, so a client that probes stays
  stateless), the capabilities and ``ttlMs``/``cacheScope``. As a handshake-era server
  (the option ``era=legacy``) it answers the probe with a 400 JSON-RPC error instead, and a
  client that probes (the Python SDK's ``Client``) falls back to ``initialize``.
  ``subscriptions/listen`` gets the acknowledgement, then keep-alive comments until the
  client closes it (nothing ever changes here).

The stream itself comes from the fixtures, built for the request (its id, its progress
token) with the SSE fields the revision has (:class:`~sse_proxy.tools.fixtures.mcp.
McpOptions`: a priming event, ``retry``, an id on every event naming the stream, from
2025-11-25), with the mock's fault when it has one: a fault in the bytes, or one in time
(a stall among the progress notifications, a linger after the response, a drip) that the
shell performs (``serve_sse``). A test harness can put its own stream in (``stream_for``:
the test-client's cuts and broken streams), and reads what was called
(:attr:`McpServer.calls`) and which calls the client walked away from before their
response went out (:attr:`McpServer.cancelled`: in 2026-07-28 closing the stream is how a
client cancels).
"""

from __future__ import annotations

import asyncio
import json
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any, Final

from aiohttp import web

from sse_proxy.rechunk.timefaults import COMMENT_KEEPALIVE, DROPS
from sse_proxy.tools import fixtures
from sse_proxy.tools.fixtures import mcp
from sse_proxy.tools.mcp_resume import McpDrops

__all__ = [
    "BODY_SENT",
    "DISCOVERED",
    "MAX_SESSIONS",
    "SUPPORTED",
    "McpServer",
    "OptionsOf",
    "ServeSse",
    "StreamFor",
]

StreamFor = Callable[[mcp.McpCall], tuple[bytes, bool]]
"""What answers a ``tools/call``: the stream's bytes, and whether the connection is then
reset instead of ended."""
ServeSse = Callable[[web.Request, bytes, bool, str | None], Awaitable[web.StreamResponse]]
"""Writes bytes as an SSE response (the mock's: seeded pieces, its delay, its lockstep),
then ends it, or resets the connection; or, given a fault in time's name, performs it
frame by frame. It sets ``request[BODY_SENT]`` once the last byte of the body is written."""
OptionsOf = Callable[[web.Request], mcp.McpOptions]
"""The stream options of a request (the app's, with the request's own)."""
BODY_SENT: Final = web.RequestKey("sse_proxy_mcp_body_sent", bool)
"""The request key the shell sets when the whole body went out (a client that closes
before then cancels the call, in 2026-07-28)."""
LISTEN_KEEPALIVE: Final = 15.0
"""Seconds between the keep-alive comments of a ``subscriptions/listen`` stream."""

SUPPORTED: Final[tuple[str, ...]] = (*mcp.LEGACY_REVISIONS, *mcp.MODERN_REVISIONS)
DISCOVERED: Final[tuple[str, ...]] = tuple(sorted(SUPPORTED, reverse=True))
"""What ``server/discover`` lists: every revision served, the newest first."""
MAX_SESSIONS: Final = 4096
"""Sessions remembered (the oldest forgotten first: its client then gets 404)."""
_META_VERSION: Final = "io.modelcontextprotocol/protocolVersion"
_META_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"
_META_LOG_LEVEL: Final = "io.modelcontextprotocol/logLevel"
_META_SERVER_INFO: Final = "io.modelcontextprotocol/serverInfo"
_META_SUBSCRIPTION: Final = "io.modelcontextprotocol/subscriptionId"
_PARSE_ERROR, _INVALID_REQUEST, _NO_METHOD, _INVALID_PARAMS = -32700, -32600, -32601, -32602
_SESSION_NOT_FOUND, _HEADER_MISMATCH, _UNSUPPORTED_VERSION = -32001, -32020, -32022
_CAPABILITIES: Final[dict[str, Any]] = {"tools": {"listChanged": False}, "logging": {}}
_INSTRUCTIONS: Final = f"Call {mcp.TOOL} to stream the fixture text."


def _json(obj: object, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    text = json.dumps(obj, ensure_ascii=False, separators=(",", ":"))
    return web.Response(text=text, status=status, content_type="application/json", headers=headers)


def _result(rid: object, result: dict[str, Any]) -> web.Response:
    return _json({"jsonrpc": "2.0", "id": rid, "result": result})


def _error(
    rid: object, code: int, message: str, status: int = 200, data: object = None
) -> web.Response:
    error: dict[str, Any] = {"code": code, "message": message}
    if data is not None:
        error["data"] = data
    return _json({"jsonrpc": "2.0", "id": rid, "error": error}, status)


def _token(value: object) -> int | str | None:
    return value if type(value) in (int, str) else None  # type: ignore[return-value]


def _no_options(_request: web.Request) -> mcp.McpOptions:
    return mcp.DEFAULT_OPTIONS


@dataclass(slots=True)
class _Session:
    revision: str
    streams: int = 0


class McpServer:
    """The ``/mcp`` endpoint of one mock app (see the module docstring)."""

    def __init__(
        self,
        serve_sse: ServeSse,
        fault_of: Callable[[web.Request], str | None],
        stream_for: StreamFor | None = None,
        options_of: OptionsOf = _no_options,
    ) -> None:
        self.serve_sse = serve_sse
        self.fault_of = fault_of
        self.stream_for = stream_for
        self.options_of = options_of
        self.sessions: OrderedDict[str, _Session] = OrderedDict()
        """Session id -> the revision it negotiated and the streams it had."""
        self.streams = 0
        """Streams of requests without a session (their names are the server's)."""
        self.calls: list[mcp.McpCall] = []
        """The tool calls answered, in order (a harness reads whether progress was asked)."""
        self.cancelled: list[mcp.McpCall] = []
        """The tool calls whose client closed the stream before the whole response went
        out: in 2026-07-28 that cancels the call (the server stops, and sends nothing more
        for it); earlier, a disconnection is no cancellation (listed all the same)."""
        self.cancelled_ids: list[object] = []
        """Request ids named by ``notifications/cancelled`` (the earlier revisions' way)."""
        self.drops = McpDrops()
        """The streams a drop cut, kept for a resume (:mod:`.mcp_resume`)."""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.method == "POST":
            return await self._post(request)
        if request.method == "GET":
            # A GET resumes a cut stream of the handshake era by its Last-Event-ID; this
            # server has no stream of its own to offer: 405, which every client takes as
            # "none" (and 2026-07-28 has no resumption: 405 whatever the GET carries).
            raw = request.headers.get("Last-Event-ID")
            fault = self.fault_of(request)
            modern = request.headers.get("MCP-Protocol-Version") in mcp.MODERN_REVISIONS
            session = request.headers.get("Mcp-Session-Id")
            if session is not None and session not in self.sessions:
                return web.Response(status=404, text="no such session\n")
            if raw is not None and not modern:
                return await self.drops.serve_resume(request, fault, raw)
            self.drops.log_refused(request, fault, 405)
            return web.Response(status=405, headers={"Allow": "POST, DELETE"})
        if request.method == "DELETE":
            return self._delete(request)
        return web.Response(status=405, headers={"Allow": "GET, POST, DELETE"})

    def _delete(self, request: web.Request) -> web.Response:
        session = request.headers.get("Mcp-Session-Id")
        if session is None:
            return web.Response(status=400, text="DELETE needs an Mcp-Session-Id\n")
        if self.sessions.pop(session, None) is None:
            return web.Response(status=404, text="no such session\n")
        return web.Response(status=200)

    async def _post(self, request: web.Request) -> web.StreamResponse:
        try:
            msg = json.loads(await request.read())
        except ValueError:
            return _error(None, _PARSE_ERROR, "Parse error: the body is not JSON", 400)
        version = request.headers.get("MCP-Protocol-Version")
        if version is not None and version not in SUPPORTED:
            data = {"supported": list(SUPPORTED), "requested": version[:64]}
            return _error(None, _UNSUPPORTED_VERSION, "Unsupported protocol version", 400, data)
        if type(msg) is list:
            return _error(None, _INVALID_REQUEST, "Batches are not supported", 400)
        if type(msg) is not dict or msg.get("jsonrpc") != "2.0":
            return _error(None, _INVALID_REQUEST, "Invalid Request: not JSON-RPC 2.0", 400)
        method = msg.get("method")
        if type(method) is not str or "id" not in msg:
            if method == "notifications/cancelled":
                params = msg.get("params")
                if type(params) is dict and "requestId" in params:
                    self.cancelled_ids.append(params["requestId"])
            return web.Response(status=202)  # a notification or a response: accepted
        rid = msg["id"]
        params = msg.get("params")
        meta = mcp.meta_of(params)
        modern = version in mcp.MODERN_REVISIONS or meta.get(_META_VERSION) in mcp.MODERN_REVISIONS
        if method == "server/discover" and (not modern or self.options_of(request).legacy):
            # what a handshake-era server answers a method it does not know
            return _error(rid, _NO_METHOD, "Method not found: server/discover", 400)
        if modern:
            return await self._modern(request, msg, method, rid, version, meta)
        return await self._legacy(request, msg, method, rid, version)

    # -- the handshake era ----------------------------------------------------------------

    async def _legacy(
        self,
        request: web.Request,
        msg: dict[str, Any],
        method: str,
        rid: object,
        version: str | None,
    ) -> web.StreamResponse:
        if method == "initialize":
            return self._initialize(msg, rid)
        session = request.headers.get("Mcp-Session-Id")
        negotiated = version
        known = None
        if session is not None:
            known = self.sessions.get(session)
            if known is None:
                return _error(rid, _SESSION_NOT_FOUND, "Session not found", 404)
            negotiated = version or known.revision
        if method in ("ping", "logging/setLevel"):
            return _result(rid, {})
        if method == "tools/list":
            return _result(rid, {"tools": [mcp.TOOL_DEFINITION]})
        if method == "tools/call":
            return await self._call(
                request, msg, rid, negotiated, logs=True, session=known, session_id=session
            )
        return _error(rid, _NO_METHOD, f"Method not found: {method[:100]}")

    def _initialize(self, msg: dict[str, Any], rid: object) -> web.Response:
        params = msg.get("params")
        asked = params.get("protocolVersion") if type(params) is dict else None
        version = asked if asked in mcp.LEGACY_REVISIONS else mcp.LATEST_LEGACY
        session = secrets.token_hex(16)
        self.sessions[session] = _Session(str(version))
        while len(self.sessions) > MAX_SESSIONS:
            self.sessions.popitem(last=False)
        result = {
            "protocolVersion": version,
            "capabilities": _CAPABILITIES,
            "serverInfo": mcp.SERVER_INFO,
            "instructions": _INSTRUCTIONS,
        }
        return _json(
            {"jsonrpc": "2.0", "id": rid, "result": result}, headers={"Mcp-Session-Id": session}
        )

    # -- 2026-07-28 ----------------------------------------------------------------------------

    async def _modern(
        self,
        request: web.Request,
        msg: dict[str, Any],
        method: str,
        rid: object,
        version: str | None,
        meta: Mapping[str, Any],
    ) -> web.StreamResponse:
        if _META_VERSION not in meta or _META_CAPABILITIES not in meta:
            return _error(
                rid,
                _INVALID_PARAMS,
                "params._meta lacks the protocol version or the client capabilities",
                400,
            )
        headers = request.headers
        if version != meta[_META_VERSION] or headers.get("Mcp-Method", method) != method:
            return _error(
                rid,
                _HEADER_MISMATCH,
                "Header mismatch: MCP-Protocol-Version or Mcp-Method disagrees with the body",
                400,
            )
        params = msg.get("params")
        name = params.get("name") if type(params) is dict else None
        if method == "tools/call" and headers.get("Mcp-Name", name) != name:
            return _error(
                rid, _HEADER_MISMATCH, "Header mismatch: Mcp-Name disagrees with the body", 400
            )
        info = {_META_SERVER_INFO: dict(mcp.SERVER_INFO)}
        if method == "tools/list":
            result = {
                "resultType": "complete",
                "tools": [mcp.TOOL_DEFINITION],
                "ttlMs": 0,
                "cacheScope": "private",
                "_meta": info,
            }
            return _result(rid, result)
        if method == "tools/call":
            return await self._call(request, msg, rid, version, logs=_META_LOG_LEVEL in meta)
        if method == "server/discover":
            result = {
                "resultType": "complete",
                "supportedVersions": DISCOVERED,
                "capabilities": _CAPABILITIES,
                "instructions": _INSTRUCTIONS,
                "ttlMs": 0,
                "cacheScope": "public",
                "_meta": info,
            }
            return _result(rid, result)
        if method == "subscriptions/listen":
            return await self._listen(request, rid)
        return _error(rid, _NO_METHOD, f"Method not found: {method[:100]}", 404)

    async def _listen(self, request: web.Request, rid: object) -> web.StreamResponse:
        """``subscriptions/listen``: the acknowledgement, then keep-alive comments (nothing
        this server offers ever changes) until the client closes the stream."""
        if type(rid) not in (int, str):
            return _error(None, _INVALID_REQUEST, "Invalid Request: id must be a string or number")
        ack = {
            "jsonrpc": "2.0",
            "method": "notifications/subscriptions/acknowledged",
            "params": {"_meta": {_META_SUBSCRIPTION: rid}},
        }
        resp = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream",
                "Cache-Control": "no-cache",
                "X-Accel-Buffering": "no",
            }
        )
        await resp.prepare(request)
        frame = "event: message\ndata: " + json.dumps(ack, separators=(",", ":")) + "\n\n"
        try:
            await resp.write(frame.encode())
            while True:
                await asyncio.sleep(LISTEN_KEEPALIVE)
                await resp.write(COMMENT_KEEPALIVE)
        except ConnectionError:
            pass  # the client closed it: that ends the subscription
        return resp

    # -- the tool --------------------------------------------------------------------------

    async def _call(
        self,
        request: web.Request,
        msg: dict[str, Any],
        rid: object,
        revision: str | None,
        *,
        logs: bool,
        session: _Session | None = None,
        session_id: str | None = None,
    ) -> web.StreamResponse:
        params = msg.get("params")
        params = params if type(params) is dict else {}
        if params.get("name") != mcp.TOOL:
            return _error(rid, _INVALID_PARAMS, f"Unknown tool; this server has {mcp.TOOL}")
        args = params.get("arguments")
        args = {} if args is None else args
        steps = args.get("progress", mcp.TOOL_ARGS["progress"]) if type(args) is dict else None
        if (
            type(args) is not dict
            or set(args) - {"progress"}
            or type(steps) is not int
            or not 0 <= steps <= mcp.MAX_PROGRESS
        ):
            return _error(
                rid, _INVALID_PARAMS, f"Invalid arguments: {{'progress': 0..{mcp.MAX_PROGRESS}}}"
            )
        if type(rid) not in (int, str):
            return _error(
                None, _INVALID_REQUEST, "Invalid Request: id must be a string or number", 400
            )
        call = mcp.McpCall(
            id=rid,  # type: ignore[arg-type]
            progress_token=_token(mcp.meta_of(params).get("progressToken")),
            progress=steps,
            revision=revision,
            logs=logs,
        )
        fields = self.options_of(request).fields(revision, self._stream_name(session))
        fault = None if self.stream_for is not None else self.fault_of(request)
        if fault is not None and fault in DROPS:
            fields = McpDrops.fields(fault, fields)
        if fields != mcp.NO_FIELDS:
            call = replace(call, sse=fields)
        self.calls.append(call)
        if fault is not None and fault in DROPS:  # cut, then resumed or re-issued
            body = fixtures.clean_stream("mcp", request=call)
            resp, whole = await self.drops.serve_call(request, call, body, fault, session_id)
            if not whole:
                self.cancelled.append(call)
            return resp
        timed = None
        if self.stream_for is not None:
            body, reset = self.stream_for(call)
        elif fault is None:
            body, reset = fixtures.clean_stream("mcp", request=call), False
        else:
            body = fixtures.faulty_stream(fault, "mcp", request=call)
            reset = fixtures.KINDS[fault].reset
            timed = fault if fixtures.KINDS[fault].timed else None
        if self.stream_for is None and (fault is None or timed) and call.sse.ids:
            # whole events with ids: a client cut off by something else (the chaos proxy's
            # drop, a network) resumes them as it would a drop of ours
            self.drops.keep(session_id, call, body)
        try:
            return await self.serve_sse(request, body, reset, timed)
        finally:
            if not request.get(BODY_SENT):
                self.cancelled.append(call)

    def _stream_name(self, session: _Session | None) -> str:
        """A new stream's name: its number in the session (or the server's, without one),
        so that event ids, which carry it, are unique in the session."""
        if session is not None:
            session.streams += 1
            return f"s{session.streams}"
        self.streams += 1
        return f"r{self.streams}"
