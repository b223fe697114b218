"""One frozen descriptor per dialect: everything the rest of the program knows about it.

Every table that lists dialects (aliases, request-path hints, the tracing provider, the
fixtures, the mock upstream's endpoints, the test-client's error frames and terminal
markers, the CLI choices) is built from :data:`sse_proxy.core.dialects.DIALECTS`, so a new
dialect is a module with an accumulator and a :class:`Dialect`, registered there;
``tests/test_dialect_registry.py`` then fails until every per-dialect piece of code
outside the core (a fixture builder, a mock endpoint) exists for it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from sse_proxy.core.dialects.protocol import AccumulatorFactory

__all__ = ["Dialect", "Provider"]


@dataclass(frozen=True, slots=True)
class Provider:
    """The API behind a stream: its OpenTelemetry GenAI names (for trace spans), and how an
    app points its vendor SDK at the proxy (for the start-up line)."""

    name: str
    """``gen_ai.provider.name``."""
    system: str
    """``gen_ai.system``, the attribute's older name (and, for Google, older values)."""
    operation: str
    """``gen_ai.operation.name``."""
    path_contains: str = ""
    """This provider only when the request path contains this ("": any path)."""
    host_contains: str = ""
    """Upstream hosts of this API contain this (how a route's API is told without a
    dialect); "": not told by the host."""
    base_url_env: str = ""
    """The environment variable the vendor's SDK reads its base URL from ("": none)."""
    base_url_path: str = ""
    """The path that base URL ends in (the OpenAI SDKs put ``/v1`` in it)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Dialect:
    """A stream dialect: its names, how requests and streams show it, what ends it.

    ``terminal_marker`` is what ends a clean stream, as shown to users (``None``: the
    dialect has none, so a clean end cannot be told from a cut one); ``terminal_frame``
    is a byte string found in the frame that carries it and in no other frame of a
    well-formed stream. ``error_frame`` is an in-stream error event as the API sends one
    (``None``: the dialect has no such event); ``error_ends_stream`` says whether the
    accumulator takes it as the stream's end (else the stream is also truncated).
    """

    name: str
    title: str
    accumulator: AccumulatorFactory
    aliases: tuple[str, ...] = ()
    path_suffixes: tuple[str, ...] = ()
    """Request paths ending so are hints for this dialect (query string excluded)."""
    hint_headers: tuple[str, ...] = ()
    """A request that carries one of these headers is a hint for this dialect."""
    example_path: str | None = None
    """A request path that streams this dialect (the mock upstream serves it)."""
    example_method: str = "POST"
    example_body: dict[str, Any] = field(default_factory=dict, compare=False)
    """A request body that makes :attr:`example_path` stream (copy it before changing it)."""
    providers: tuple[Provider, ...] = ()
    """First match by :attr:`Provider.path_contains` wins."""
    terminal_marker: str | None = None
    terminal_frame: bytes | None = None
    error_frame: bytes | None = None
    error_ends_stream: bool = False
    ping_frame: bytes | None = None
    """The API's own keep-alive event, as it sends one while nothing else is ready
    (Anthropic's ``event: ping``); ``None``: it keeps a connection busy with comments."""
    json: bool = True
    """Its payloads are JSON (so they can be invalid JSON)."""
    carries_text: bool = True
    """False only for ``none``: events, no message text (no fixture, no example)."""
    text_at_end: bool = False
    """The text comes whole in the frame that ends the stream (MCP's response), not in
    deltas: a stream cut before its end carries none of it."""
    rpc: bool = False
    """Its streams answer JSON-RPC requests of a session (MCP): what a stream says depends
    on the request (its id, its progress token), so fixtures are built per request, and
    the LLM-shaped ones (tool calls, token and shape variants) do not apply."""
    resumes_by: str | None = None
    """How a client resumes a stream that dropped, where the API lets it and the mock
    upstream serves it: ``last_event_id`` (raw SSE: ids, ``retry``, a reconnect to the same
    URL with ``Last-Event-ID``), ``starting_after`` (OpenAI Responses: a sequence number in
    the query) or ``event_id`` (Gemini Interactions: an event's ``event_id`` as the query's
    ``last_event_id``); None: no resumable stream here."""

    def provider_for(self, path: str = "") -> Provider | None:
        """The provider of a request to ``path``, or ``None`` (not an LLM API)."""
        return next((p for p in self.providers if p.path_contains in path), None)

    def hinted_by(self, path: str) -> bool:
        """Whether a request to ``path`` names this dialect."""
        return bool(self.path_suffixes) and path.endswith(self.path_suffixes)
