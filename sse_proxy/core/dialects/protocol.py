"""The contract between the reassembler and a dialect, declared (as structlog's ``typing``).

The reassembler, ``check`` and the server read a dialect only through
:class:`DialectAccumulator`; a descriptor's ``accumulator`` must build one
(:class:`AccumulatorFactory`), so mypy refuses a dialect whose accumulator lacks a hook.
``stream_meta`` has no default on purpose: a dialect says what its stream reports about
itself, even when that is nothing (raw text).

Outcomes, for an accumulator fed by the reassembler:

* ``accept`` gets every dispatched event that the batch paths did not take; alerts go to
  the shared list it was built with, never raised.
* ``accept_batch`` / ``accept_one`` take a run of checked single-line ``data:`` payloads
  whole and return True, or return False untouched (the events then come one by one).
* ``finish`` runs once, at the end of a stream that was not abandoned: checks that need
  the whole stream (tool calls that nothing ended, checked then).
* ``tool_schemas`` are the request's tool declarations (the reassembler sets them); each
  tool call is checked against its tool's schema when it ends (:mod:`.toolcalls`).
* ``rpc_request`` is the JSON-RPC request the stream answers (the reassembler sets it, for
  an MCP stream's ids and progress tokens); ``frame_info`` gives the event ID in force and
  the block's ``retry`` during a dispatch, for the dialects whose rules are about them.
* ``cursors`` are the first and last number of the events (Responses' ``sequence_number``),
  for a dialect that resumes by one; ``follow_cursor`` is called for a resumed stream,
  whose first event is not the one that carries it otherwise (nothing is read per event
  of a stream that is not resumed).
* ``summary_fields`` are the dialect's own fields of the stream's summary (none for most).
* ``terminal_seen`` says the stream ended cleanly (its terminal marker, or an error or a
  block that ends it legitimately); the reassembler reports ``sse.truncated`` otherwise,
  for dialects whose descriptor names a terminal marker.
* ``pings`` counts the API's keep-alive events; ``tool_progress`` says how far the tool
  calls got. With the text and reasoning lengths they tell a stall (time without progress,
  whatever else arrives) from a slow answer.
* ``fffd_seen`` counts U+FFFD in extracted text, so the reassembler can check every one was
  reported.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, runtime_checkable

from sse_proxy.core.alerts import Alert
from sse_proxy.core.rpcrequest import RpcRequest
from sse_proxy.core.streammeta import StreamMeta
from sse_proxy.core.toolschema import ToolSchemas

__all__ = ["AccumulatorFactory", "DialectAccumulator"]


@runtime_checkable
class DialectAccumulator(Protocol):
    """What every dialect accumulator implements (see the module docstring)."""

    terminal_seen: bool
    fffd_seen: int
    pings: int
    """The API's own keep-alive events seen (Anthropic's ``ping``; 0 where it has none)."""
    tool_schemas: ToolSchemas | None
    locate: Callable[[str, int, int], int]
    """Where character i of an event's data is in the stream (the reassembler sets it)."""
    rpc_request: RpcRequest | None
    frame_info: Callable[[], tuple[str | None, int | None]]

    def accept(self, etype: str, data: str, index: int, offset: int) -> None: ...

    def accept_batch(self, payloads: list[bytes], index: int, pos: int, extra: int) -> int: ...

    def accept_one(self, payload: bytes, index: int, pos: int) -> bool: ...

    def finish(self) -> None: ...

    def follow_cursor(self) -> None:
        """Read the cursor of a resumed stream's events (see :attr:`cursors`)."""

    @property
    def cursors(self) -> tuple[int, int] | None:
        """(first, last) cursor of the events, where a dialect numbers them in their data."""

    @property
    def event_cursor(self) -> str | None:
        """The opaque cursor the last whole event carried in its data (Gemini Interactions'
        ``event_id``), where a dialect's events carry one."""

    def compact(self) -> None:
        """Fold kept-as-counts text into counts (called now and then on long streams)."""

    @property
    def text(self) -> str:
        """The message text ("" when the text is only counted)."""

    @property
    def text_length(self) -> int: ...

    @property
    def reasoning(self) -> str:
        """Reasoning streamed apart from the answer ("" if none, or not kept)."""

    @property
    def reasoning_length(self) -> int: ...

    @property
    def tool_progress(self) -> int:
        """How far the tool calls got (characters of arguments); for a timer, not per event."""

    def stream_meta(self) -> StreamMeta:
        """Model, response id, finish reasons and usage, as the stream reported them so far."""

    def details(self) -> dict[str, Any]:
        """Everything reassembled beyond the text (choices, tool calls, blocks)."""

    def summary_fields(self) -> dict[str, Any]:
        """The dialect's own fields of ``stream.summary`` ({} for most)."""


class AccumulatorFactory(Protocol):
    """How a descriptor builds its accumulator: the class itself, usually."""

    def __call__(self, alerts: list[Alert], *, keep_text: bool = True) -> DialectAccumulator: ...
