"""Shape and token variants: API-equivalent streams, the same message said another way.

Where the rewrites (:mod:`sse_proxy.rechunk.rewrites`) change the bytes of the event-stream
syntax and never an event, a variant changes the events within what the API allows: an
Azure first chunk with ``choices: []``, reasoning with ``content: null``, a ``thinking``
block before the text, the same text in other deltas. The assembled message (text, tool
calls) stays the same; what changes is what a client must be ready for. Pure: frames and a
seed in, frames out; which provider sends which shape, and where that is documented or was
reported, is in :mod:`sse_proxy.tools.fixtures.variants`.

A variant that providers send only when the request asks for something (``n > 1``, tools,
``include_usage``: its :class:`~sse_proxy.rechunk.shapes.requires.Requires`) is served
only to a request that asks for it, unless forced; the rewriter says which it left out and
which it forced (:meth:`ShapeRewriter.fields`).

:class:`ShapeRewriter` runs a stream's variants, for the chaos planner (one complete frame
at a time) and for the test-client (:func:`apply_variants`, with the chunk each variant is
about marked).
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any, Final

from sse_proxy.errors import ChaosSpecError
from sse_proxy.rechunk.shapes import anthropic, gemini, openai_chat, responses, tokens
from sse_proxy.rechunk.shapes.events import (
    BOM,
    Context,
    Event,
    Stage,
    newline_of,
    parse_frame,
    run_stage,
    serialize,
)
from sse_proxy.rechunk.shapes.requires import Request, Requires

__all__ = [
    "SHAPE_STAGES",
    "TOKEN_STAGES",
    "VARIANT_DIALECTS",
    "VARIANT_REQUIRES",
    "DialectOf",
    "Event",
    "RequestOf",
    "ShapeRewriter",
    "apply_variants",
    "split_frames",
]

SHAPE_STAGES: Final[Mapping[str, type[Stage]]] = MappingProxyType(
    {s.name: s for s in (*openai_chat.STAGES, *anthropic.STAGES, *responses.STAGES, *gemini.STAGES)}
)
"""Every shape variant by name, in the order they are applied."""

TOKEN_STAGES: Final[Mapping[str, type[Stage]]] = MappingProxyType(
    {s.name: s for s in tokens.STAGES}
)
"""Every token variant by name (for every dialect), in the order they are applied."""

VARIANT_DIALECTS: Final[Mapping[str, str | None]] = MappingProxyType(
    {name: stage.dialect for name, stage in {**SHAPE_STAGES, **TOKEN_STAGES}.items()}
)
"""The dialect each variant applies to (None: every dialect)."""

VARIANT_REQUIRES: Final[Mapping[str, Requires | None]] = MappingProxyType(
    {name: stage.requires for name, stage in {**SHAPE_STAGES, **TOKEN_STAGES}.items()}
)
"""What a request must ask for before providers send each variant (None: nothing)."""

_FRAME_END = re.compile(rb"(?:\r\n|\r(?!\n)|\n)(?:\r\n|\r(?!\n)|\n)")
_KNOWN: Final = frozenset(d for d in VARIANT_DIALECTS.values() if d) | {"text"}

DialectOf = str | Callable[[], str | None] | None
"""The stream's dialect: a name, or a function that says it once known (the observer's:
``lambda: reassembler.dialect``), or None (unknown: the variants do nothing)."""

RequestOf = Request | Callable[[], Request | None] | None
"""The request that asked for the stream, parsed: the object, a function that gives it
when first asked (the proxy's request context), or None (unknown: it asks for nothing)."""


def split_frames(body: bytes) -> list[bytes]:
    """Whole frames of ``body`` (each with its blank line), and any unterminated rest."""
    frames: list[bytes] = []
    pos = 0
    for match in _FRAME_END.finditer(body):
        frames.append(body[pos : match.end()])
        pos = match.end()
    if pos < len(body):
        frames.append(body[pos:])
    return frames


class ShapeRewriter:
    """One stream's variants: complete frames in, the frames that replace them out.

    Nothing changes until the stream's dialect is known (``dialect``: in the proxy, what
    its reassembler detected, asked at the first data event; the planners do not detect
    dialects themselves); then every variant of that dialect, and every token variant,
    applies in a fixed order, and for Responses the ``sequence_number`` of every event is
    counted anew. Variants of another dialect do nothing, and so does a variant whose
    requirement the ``request`` does not meet, unless ``force``: :attr:`not_applicable`
    and :attr:`forced` name them, with what the request did not ask for.
    """

    def __init__(
        self,
        names: Sequence[str],
        seed: int,
        *,
        dialect: DialectOf = None,
        request: RequestOf = None,
        force: bool = False,
    ) -> None:
        unknown = [n for n in names if n not in VARIANT_DIALECTS]
        if unknown:
            raise ChaosSpecError(f"unknown variant {unknown[0]!r}")
        order = [*SHAPE_STAGES, *TOKEN_STAGES]
        self._names = sorted(set(names), key=order.index)
        self._seed = seed
        self._dialect = dialect
        self._request = request
        self._force = force
        self._stages: list[Stage] | None = None
        self._newline = "\n"
        self._first = True
        self._bom = False
        self.not_applicable: dict[str, str] = {}
        """Variants left out: the request did not ask for what they need (name -> what)."""
        self.forced: dict[str, str] = {}
        """Variants served although the request did not ask for what they need."""

    @property
    def active(self) -> bool:
        """Whether any variant applies to this stream (False until its dialect is known)."""
        return bool(self._stages)

    def _start(self, dialect: str) -> None:
        request = self._request() if callable(self._request) else self._request
        ctx = Context(dialect, self._seed, request=request)
        stages: list[Stage] = []
        for name in self._names:
            cls = SHAPE_STAGES.get(name) or TOKEN_STAGES[name]
            if cls.dialect not in (None, dialect):
                continue
            needs = cls.requires
            if needs is not None and not needs.met(request):
                if not self._force:
                    self.not_applicable[name] = needs.what
                    continue
                self.forced[name] = needs.what
            stages.append(cls(ctx))
        if stages and dialect == "responses":
            stages.append(responses.Renumber(ctx))
        self._stages = stages

    def events(self, frame: bytes) -> list[Event]:
        """The events that replace one complete frame (none while variants hold some)."""
        if self._first:
            self._first = False
            if frame.startswith(BOM):  # the stream's BOM stays in front of whatever comes
                self._bom = True
                frame = frame[len(BOM) :]
        newline = newline_of(frame)
        if newline is not None:
            self._newline = newline
        event = parse_frame(frame)
        if self._stages is None and not event.opaque and event.data:
            known = self._dialect() if callable(self._dialect) else self._dialect
            if known in _KNOWN:
                self._start(known)
        if not self._stages:
            return [event]
        out = [event]
        for stage in self._stages:
            out = run_stage(stage, out)
        return out

    def end(self) -> list[Event]:
        """End of stream: what the variants still held."""
        out: list[Event] = []
        for stage in self._stages or ():
            out = [*run_stage(stage, out), *stage.end()]
        return out

    def serialize(self, events: Sequence[Event]) -> bytes:
        data = b"".join(serialize(e, self._newline) for e in events)
        if self._bom and data:
            self._bom = False
            data = BOM + data
        return data

    def rewrite(self, frame: bytes) -> bytes:
        """One complete frame in, its replacement out (possibly empty, for now)."""
        return self.serialize(self.events(frame))

    def flush(self) -> bytes:
        return self.serialize(self.end())

    def fields(self) -> dict[str, Any]:
        """For ``stream.summary``: the variants left out (``variants_not_applicable``) and
        those forced (``variants_forced``), each with what the request did not ask for."""
        out: dict[str, Any] = {}
        if self.not_applicable:
            out["variants_not_applicable"] = dict(self.not_applicable)
        if self.forced:
            out["variants_forced"] = dict(self.forced)
        return out


def apply_variants(
    names: Sequence[str],
    body: bytes,
    dialect: str,
    seed: int = 1,
    *,
    request: RequestOf = None,
    force: bool = True,
) -> list[tuple[bytes, str | None]]:
    """A whole stream of ``dialect`` through ``names``: each output frame and the variant
    it is the key chunk of (None for the others). ``b"".join`` of them is the stream.
    Every variant applies (``force``) unless told to judge by ``request``."""
    rewriter = ShapeRewriter(names, seed, dialect=dialect, request=request, force=force)
    out: list[tuple[bytes, str | None]] = []
    frames = split_frames(body)
    tail = b""
    if frames and not _FRAME_END.search(frames[-1][-4:]):
        tail = frames.pop()  # a partial frame: it goes out last, unchanged
    for frame in frames:
        for event in rewriter.events(frame):
            out.append((rewriter.serialize([event]), event.key))
    for event in rewriter.end():
        out.append((rewriter.serialize([event]), event.key))
    if tail:
        out.append((tail, None))
    return out
