"""Write planning: upstream chunks and frame ends in, the client's writes out.

The rule of this module: for every re-chunking strategy (and for ``passthrough`` and
``frames``) the joined output bytes equal the input bytes, ``b"".join(w.data for w in
writes) == stream``, counting the writes of every ``plan`` call and of ``flush``; only
the write boundaries move. Rewrites are the one exception, by design: they change bytes
but never the events a conforming parser dispatches. No write is ever empty.

Planners are pure and synchronous: the shell feeds each upstream chunk together with the
frame ends the reassembler found in it, then performs the returned writes (sleeping
``delay`` seconds before each, flushing each on its own). A write marked ``cut`` starts at
a cut that matters (:mod:`.sensitive`): before it the shell lets the client read all that
went before, so the cut reaches the client as a read boundary. Frame ends are absolute stream
offsets, each just after the blank line that ended a frame; a planner counts the bytes fed
to know where it is. Memory is bounded by ``max_hold``: a frame that never ends is written
out anyway rather than held without limit.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass, replace

from sse_proxy.errors import ChaosSpecError
from sse_proxy.names import MODES  # the one definition; re-exported here
from sse_proxy.rechunk.rewrites import apply_rewrites
from sse_proxy.rechunk.sensitive import CONTEXT, sensitive_positions
from sse_proxy.rechunk.shapes.rewriter import DialectOf, RequestOf, ShapeRewriter
from sse_proxy.rechunk.spec import ChaosSpec
from sse_proxy.rechunk.strategies import combined_cut_points, split_at
from sse_proxy.rechunk.timefaults import KindOf, Pause, Timeline

__all__ = [
    "DEFAULT_MAX_HOLD",
    "MODES",
    "ChaosPlanner",
    "FrameHolder",
    "FramesPlanner",
    "PassthroughPlanner",
    "Planner",
    "Write",
    "make_planner",
]

DEFAULT_MAX_HOLD = 1 << 20


@dataclass(frozen=True, slots=True)
class Write:
    """One write toward the client, made after sleeping ``delay`` seconds.

    ``cut``: the write starts at a cut the client must meet as a read boundary; the shell
    waits (bounded) until the client has read everything written before it. ``pause``: a
    fault in time the shell performs before the write (a stall, a drip's wait); unlike
    ``delay`` it is the test, not the harness's pacing.
    """

    data: bytes
    delay: float = 0.0
    cut: bool = False
    pause: Pause | None = None


def _new_ends(frame_ends: Sequence[int], lo: int, hi: int) -> list[int]:
    """The frame ends in ``(lo, hi]``, sorted; older ones are already written, later are a bug."""
    ends = sorted({e for e in frame_ends if e > lo})
    if ends and ends[-1] > hi:
        raise ValueError(f"frame end {ends[-1]} lies beyond the {hi} bytes fed so far")
    return ends


class Planner(ABC):
    """Turns the upstream byte stream into writes; one instance per stream."""

    @abstractmethod
    def plan(self, chunk: bytes, frame_ends: Sequence[int] = ()) -> list[Write]:
        """Feed the next upstream chunk and the frame ends found so far; get writes now due."""

    @abstractmethod
    def flush(self) -> list[Write]:
        """End of stream: every byte still held, as writes."""

    def end_pause(self) -> Pause | None:
        """After the last write: what the shell does before it ends the body (a linger)."""
        return None


class PassthroughPlanner(Planner):
    """Each upstream chunk is one write, at once: zero added buffering."""

    def plan(self, chunk: bytes, frame_ends: Sequence[int] = ()) -> list[Write]:
        """Forward the chunk as it is."""
        return [Write(chunk)] if chunk else []

    def flush(self) -> list[Write]:
        """Nothing is ever held."""
        return []


class FrameHolder:
    """Holds upstream bytes until frames end; the one place planners cut at frame ends.

    Frame ends come from the reassembler, settled: a blank line whose CR ended a read is
    reported only once the next byte (or the end of the stream) shows whether a LF belongs
    to it, so a held frame never ends between the CR and the LF of one CRLF. Nothing here
    re-derives line endings.
    """

    __slots__ = ("_fed", "_held", "_held_start")

    def __init__(self) -> None:
        self._held = bytearray()
        self._held_start = 0  # stream offset of the first held byte
        self._fed = 0

    @property
    def held(self) -> int:
        """Bytes held (a partial frame)."""
        return len(self._held)

    def add(self, chunk: bytes, frame_ends: Sequence[int]) -> list[bytes]:
        """Take the next chunk; return every frame that is now complete, in order."""
        self._held += chunk
        self._fed += len(chunk)
        ends = _new_ends(frame_ends, self._held_start, self._fed)
        if not ends:
            return []
        data = bytes(self._held)
        pieces = split_at(data, [e - self._held_start for e in ends])
        self._held = bytearray(pieces[-1])
        self._held_start = ends[-1]
        return pieces[:-1]

    def take_all(self) -> bytes:
        """Everything held, complete frame or not (memory bound reached, or end of stream)."""
        data = bytes(self._held)
        self._held = bytearray()
        self._held_start = self._fed
        return data


class FramesPlanner(Planner):
    """Whole frames only, one write per frame, bytes unchanged (for fragile clients).

    Held bytes past ``max_hold`` go out anyway (memory stays bounded, the client then sees
    a partial frame, like an unbuffered proxy would give it); ``flush`` writes the rest.
    """

    def __init__(self, max_hold: int = DEFAULT_MAX_HOLD) -> None:
        """``max_hold``: the most bytes held while waiting for a frame to end."""
        if max_hold < 0:
            raise ValueError("max_hold must be >= 0")
        self._max_hold = max_hold
        self._holder = FrameHolder()

    def plan(self, chunk: bytes, frame_ends: Sequence[int] = ()) -> list[Write]:
        """Hold the chunk; write each frame that is now complete."""
        writes = [Write(frame) for frame in self._holder.add(chunk, frame_ends)]
        if self._holder.held > self._max_hold:
            writes += self.flush()
        return writes

    def flush(self) -> list[Write]:
        """Write whatever is held, complete frame or not."""
        data = self._holder.take_all()
        return [Write(data)] if data else []


class ChaosPlanner(Planner):
    """Adversarial writes from a :class:`ChaosSpec`, reproducible from its seed.

    Re-chunking alone cuts each chunk as it arrives (no holding). Rewrites and variants
    need whole frames and ``coalesce`` needs several, so any of them makes the planner hold
    bytes until frame ends, as :class:`FramesPlanner` does, then reshape (the variants,
    :mod:`sse_proxy.rechunk.shapes`), rewrite, group and cut. Cuts,
    rewrites and delays draw from three generators seeded from the spec's seed, so adding
    a delay does not move a cut. ``recorded_cuts`` lists the absolute output offset at
    which each write ended (the last one is the total written), for reproduction reports.

    A write boundary carries a cut (``Write.cut`` on the write after it) when a
    re-chunking strategy made it, or an upstream chunk ended there, and it lies where a
    cut matters (:func:`~sse_proxy.rechunk.sensitive.sensitive_positions`); a ``cut:N``
    offset always does. Only those writes get the jitter delay: ``bytewise`` writes every
    byte on its own, but waits only where waiting tests something.
    """

    def __init__(
        self,
        spec: ChaosSpec,
        max_hold: int = DEFAULT_MAX_HOLD,
        *,
        dialect: DialectOf = None,
        request: RequestOf = None,
        kind: KindOf = None,
    ) -> None:
        """``max_hold``: the most bytes held (frames waiting, plus a partial frame);
        ``dialect``: the stream's, for the variants (a function: the observer's detection);
        ``request``: the request that asked for the stream, for the variants that only
        some requests make possible (unless ``spec.force``); ``kind``: its dialect's facts,
        for a fault in time (:mod:`.timefaults`)."""
        if max_hold < 0:
            raise ValueError("max_hold must be >= 0")
        self.spec = spec
        self.recorded_cuts: list[int] = []
        self._max_hold = max_hold
        self._cut_rng = random.Random(f"cuts:{spec.seed}")
        self._rewrite_rng = random.Random(f"rewrites:{spec.seed}")
        self._delay_rng = random.Random(f"delay:{spec.seed}")
        self._rechunkers = spec.rechunkers
        self._rewrites = spec.rewrites
        self.shapes = (
            ShapeRewriter(
                spec.variants, spec.seed, dialect=dialect, request=request, force=spec.force
            )
            if spec.variants
            else None
        )
        """The stream's shape and token variants (None: the spec names none)."""
        self._timeline = None if spec.fault is None else Timeline(spec.fault, spec.timing, kind)
        self._hold = (
            bool(self._rewrites)
            or spec.coalesce
            or self.shapes is not None
            or self._timeline is not None
        )
        self._group_limit = spec.frames_per_write if spec.coalesce else 1
        self._holder = FrameHolder()
        self._fed = 0
        self._out = 0
        self._group: list[bytes] = []
        self._group_bytes = 0
        self._first = True
        # After a forced write the held bytes start mid-frame: pass them on unrewritten.
        self._mid_frame = False
        self._tail = b""  # the last bytes written, to judge the next boundary
        self._at = spec.at
        self.cuts = 0
        """Writes marked ``cut`` so far."""

    def plan(self, chunk: bytes, frame_ends: Sequence[int] = ()) -> list[Write]:
        """Cut the chunk now, or hold it until the frames it completes can be handled."""
        start = self._fed
        self._fed += len(chunk)
        if not self._hold:
            ends = _new_ends(frame_ends, start, self._fed)
            return self._emit(chunk, [e - start for e in ends])
        writes: list[Write] = []
        for frame in self._holder.add(chunk, frame_ends):
            writes += self._take_frame(frame)
        if self._holder.held + self._group_bytes > self._max_hold:
            writes += self._emit_group()
            if self._holder.held > self._max_hold:
                writes += self._flush_shapes() + self._emit_group() + self._emit_held()
                self._mid_frame = True
        return writes

    def flush(self) -> list[Write]:
        """Write what the variants held, the frames waiting to be coalesced, then the
        partial rest, unrewritten."""
        return self._flush_shapes() + self._emit_group() + self._emit_held()

    def end_pause(self) -> Pause | None:
        """The fault's pause before the body ends (a linger), if it has one."""
        return None if self._timeline is None else self._timeline.end()

    def _flush_shapes(self) -> list[Write]:
        """What the variants still hold, as frames (before any partial rest)."""
        held = self.shapes.flush() if self.shapes is not None else b""
        if not held:
            return []
        self._mid_frame = False
        return self._take_frame(held, shaped=True)

    def _take_frame(self, frame: bytes, *, shaped: bool = False) -> list[Write]:
        out = frame
        if self._mid_frame:
            self._mid_frame = False  # this frame end completes the frame written in part
        else:
            if self.shapes is not None and not shaped:
                out = self.shapes.rewrite(frame)
                if not out:
                    return []  # held by a variant (it comes out with a later frame)
            if self._rewrites:
                out = apply_rewrites(self._rewrites, out, self._rewrite_rng, first=self._first)
        self._first = False
        if self._timeline is not None and out:
            return self._timed(out)
        if out:
            self._group.append(out)
            self._group_bytes += len(out)
        if len(self._group) >= self._group_limit:
            return self._emit_group()
        return []

    def _timed(self, frame: bytes) -> list[Write]:
        """A frame through the fault in time: what waits for a pause goes out on its own,
        the pause on its first write (what is grouped before it goes first)."""
        assert self._timeline is not None
        writes: list[Write] = []
        for piece, pause in self._timeline.frame(frame):
            if pause is None:
                self._group.append(piece)
                self._group_bytes += len(piece)
                if len(self._group) >= self._group_limit:
                    writes += self._emit_group()
                continue
            writes += self._emit_group()
            paused = self._emit(piece, (len(piece),) if piece == frame else ())
            if paused:
                paused[0] = replace(paused[0], pause=pause)
            writes += paused
        return writes

    def _emit_group(self) -> list[Write]:
        if not self._group:
            return []
        ends: list[int] = []
        total = 0
        for frame in self._group:
            total += len(frame)
            ends.append(total)
        data = b"".join(self._group)
        self._group = []
        self._group_bytes = 0
        return self._emit(data, ends)

    def _emit_held(self) -> list[Write]:
        data = self._holder.take_all()
        if data:
            self._first = False
        return self._emit(data, ())

    def _emit(self, data: bytes, frame_ends: Sequence[int]) -> list[Write]:
        """Cut ``data`` by every active re-chunker, mark the cuts that count, time them."""
        if not data:
            return []
        cuts = combined_cut_points(
            self._rechunkers, data, self._cut_rng, k=self.spec.k, frame_ends=frame_ends
        )
        base = self._out
        counted: set[int] = set()
        if self._rechunkers:
            # Where the re-chunkers cut, and where this data starts (an upstream chunk's
            # end, or a frame end after held frames): the boundaries the client meets.
            sensitive = sensitive_positions(self._tail, data)
            counted.update(c for c in cuts if c in sensitive)
            if base and 0 in sensitive:
                counted.add(0)
        if self._at:
            end = base + len(data)
            fixed = [a - base for a in self._at if base <= a < end]
            counted.update(fixed)
            if fixed:
                cuts = sorted({*cuts, *(c for c in fixed if c)})
        if not base:
            counted.discard(0)  # the stream's first write has nothing before it
        writes: list[Write] = []
        start = 0
        for piece in split_at(data, cuts):
            cut = start in counted
            delay = 0.0
            if cut:
                self.cuts += 1
                if self.spec.delay_ms > 0:
                    delay = self._delay_rng.uniform(0.0, self.spec.delay_ms) / 1000.0
            start += len(piece)
            self._out += len(piece)
            self.recorded_cuts.append(self._out)
            writes.append(Write(piece, delay, cut))
        self._tail = (self._tail + data[-CONTEXT:])[-CONTEXT:]
        return writes


def make_planner(
    mode: str,
    spec: ChaosSpec | None,
    *,
    max_hold: int = DEFAULT_MAX_HOLD,
    dialect: DialectOf = None,
    request: RequestOf = None,
    kind: KindOf = None,
) -> Planner:
    """The planner for a stream in ``mode`` (passthrough, frames or chaos); ``dialect``
    and ``request`` for the shape and token variants, ``kind`` for a fault in time (see
    :class:`ChaosPlanner`)."""
    if mode == "passthrough":
        return PassthroughPlanner()
    if mode == "frames":
        return FramesPlanner(max_hold)
    if mode == "chaos":
        if spec is None:
            raise ChaosSpecError("chaos mode needs a chaos spec (strategy and seed)")
        return ChaosPlanner(spec, max_hold, dialect=dialect, request=request, kind=kind)
    raise ChaosSpecError(f"unknown mode {mode!r}; valid: {', '.join(MODES)}")
