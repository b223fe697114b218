"""What the client's request says about itself (its request id, its trace, the model it
asked for), logged with every line of its stream."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Mapping
from dataclasses import dataclass
from typing import Any

import msgspec

from sse_proxy.core.rpcrequest import RpcRequest
from sse_proxy.core.streammeta import short_str
from sse_proxy.core.toolschema import ToolSchemas

__all__ = ["MODEL_BODY_LIMIT", "RequestContext"]

MODEL_BODY_LIMIT = 256 << 10
"""Request bodies up to this size (JSON only) are read for their ``model``; larger ones are
streamed through unread."""

_TRACEPARENT = re.compile(r"^([0-9a-f]{2})-([0-9a-f]{32})-([0-9a-f]{16})-([0-9a-f]{2})")
_PRINTABLE = re.compile(r"[^\x21-\x7e]")


def _header_value(value: str | None, limit: int = 200) -> str | None:
    """A client header value as it may be logged: printable ASCII, bounded."""
    if not value:
        return None
    value = _PRINTABLE.sub("?", value.strip())[:limit]
    return value or None


@dataclass(slots=True)
class RequestContext:
    """What the client's request says about itself, logged with every line of its stream."""

    route: str
    client_request_id: str | None = None
    traceparent: str | None = None
    trace_id: str | None = None
    parent_span_id: str | None = None
    _model: str | None = None
    _schemas: ToolSchemas | None = None
    _body: bytes | None = None
    """A JSON body not read yet: :meth:`read_body` keeps it for the first that asks."""
    _method: str = "POST"
    _headers: Mapping[str, str] | None = None
    """The request's headers, read only for an MCP stream (:attr:`rpc_request`)."""
    _rpc: RpcRequest | None = None
    keep_request: bool = False
    """Keep the parsed body (:attr:`request_json`): set for a stream whose chaos spec has
    shape variants, which serve some shapes only to requests that ask for them."""
    _request: dict[str, Any] | None = None

    @classmethod
    def from_headers(
        cls, headers: Mapping[str, str], route: str, method: str = "POST"
    ) -> RequestContext:
        """X-Request-ID (or X-Client-Request-Id) and a W3C ``traceparent``, if valid; the
        method and headers are kept as they are, for an MCP stream's request."""
        rid = headers.get("X-Request-ID") or headers.get("X-Client-Request-Id")
        tp = _header_value(headers.get("traceparent"), 128)
        trace_id = span_id = None
        if tp is not None:
            m = _TRACEPARENT.match(tp.lower())
            if m and m.group(1) != "ff" and set(m.group(2)) != {"0"} and set(m.group(3)) != {"0"}:
                trace_id, span_id = m.group(2), m.group(3)
        return cls(
            route=route,
            client_request_id=_header_value(rid),
            traceparent=tp,
            trace_id=trace_id,
            parent_span_id=span_id,
            _method=method,
            _headers=headers,
        )

    @property
    def request_model(self) -> str | None:
        """The ``model`` the request body asked for."""
        if self._body is not None:
            self._parse()
        return self._model

    @property
    def tool_schemas(self) -> ToolSchemas | None:
        """The tools the request declared, for checking the tool calls of its stream."""
        if self._body is not None:
            self._parse()
        return self._schemas

    @property
    def rpc_request(self) -> RpcRequest | None:
        """The JSON-RPC request an MCP stream answers: a POST's JSON-RPC body (its ids,
        method, tool and progress token) with its MCP headers, or a GET (a client's own
        stream, or one it resumes); None when the body was not read (too large, not JSON):
        then no request is known to check the stream against."""
        if self._body is not None:
            self._parse()
        if self._rpc is None and self._method == "GET" and self._headers is not None:
            self._rpc = RpcRequest.from_http("GET", self._headers)
        return self._rpc

    def request_json(self) -> dict[str, Any] | None:
        """The request body as a JSON object, when :attr:`keep_request` was set before it
        was read (None: not kept, not JSON, or larger than :data:`MODEL_BODY_LIMIT`)."""
        if self._body is not None:
            self._parse()
        return self._request

    def fields(self) -> dict[str, Any]:
        """The request's own log fields (the response's come from :class:`StreamMeta`)."""
        return {
            "client_request_id": self.client_request_id,
            "trace_id": self.trace_id,
            "traceparent": self.traceparent,
            "route": self.route,
            "request_model": self.request_model,
        }

    async def peek(self, body: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
        """Forward ``body`` unchanged; if it is small JSON, read its ``model`` (and the JSON
        Schemas of the tools it declares) at the end.

        Nothing is held back from the upstream: the first :data:`MODEL_BODY_LIMIT` bytes
        are copied on the way, and dropped as soon as the body outgrows them.
        """
        kept: list[bytes] | None = []
        size = 0
        async for chunk in body:
            if kept is not None:
                size += len(chunk)
                if size > MODEL_BODY_LIMIT:
                    kept = None
                else:
                    kept.append(chunk)
            yield chunk
        if kept:
            self.read_body(b"".join(kept))

    def read_body(self, body: bytes) -> None:
        """A JSON request body, for its ``model`` and the JSON Schemas of its tools; parsed
        when first asked for, not here: here is before the upstream request goes out, and
        an agent's body of tens of KiB is a parse that every start would wait for."""
        if len(body) <= MODEL_BODY_LIMIT:
            self._body = body

    def _parse(self) -> None:
        body, self._body = self._body, None
        if body is None:
            return
        try:
            obj = msgspec.json.decode(body)
        except (msgspec.DecodeError, RecursionError):
            return
        if type(obj) is dict:
            self._model = short_str(obj.get("model"))
            self._schemas = ToolSchemas.from_request(obj)
            if self.keep_request:
                self._request = obj
        if (type(obj) is dict and obj.get("jsonrpc") == "2.0") or type(obj) is list:
            self._rpc = RpcRequest.from_http(self._method, self._headers or {}, obj)
