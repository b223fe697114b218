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
* ``server/discover`` gets a 4xx JSON-RPC error whatever the revision: this is a server
  of the handshake era that also answers stateless requests, so a client that probes (the
  Python SDK's ``Client`` does) falls back to ``initialize``, and one pinned to 2026-07-28
  is answered the stateless way.

The stream itself comes from the fixtures, built for the request (its id, its progress
token), with the mock's fault when it has one; a test harness can put its own in
(``stream_for``: the test-client's cuts and broken streams), and reads what was called
(:attr:`McpServer.calls`).
"""

from __future__ import annotations

import json
import secrets
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, Final

from aiohttp import web

from sse_proxy.tools import fixtures
from sse_proxy.tools.fixtures import mcp

__all__ = ["MAX_SESSIONS", "SUPPORTED", "McpServer", "ServeSse", "StreamFor"]

StreamFor = Callable[[mcp.McpCall], tuple[bytes, bool]]
"""What answers a ``tools/call``: the stream's bytes, and whether the connection is then
reset instead of ended."""
ServeSse = Callable[[web.Request, bytes, bool], Awaitable[web.StreamResponse]]
"""Writes bytes as an SSE response (the mock's: seeded pieces, its delay, its lockstep),
then ends it, or resets the connection."""

SUPPORTED: Final[tuple[str, ...]] = (*mcp.LEGACY_REVISIONS, *mcp.MODERN_REVISIONS)
MAX_SESSIONS: Final = 4096
"""Sessions remembered (the oldest forgotten first: its client then gets 404)."""
_META_VERSION: Final = "io.modelcontextprotocol/protocolVersion"
_META_CAPABILITIES: Final = "io.modelcontextprotocol/clientCapabilities"
_META_LOG_LEVEL: Final = "io.modelcontextprotocol/logLevel"
_META_SERVER_INFO: Final = "io.modelcontextprotocol/serverInfo"
_PARSE_ERROR, _INVALID_REQUEST, _NO_METHOD, _INVALID_PARAMS = -32700, -32600, -32601, -32602
_SESSION_NOT_FOUND, _HEADER_MISMATCH, _UNSUPPORTED_VERSION = -32001, -32020, -32022
_CAPABILITIES: Final[dict[str, Any]] = {"tools": {"listChanged": False}, "logging": {}}


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


class McpServer:
    """The ``/mcp`` endpoint of one mock app (see the module docstring)."""

    def __init__(
        self,
        serve_sse: ServeSse,
        fault_of: Callable[[web.Request], str | None],
        stream_for: StreamFor | None = None,
    ) -> None:
        self.serve_sse = serve_sse
        self.fault_of = fault_of
        self.stream_for = stream_for
        self.sessions: OrderedDict[str, str] = OrderedDict()
        """Session id -> the revision it negotiated."""
        self.calls: list[mcp.McpCall] = []
        """The tool calls answered, in order (a harness reads whether progress was asked)."""

    async def handle(self, request: web.Request) -> web.StreamResponse:
        if request.method == "POST":
            return await self._post(request)
        if request.method == "GET":
            # This server sends no event ids, so no stream can be resumed, and it has no
            # stream of its own to offer: 405, which every client takes as "none".
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
            return web.Response(status=202)  # a notification or a response: accepted
        rid = msg["id"]
        params = msg.get("params")
        meta = mcp.meta_of(params)
        if method == "server/discover":
            return _error(rid, _NO_METHOD, "Method not found: server/discover", 400)
        if version in mcp.MODERN_REVISIONS or meta.get(_META_VERSION) in mcp.MODERN_REVISIONS:
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
        if session is not None:
            known = self.sessions.get(session)
            if known is None:
                return _error(rid, _SESSION_NOT_FOUND, "Session not found", 404)
            negotiated = version or known
        if method in ("ping", "logging/setLevel"):
            return _result(rid, {})
        if method == "tools/list":
            return _result(rid, {"tools": [mcp.TOOL_DEFINITION]})
        if method == "tools/call":
            return await self._call(request, msg, rid, negotiated, logs=True)
        return _error(rid, _NO_METHOD, f"Method not found: {method[:100]}")

    def _initialize(self, msg: dict[str, Any], rid: object) -> web.Response:
        params = msg.get("params")
        asked = params.get("protocolVersion") if type(params) is dict else None
        version = asked if asked in mcp.LEGACY_REVISIONS else mcp.LATEST_LEGACY
        session = secrets.token_hex(16)
        self.sessions[session] = str(version)
        while len(self.sessions) > MAX_SESSIONS:
            self.sessions.popitem(last=False)
        result = {
            "protocolVersion": version,
            "capabilities": _CAPABILITIES,
            "serverInfo": mcp.SERVER_INFO,
            "instructions": f"Call {mcp.TOOL} to stream the fixture text.",
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
        return _error(rid, _NO_METHOD, f"Method not found: {method[:100]}", 404)

    # -- the tool --------------------------------------------------------------------------

    async def _call(
        self,
        request: web.Request,
        msg: dict[str, Any],
        rid: object,
        revision: str | None,
        *,
        logs: bool,
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
        self.calls.append(call)
        if self.stream_for is not None:
            body, reset = self.stream_for(call)
        else:
            fault = self.fault_of(request)
            if fault is None:
                body, reset = fixtures.clean_stream("mcp", request=call), False
            else:
                body = fixtures.faulty_stream(fault, "mcp", request=call)
                reset = fixtures.KINDS[fault].reset
        return await self.serve_sse(request, body, reset)
