"""StreamReassembler: bytes in; events, message text and alerts out.

It composes the event-stream parser (:mod:`sse_proxy.core.framing`) with a dialect accumulator
(:mod:`sse_proxy.core.dialects`). ``feed`` returns everything that happened during the call, so
the shell forwards bytes and logs alerts in a few lines whatever the parser thinks.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from typing import Any

from sse_proxy.core.alerts import Alert, CrlfFraming, ReplacementChar, Truncated
from sse_proxy.core.dialects.registry import (
    DIALECTS,
    DetectingAccumulator,
    Dialect,
    DialectAccumulator,
    detect,
    normalize_dialect,
)
from sse_proxy.core.events import SSEEvent
from sse_proxy.core.framing import DEFAULT_LIMIT, EventStreamParser
from sse_proxy.core.rpcrequest import RpcRequest
from sse_proxy.core.streammeta import StreamMeta
from sse_proxy.core.toolschema import ToolSchemas
from sse_proxy.errors import ReassemblerStateError

__all__ = ["Limits", "Output", "StreamReassembler"]


def _closed_data(etype: str, data: str, index: int, data_off: int) -> None:
    raise ReassemblerStateError("feed() after close()")


def _closed_batch(payloads: list[bytes], index: int, pos: int, extra: int) -> int:
    raise ReassemblerStateError("feed() after close()")


@dataclass(frozen=True, slots=True, kw_only=True)
class Limits:
    """Bounds on what the observer holds: one line, one frame (bytes)."""

    max_line: int = DEFAULT_LIMIT
    max_frame: int = DEFAULT_LIMIT

    def __post_init__(self) -> None:
        if self.max_line < 1 or self.max_frame < 1:
            raise ValueError("limits must be positive byte counts")


@dataclass(frozen=True, slots=True)
class Output:
    """What one ``feed`` or ``close`` produced. ``frame_ends`` are stream offsets.

    ``tentative_end``: the read ended with the CR of a blank line, so a frame ends either
    here or one byte later if the next read starts with LF. The next ``feed`` (or
    ``close``) settles it and reports the real end among its ``frame_ends``; a planner that
    must not split a CRLF holds the frame until then.
    """

    events: tuple[SSEEvent, ...] = ()
    alerts: tuple[Alert, ...] = ()
    frame_ends: tuple[int, ...] = ()
    tentative_end: int | None = None


_EMPTY = Output()


class StreamReassembler:
    """Incremental, cut-point independent reassembly of one SSE stream.

    ``dialect`` names the message format (a name or alias of
    :data:`~sse_proxy.core.dialects.DIALECTS`) or ``None`` to detect it from the first
    data event; ``hint`` is the
    dialect to assume when detection cannot tell (the proxy derives it from the request
    path). ``emit_events=False`` skips building :class:`SSEEvent` objects and
    ``frame_ends=False`` skips reporting frame end offsets, when only text and alerts are
    wanted (the proxy's passthrough hot path). ``keep_text=False`` counts the message
    text instead of keeping it (``text`` is then empty), so memory stays flat on a long
    stream. ``resumed``: the stream resumes another one (its dialect reads where it starts,
    :attr:`cursors`).
    """

    def __init__(
        self,
        dialect: str | None = None,
        *,
        hint: str | None = None,
        limits: Limits | None = None,
        emit_events: bool = True,
        frame_ends: bool = True,
        keep_text: bool = True,
        tool_schemas: ToolSchemas | None = None,
        rpc_request: RpcRequest | None = None,
        resumed: bool = False,
    ) -> None:
        limits = limits or Limits()
        self._resumed = resumed
        self._tool_schemas = tool_schemas
        self._rpc_request = rpc_request
        forced = normalize_dialect(dialect)
        self._hint = normalize_dialect(hint)
        self._keep_text = keep_text
        self._alerts: list[Alert] = []
        self._events: list[SSEEvent] = []
        self._decided = forced is not None
        self._dialect: Dialect | None = None  # None until known
        self._acc: DialectAccumulator = (
            self._use(forced) if forced is not None else DetectingAccumulator(self._alerts)
        )
        self._parser = EventStreamParser(
            self._acc.accept if self._decided else self._detect,
            self._alerts,
            on_batch=self._acc.accept_batch if self._decided else self._detect_batch,
            on_one=self._acc.accept_one if self._decided else None,
            events=self._events if emit_events else None,
            frame_ends=frame_ends,
            max_line=limits.max_line,
            max_frame=limits.max_frame,
        )
        self._acc.locate = self._parser.data_offset
        self._acc.frame_info = self._parser.frame_info
        self._quiet = not emit_events and not frame_ends
        self._closed = False
        self._bytes = 0  # fed in all, once closed (until then the parser's offset is)
        self._feeds = 0
        self.alert_counts: Counter[str] = Counter()
        self._fffd_alerts = 0

    # -- public -------------------------------------------------------------------------

    def feed(self, chunk: bytes) -> Output:
        if self._closed:
            raise ReassemblerStateError("feed() after close()")
        whole = self._parser.feed(chunk)
        self._feeds += 1
        if not self._feeds & 31 and not self._keep_text:
            self._acc.compact()  # the text parts of the last 32 reads: fold them into a count
        if whole and self._quiet and not self._alerts:
            return _EMPTY  # clean frames only, and neither events nor frame ends are wanted
        return self._drain()

    def close(self, *, upstream_error: bool = False, abandoned: bool = False) -> Output:
        """End of stream. ``upstream_error``: upstream closed or failed mid-stream.

        ``abandoned``: nobody let it finish (the client left, the proxy shut down), so the
        end-of-stream verdicts (unterminated frame, truncation, unfinished tool-call
        arguments) would be false alarms and are not made.
        """
        if self._closed:
            raise ReassemblerStateError("close() called twice")
        self._closed = True
        parser = self._parser
        self._bytes = parser.offset  # every byte fed (close lets go of a partial line)
        parser.close(report=not abandoned)
        if not self._decided and self._hint is not None:
            early = self._acc
            self._acc = self._use(self._hint)
            self._acc.locate = parser.data_offset
            if isinstance(early, DetectingAccumulator) and early.empty:
                self._replay_empty(early.empty)
            self._acc.frame_info = parser.frame_info
        acc = self._acc
        if not abandoned:
            acc.finish()
        end = self._bytes
        marker = self._dialect.terminal_marker if self._dialect is not None else None
        if upstream_error:
            self._alerts.append(
                Truncated(reason=Truncated.UPSTREAM_CLOSED, dialect=self.dialect, byte_offset=end)
            )
        elif marker is not None and not acc.terminal_seen and not abandoned:
            self._alerts.append(
                Truncated(
                    reason=Truncated.NO_TERMINAL_MARKER, dialect=self.dialect, byte_offset=end
                )
            )
        counts = parser.line_endings
        if counts["crlf"] or counts["cr"]:
            kinds = sum(1 for n in counts.values() if n)
            self._alerts.append(CrlfFraming(counts=counts, mixed=kinds > 1))
        out = self._drain()
        # Nothing is parsed after close: the parser lets go of the accumulator's methods
        # and of this object's (with the accumulator's ``locate``, reference cycles that
        # only the garbage collector would free, every stream's objects at once).
        parser.set_callbacks(_closed_data, _closed_batch, None)
        if acc.fffd_seen > self._fffd_alerts:
            # Every U+FFFD in the text must have been reported; if not, this is our bug.
            raise ReassemblerStateError(
                f"{acc.fffd_seen} U+FFFD in reassembled text, {self._fffd_alerts} reported"
            )
        return out

    @property
    def text(self) -> str:
        """The reassembled message text so far (exact, spaces and all); "" if not kept."""
        return self._acc.text if self._keep_text else ""

    @property
    def dialect(self) -> str:
        """The dialect's name; ``unknown`` until detection (or the hint) settles it."""
        return self._dialect.name if self._dialect is not None else "unknown"

    @property
    def has_text(self) -> bool:
        """Whether any message text has been reassembled yet."""
        return self._acc.text_length > 0

    @property
    def terminal_seen(self) -> bool:
        """Whether the dialect's terminal marker (or an end it takes as one) has arrived."""
        return self._acc.terminal_seen

    @property
    def keepalives(self) -> tuple[int, int]:
        """(comment lines, ping events) so far: what keeps a connection busy, not the answer.
        The comment lines are counted up to the last dispatched event (those after it are
        :attr:`comments_since_event`)."""
        parser = self._parser
        return parser.comments - parser.comments_since_event, self._acc.pings

    @property
    def comments_since_event(self) -> int:
        """Comment lines since the last dispatched event."""
        return self._parser.comments_since_event

    def progress(self) -> int:
        """A count that grows with the answer and with nothing else: characters of text,
        reasoning and tool-call arguments (events, for a dialect without text, or before
        the dialect is known). It may walk the text: for a timer, never per event."""
        described = self._dialect
        if described is None or not described.carries_text:
            return self._parser.event_count
        acc = self._acc
        return acc.text_length + acc.reasoning_length + acc.tool_progress

    @property
    def reasoning(self) -> tuple[str, int]:
        """(reasoning text, its length): reasoning streamed apart from the answer."""
        return self._acc.reasoning, self._acc.reasoning_length

    def stream_meta(self) -> StreamMeta:
        """Model, response id, finish reasons and usage, as the stream has reported them."""
        return self._acc.stream_meta()

    @property
    def tool_schemas(self) -> ToolSchemas | None:
        """The request's tool schemas that tool calls are checked against."""
        return self._tool_schemas

    @tool_schemas.setter
    def tool_schemas(self, schemas: ToolSchemas | None) -> None:
        self._tool_schemas = schemas
        self._acc.tool_schemas = schemas

    @property
    def closed(self) -> bool:
        return self._closed

    @property
    def bytes_fed(self) -> int:
        return self._bytes if self._closed else self._parser.offset

    @property
    def events_dispatched(self) -> int:
        return self._parser.event_count

    @property
    def last_event_id(self) -> str | None:
        """The id a client of this stream resumes from (``Last-Event-ID``), as the spec has
        it: the last id of a block that ended (None: the stream gave none)."""
        return self._parser.last_event_id

    @property
    def cursors(self) -> tuple[int, int] | None:
        """(first, last) number of the events, for a dialect that numbers them in their data
        (Responses' ``sequence_number``); None otherwise."""
        return self._acc.cursors

    @property
    def event_cursor(self) -> str | None:
        """The opaque cursor the last whole event carried in its data, for a dialect whose
        events carry one (Gemini Interactions' ``event_id``); None otherwise."""
        return self._acc.event_cursor

    @property
    def pending_event_id(self) -> str | None:
        """An id the stream sent in a block it never ended (cut after it), or None."""
        return self._parser.pending_event_id

    def details(self) -> dict[str, Any]:
        """Everything reassembled beyond ``text``: choices, reasoning, tool calls."""
        return self._acc.details()

    def summary(self) -> dict[str, Any]:
        """Counters for the ``stream.summary`` log line (the shell adds times), and the
        dialect's own fields (MCP's ``mcp`` object)."""
        return {
            "bytes": self.bytes_fed,
            "events": self._parser.event_count,
            "dialect": self.dialect,
            "text_length": self._acc.text_length,
            "terminal_seen": self._acc.terminal_seen,
            "line_endings": self._parser.line_endings,
            "alerts": dict(self.alert_counts),
            **self._acc.summary_fields(),
        }

    @property
    def accumulator(self) -> DialectAccumulator:
        """The dialect's accumulator (a stand-in until the dialect is known), for a shell
        that times what only one dialect reports (MCP's progress and response)."""
        return self._acc

    # -- internals ----------------------------------------------------------------------

    def _drain(self) -> Output:
        alerts = self._alerts
        events = self._events
        frame_ends = self._parser.take_frame_ends()
        tentative = self._parser.tentative_end
        if not (alerts or events or frame_ends or tentative is not None):
            return _EMPTY
        out = Output(tuple(events), tuple(alerts), tuple(frame_ends), tentative)
        if alerts:
            counts = self.alert_counts
            for alert in alerts:
                if type(alert) is ReplacementChar:
                    counts[alert.name] += alert.count
                    self._fffd_alerts += alert.count
                else:
                    counts[alert.name] += 1
            alerts.clear()
        if events:
            events.clear()
        return out

    def _use(self, name: str) -> DialectAccumulator:
        """The accumulator of dialect ``name``, which becomes the stream's dialect."""
        self._dialect = DIALECTS[name]
        acc = self._dialect.accumulator(self._alerts, keep_text=self._keep_text)
        acc.tool_schemas = self._tool_schemas
        acc.rpc_request = self._rpc_request
        if self._resumed:
            acc.follow_cursor()
        return acc

    def _detect(self, etype: str, data: str, index: int, data_off: int) -> None:
        """Until the dialect is known, look at each event; then hand the parser to it."""
        if not self._decided:
            name = detect(etype, data)
            if self._hint is not None and name in (None, "text"):
                name = self._hint
            if name is not None:
                self._decided = True
                early = self._acc
                self._acc = self._use(name)
                self._acc.locate = self._parser.data_offset
                if isinstance(early, DetectingAccumulator) and early.empty:
                    self._replay_empty(early.empty)
                self._acc.frame_info = self._parser.frame_info
                self._parser.set_callbacks(
                    self._acc.accept, self._acc.accept_batch, self._acc.accept_one
                )
        self._acc.accept(etype, data, index, data_off)

    def _replay_empty(
        self, empty: list[tuple[str, int, int, tuple[str | None, int | None]]]
    ) -> None:
        """The empty-data events that came before the dialect was known, for it: each with
        the event id and retry it had (an MCP stream's priming event)."""
        acc = self._acc
        for etype, index, offset, info in empty:
            acc.frame_info = lambda info=info: info  # type: ignore[misc]
            acc.accept(etype, "", index, offset)

    def _detect_batch(self, payloads: list[bytes], index: int, pos: int, extra: int) -> int:
        """Before the dialect is known, events go one by one (none taken whole)."""
        return 0
