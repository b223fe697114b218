"""The JSON-RPC request a stream answers, as the proxy saw it go out: what an MCP stream is
checked against.

Sans-IO like the rest of the core: the shell hands in the request body it already parsed
(for the model and the tool schemas) and the few request headers that matter, and this
reads out of them what the stream that answers must agree with: the ids it may answer
(a response to any other id answers nobody), the method and tool, the progress token (a
progress notification must name it), the protocol revision (which decides whether batches,
priming events and server requests are allowed) and, for a GET, whether it resumes a
stream (``Last-Event-ID``). Tool arguments are never kept: they are the user's data.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Final

__all__ = [
    "BATCH_REVISION",
    "MAX_CALLS",
    "MAX_ID_CHARS",
    "MODERN_REVISION",
    "PRIMING_REVISION",
    "Key",
    "RpcCall",
    "RpcRequest",
    "id_key",
    "show_id",
]

Key = tuple[bool, Any]
"""A JSON-RPC id as a dictionary key: (is a string, value). ``1`` and ``"1"`` are two ids,
``1`` and ``1.0`` one (the same number), and ``true`` none at all."""

MAX_ID_CHARS: Final = 256
"""A string id longer than this is no usable id (a client never sends one; a hostile
stream could make every lookup hash megabytes)."""
MAX_CALLS: Final = 64
"""Requests read from one POST body (a batch; a real one holds a few)."""
BATCH_REVISION: Final = "2025-03-26"
"""The one revision whose streams may carry JSON-RPC batches (2025-06-18 removed them)."""
PRIMING_REVISION: Final = "2025-11-25"
"""The first revision with priming events: an older client parses their empty data."""
MODERN_REVISION: Final = "2026-07-28"
"""The first stateless revision: no server requests on a stream, no resumption."""
_META_VERSION = "io.modelcontextprotocol/protocolVersion"
_SHOWN = 64


def id_key(value: object) -> Key | None:
    """The key of a JSON-RPC id, or None when it is no valid id (null, a bool, an object,
    a string too long to be one)."""
    kind = type(value)
    if kind is str:
        return (True, value) if len(value) <= MAX_ID_CHARS else None  # type: ignore[arg-type]
    if kind is int or kind is float:
        return (False, value)
    return None


def show_id(value: object) -> str:
    """An id as a log field shows it: its JSON-ish spelling, bounded."""
    if type(value) is str:
        text = '"' + value[:_SHOWN] + '"'
        return text + ("…" if len(value) > _SHOWN else "")
    if type(value) is int and value.bit_length() > 200:
        return f"<integer of {value.bit_length()} bits>"
    try:
        text = str(value)
    except (RecursionError, ValueError):
        return "<unprintable>"
    return text[:_SHOWN] + ("…" if len(text) > _SHOWN else "")


def _short(value: object) -> str | None:
    if type(value) is not str or not value:
        return None
    return value[:200]


@dataclass(frozen=True, slots=True)
class RpcCall:
    """One request of the body: its id (key and as logged), method, tool, progress token."""

    key: Key
    id: str
    method: str
    tool: str | None = None
    progress_token: Key | None = None


@dataclass(frozen=True, slots=True)
class RpcRequest:
    """The request(s) of one HTTP request to an MCP endpoint.

    ``calls``: the JSON-RPC requests of a POST body (one; a 2025-03-26 batch: several); a
    notification or response posted gets none, nor does a GET. ``protocol_version``: the
    ``MCP-Protocol-Version`` header (or the 2026-07-28 ``_meta`` field), None when neither
    says. ``last_event_id``: a GET that resumes a stream.
    """

    calls: tuple[RpcCall, ...] = ()
    http_method: str = "POST"
    protocol_version: str | None = None
    last_event_id: str | None = None
    session: bool = False
    batch: bool = False

    @classmethod
    def from_http(
        cls, http_method: str, headers: Mapping[str, str], body: object = None
    ) -> RpcRequest:
        """What a request says: its method, its MCP headers, its parsed JSON body (None:
        no body, or not JSON)."""
        version = _short(headers.get("MCP-Protocol-Version"))
        items = body if type(body) is list else [body]
        calls: list[RpcCall] = []
        for item in items[:MAX_CALLS]:
            call = _call(item)
            if call is not None:
                calls.append(call)
            if version is None and type(item) is dict:
                version = _meta_version(item)
        return cls(
            calls=tuple(calls),
            http_method=http_method.upper(),
            protocol_version=version,
            last_event_id=_short(headers.get("Last-Event-ID")),
            session="Mcp-Session-Id" in headers,
            batch=type(body) is list,
        )

    def call(self, key: Key | None) -> RpcCall | None:
        """The request with this id, or None (nobody asked it here)."""
        for call in self.calls:
            if call.key == key:
                return call
        return None

    @property
    def expects_response(self) -> bool:
        """Whether the stream owes responses: a POST of requests (a GET resumes at most)."""
        return bool(self.calls)

    @property
    def batches_allowed(self) -> bool:
        """A batch may be sent to a client that sent one, or speaks 2025-03-26 (a client
        that sends no version header is taken to, as the specification says)."""
        return self.batch or self.protocol_version in (None, BATCH_REVISION)

    @property
    def modern(self) -> bool:
        """The stateless revision (2026-07-28) or a later one."""
        return self.protocol_version is not None and self.protocol_version >= MODERN_REVISION

    @property
    def before_priming(self) -> bool:
        """A revision older than priming events (the client may parse their empty data)."""
        v = self.protocol_version
        return v is not None and v < PRIMING_REVISION


def _meta_version(item: dict[str, Any]) -> str | None:
    params = item.get("params")
    meta = params.get("_meta") if type(params) is dict else None
    return _short(meta.get(_META_VERSION)) if type(meta) is dict else None


def _call(item: object) -> RpcCall | None:
    """A request of the body (a notification or a response is none)."""
    if type(item) is not dict:
        return None
    method = item.get("method")
    if type(method) is not str or "id" not in item:
        return None
    raw = item["id"]
    key = id_key(raw)
    if key is None:
        return None
    params = item.get("params")
    tool = token = None
    if type(params) is dict:
        if method == "tools/call":
            tool = _short(params.get("name"))
        meta = params.get("_meta")
        if type(meta) is dict and "progressToken" in meta:
            token = id_key(meta["progressToken"])
    return RpcCall(key, show_id(raw), method[:200], tool, token)
