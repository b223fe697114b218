"""Faults in time: what a connection does over time, not what its bytes are.

The bytes of a stream can be whole and the stream still hang a client: text that stops
while comments or pings keep the connection busy (a read timeout never fires), text that
stops with nothing at all, a body that stays open after its terminal marker, text that
keeps coming a few bytes a second. Each fault is named once here (the fixtures' vocabulary,
:mod:`sse_proxy.tools.fixtures.faults`, lists them beside the faults in the bytes) and
performed by two shells that both use :class:`Timeline`: the mock upstream
(``--fault stall_keepalive``) and the chaos proxy (``X-SSE-Proxy-Chaos: fault=...``).

A timeline is pure: complete frames in, the frames out with the :class:`Pause` the shell
makes before each, and at the end the pause before the body ends. Where a fault begins is
a rule of the bytes, the same in both shells: after the :data:`TEXT_BEFORE`-th event that
carries text, or just before the terminal marker's frame if that comes first, so a client
always has some text and never the end. A JSON-RPC stream (MCP's tool call) carries its text
whole in its response, the end: there the notifications before it (progress, log messages)
count instead, and the fault begins after the :data:`NOTES_BEFORE`-th, among them.
``linger`` begins after the last frame.

Durations are :class:`TimeSettings`, checked here once for every tool (a negative, NaN,
infinite or absurd one is refused with a one-line ``ValueError``). A fault that acts on
the connection itself (a drop) fits the same pattern: a :class:`Pause` with an action the
shells perform.

A drop (:data:`DROPS`) is such a fault: the connection is cut inside the event after a
seeded text event (``Pause.action`` :data:`DROP`), and what a client does next is its
resumption. Each stream of a conversation is an *attempt* (the first request 0, each
reconnect one more): ``drop`` cuts attempt 0, ``drop_twice`` attempts 0 and 1, and
:func:`resume_answer` says how a shell answers a reconnect instead of streaming (a 204, a
cursor too old). The cut falls after the frame's first line, so an ``id:`` of the cut event
has arrived and its event has not: a client that takes the id before the event is
dispatched resumes past what it had. The drops that test a block (an invalid or large
``retry``, an ``id`` holding NULL, id-less events) write it and cut right after it, between
events, so nothing after it hides what a client made of it. The blocks dispatch nothing in
any dialect, except the id-less events (empty data), which only raw text takes as no text.

In a JSON-RPC stream (MCP) the notifications stand for text here too: the first cut falls
after :data:`NOTES_BEFORE` to twice as many of them, so the response and some notifications
are left to resume; a later cut (``drop_twice``'s) falls inside the first event of the
resumed stream, before any new id, so the client's next reconnect can only name the cursor
it resumed with.
"""

from __future__ import annotations

import json
import math
import random
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Final

from sse_proxy.rechunk.shapes.events import parse_frame
from sse_proxy.rechunk.shapes.tokens import slot_of

__all__ = [
    "CHAOS_FAULTS",
    "COMMENT_KEEPALIVE",
    "DAY",
    "DEFAULT_TIMING",
    "DROP",
    "DROPS",
    "IDLESS",
    "INVALID_RETRY",
    "MOCK_DROPS",
    "NOTES_BEFORE",
    "NUL_ID",
    "SETTINGS",
    "STALLS",
    "TEXT_BEFORE",
    "TIME_FAULTS",
    "WAIT",
    "KindOf",
    "Pause",
    "Setting",
    "StreamKind",
    "TimeSettings",
    "Timeline",
    "cuts",
    "drop_block",
    "resume_answer",
]

STALLS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "stall_keepalive": "some text, then only keep-alive comments (the API's ping "
        "events where it has them: Anthropic) every few seconds, for longer than a client "
        "should wait; then the rest",
        "stall_silent": "some text, then nothing at all for longer than a client should "
        "wait; then the rest",
        "linger": "the whole answer and its terminal marker, then the body stays open",
        "drip": "some text, then the rest of the answer a few bytes a second",
    }
)
"""The faults in time that keep the connection: a stall, a linger, a drip."""

DROPS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "drop": "the connection is cut once, inside the event after a seeded text event; "
        "the resumed stream runs to the end",
        "drop_twice": "cut as drop, and again inside the first resumed stream",
        "drop_start": "cut inside the first text event, before any id: the client has no "
        "cursor and gets the whole stream again",
        "drop_primed": "a priming event (an id, empty data) first, then the cut inside the "
        "first text event: the client resumes from the priming id",
        "drop_retry_invalid": "an invalid retry (retry: 10ms), which a client ignores, then the "
        "cut, between events",
        "drop_retry_large": "retry set large (retry_large), then the cut, between events: "
        "the client waits that long before it reconnects",
        "drop_id_nul": "an id holding NULL, which a client ignores (it resumes from the id "
        "before), then the cut, between events",
        "drop_idless": "id-less events (empty data) after the last id, then the cut, between "
        "events: the last id carries over them",
        "drop_204": "as drop, and the reconnect is answered 204 No Content: the client must stop",
        "drop_too_old": "as drop, and the resume is refused as too old (the API's error): "
        "the client must report failure",
    }
)
"""The drops: the connection is cut mid-stream, and the client must resume."""

TIME_FAULTS: Final[Mapping[str, str]] = MappingProxyType({**STALLS, **DROPS})
"""Every fault in time, by name: what the client sees."""

MOCK_DROPS: Final[frozenset[str]] = frozenset({"drop_primed", "drop_idless", "drop_too_old"})
"""The drops only a stream's own server can make: its priming id, its id-less events, its
API's error for a cursor too old (a proxy in front of another server cannot)."""

CHAOS_FAULTS: Final[tuple[str, ...]] = tuple(f for f in TIME_FAULTS if f not in MOCK_DROPS)
"""The faults in time a proxy performs (the chaos header's ``fault=``, ``--chaos-fault``)."""

WAIT: Final = "wait"
DROP: Final = "drop"
"""A :class:`Pause`'s actions: wait (a stall...), or cut the connection (a drop)."""
INVALID_RETRY: Final = b"retry: 10ms\n\n"
"""``drop_retry_invalid``'s block: not all digits, so a client ignores it (a loose one
reconnects after 10 ms)."""
NUL_ID: Final = b"id: x\x00y\n\n"
"""``drop_id_nul``'s block: an id holding NULL, which a client ignores."""
IDLESS: Final = b"data:\n\ndata:\n\n"

TEXT_BEFORE: Final = 8
"""Events carrying text that go out before a stall or a drip begins."""
NOTES_BEFORE: Final = 2
"""In a JSON-RPC stream: notifications that go out before a stall or a drip begins (a long
tool call's progress: some, then the fault, then the rest and the response)."""
DAY: Final = 86_400.0
"""No duration is longer (a longer one is a typo, not a test)."""
COMMENT_KEEPALIVE: Final = b": keep-alive\n\n"
_DRIP_TICK: Final = 0.05  # at most 20 writes a second, however fast the drip


def _notification(data: str) -> bool:
    """Whether ``data`` is a JSON-RPC notification (its frame's ids are not looked at)."""
    if not data.startswith("{"):
        return False
    try:
        obj = json.loads(data)
    except (ValueError, RecursionError):
        return False
    return type(obj) is dict and type(obj.get("method")) is str and "id" not in obj


@dataclass(frozen=True, slots=True)
class Setting:
    """One duration or rate of the time faults: its name in every tool, its unit, bounds."""

    name: str
    unit: str
    low: float
    high: float
    low_open: bool
    help: str

    def check(self, value: float) -> float:
        """``value`` as a float, or a one-line ``ValueError``."""
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise ValueError(f"{self.name} must be a number of {self.unit}")
        number = float(value)
        above = number > self.low if self.low_open else number >= self.low
        if not math.isfinite(number) or not above or number > self.high:
            low = f"above {self.low:g}" if self.low_open else f"{self.low:g} or more"
            raise ValueError(
                f"{self.name} must be {low} and at most {self.high:g} {self.unit}, not {value!r}"
            )
        return number

    def parse(self, text: str) -> float:
        """``text`` (a header value, a flag) as a checked number; ``ValueError`` else."""
        try:
            value = float(text.strip())
        except ValueError:
            raise ValueError(f"{self.name} must be a number of {self.unit}, not {text!r}") from None
        return self.check(value)


SETTINGS: Final[Mapping[str, Setting]] = MappingProxyType(
    {
        s.name: s
        for s in (
            Setting("stall", "seconds", 0.0, DAY, False, "how long a stall lasts"),
            Setting(
                "keepalive_every",
                "seconds",
                0.01,
                DAY,
                False,
                "seconds between the keep-alives of stall_keepalive",
            ),
            Setting(
                "linger",
                "seconds",
                0.0,
                DAY,
                False,
                "how long the body stays open after the terminal marker",
            ),
            Setting(
                "drip_rate",
                "bytes per second",
                0.0,
                10_000_000.0,
                True,
                "bytes a second of a drip",
            ),
            Setting(
                "retry_large",
                "seconds",
                0.0,
                DAY,
                False,
                "the reconnection time drop_retry_large asks for (its retry: field)",
            ),
        )
    }
)
"""The settings, by the name every tool spells them with (``--stall``, ``stall=``...)."""


@dataclass(frozen=True, slots=True)
class TimeSettings:
    """How long the faults last: ``stall`` and ``linger`` in seconds, ``keepalive_every``
    between keep-alives, ``drip_rate`` in bytes per second, ``retry_large`` the reconnection
    time of ``drop_retry_large`` in seconds."""

    stall: float = 60.0
    keepalive_every: float = 5.0
    linger: float = 60.0
    drip_rate: float = 8.0
    retry_large: float = 6.0

    def __post_init__(self) -> None:
        for f in fields(self):
            object.__setattr__(self, f.name, SETTINGS[f.name].check(getattr(self, f.name)))

    def changed(self, values: Mapping[str, str]) -> TimeSettings:
        """These settings with ``values`` (setting name -> text) parsed in; ValueError."""
        if not values:
            return self
        unknown = sorted(set(values) - set(SETTINGS))
        if unknown:
            raise ValueError(f"unknown time setting {unknown[0]!r}; valid: {', '.join(SETTINGS)}")
        current = {f.name: getattr(self, f.name) for f in fields(self)}
        current.update({k: SETTINGS[k].parse(v) for k, v in values.items()})
        return TimeSettings(**current)

    def differing(self) -> dict[str, float]:
        """The settings that are not the defaults (for a canonical header value)."""
        return {
            f.name: getattr(self, f.name)
            for f in fields(self)
            if getattr(self, f.name) != getattr(DEFAULT_TIMING, f.name)
        }


DEFAULT_TIMING: Final = TimeSettings()


@dataclass(frozen=True, slots=True)
class Pause:
    """What the shell does before a write (or before the body ends): wait ``seconds``,
    writing ``keepalive`` every ``every`` seconds meanwhile (``b""``: nothing at all); or,
    ``action`` :data:`DROP`, cut the connection (nothing more is written).

    ``began``: the fault begins with this pause (a harness starts its patience here).
    """

    seconds: float
    keepalive: bytes = b""
    every: float = 0.0
    began: bool = False
    action: str = WAIT


def cuts(fault: str, attempt: int) -> bool:
    """Whether attempt ``attempt`` of a conversation (0: its first request) is cut."""
    return fault in DROPS and attempt < (2 if fault == "drop_twice" else 1)


def resume_answer(fault: str | None, attempt: int) -> str | None:
    """How a shell answers attempt ``attempt`` instead of streaming it: ``no_content`` (a
    204), ``too_old`` (the API's cursor-too-old error), or None (it streams)."""
    if attempt < 1:
        return None
    return {"drop_204": "no_content", "drop_too_old": "too_old"}.get(fault or "")


def drop_block(fault: str, settings: TimeSettings) -> bytes:
    """What a drop writes just before its cut (``b""``: nothing)."""
    if fault == "drop_retry_invalid":
        return INVALID_RETRY
    if fault == "drop_retry_large":
        return b"retry: %d\n\n" % round(settings.retry_large * 1000)
    if fault == "drop_id_nul":
        return NUL_ID
    if fault == "drop_idless":
        return IDLESS
    return b""


def _cut_after(seed: int, attempt: int, rpc: bool = False) -> int:
    """The text events before a cut: seeded, from :data:`TEXT_BEFORE` to three times it; in
    a JSON-RPC stream from :data:`NOTES_BEFORE` notifications to twice as many on the first
    attempt, none on a later one (0: the cut falls inside the first)."""
    rng = random.Random(seed * 1_000_003 + attempt)
    if rpc:
        return 0 if attempt else rng.randint(NOTES_BEFORE, 2 * NOTES_BEFORE)
    return rng.randint(TEXT_BEFORE, 3 * TEXT_BEFORE)


def _split(frame: bytes) -> tuple[bytes, bytes]:
    """A frame cut after its first line: its ``id:`` (or ``event:``) line in, its data out."""
    end = frame.find(b"\n") + 1
    return frame[:end], frame[end:]


@dataclass(frozen=True, slots=True)
class StreamKind:
    """What a timeline needs to know of a stream's dialect (the shell knows the dialects):
    its name, the bytes found in its terminal frame, its own ping event (None: comments),
    and whether it is JSON-RPC (its notifications stand for text)."""

    dialect: str
    terminal: bytes | None = None
    ping: bytes | None = None
    rpc: bool = False

    @property
    def keepalive(self) -> bytes:
        """What keeps the connection busy: the dialect's ping event, else a comment."""
        return self.ping if self.ping is not None else COMMENT_KEEPALIVE


KindOf = StreamKind | Callable[[], StreamKind | None] | None
"""The stream's kind, or a function that says it once the dialect is known."""


class Timeline:
    """One stream's fault in time: complete frames in, ``(frame, pause before it)`` out.

    ``kind``: the stream's dialect facts, or a function that says them once known (the
    proxy's detection). Nothing is held: each frame comes out at once, a stall's pause in front of
    the first frame after the text the fault lets through, a drip's frames cut into pieces
    a pause apart. :meth:`end` is the pause before the body ends (``linger``, or a stall
    whose stream ended before anything followed the text).
    """

    __slots__ = (
        "_armed",
        "_attempt",
        "_cut",
        "_fault",
        "_kind",
        "_seed",
        "_settings",
        "_texts",
        "_upto",
        "began",
    )

    def __init__(
        self,
        fault: str,
        settings: TimeSettings,
        kind: KindOf,
        *,
        seed: int = 0,
        attempt: int = 0,
    ) -> None:
        """``seed`` and ``attempt`` place a drop: which text event it follows, in which
        stream of the conversation (see :func:`cuts`)."""
        if fault not in TIME_FAULTS:
            raise ValueError(f"unknown time fault {fault!r}; valid: {', '.join(TIME_FAULTS)}")
        self._fault = fault
        self._settings = settings
        self._kind = kind
        self._texts = 0
        self._armed = False  # the text is out: the next frame begins the fault
        self.began = False
        self._cut = cuts(fault, attempt)
        self._seed = seed
        self._attempt = attempt
        start = fault in ("drop_start", "drop_primed")
        self._upto = 0 if start or not self._cut else -1  # -1: placed once the kind is known

    @property
    def fault(self) -> str:
        return self._fault

    def _known(self) -> StreamKind | None:
        kind = self._kind
        return kind() if callable(kind) else kind

    @property
    def dropping(self) -> bool:
        """Whether this stream is cut (a drop fault, on an attempt it cuts)."""
        return self._cut

    def frame(self, frame: bytes) -> list[tuple[bytes, Pause | None]]:
        """One complete frame: the pieces to write and the pause before each."""
        if self._fault in DROPS:
            return self._drop(frame) if frame else []
        if self._fault == "linger" or not frame:
            return [(frame, None)] if frame else []
        if self.began:  # a stall is over (the rest goes out), a drip goes on
            return self._drip(frame) if self._fault == "drip" else [(frame, None)]
        if not self._armed:
            if self._terminal(frame):
                self._armed = True  # the end comes after the stall, never before it
            elif self._carries_text(frame):
                self._texts += 1
                kind = self._known()
                if self._texts >= (NOTES_BEFORE if kind is not None and kind.rpc else TEXT_BEFORE):
                    self._armed = True
                return [(frame, None)]
            else:
                return [(frame, None)]
        self.began = True
        if self._fault == "drip":
            return self._drip(frame, first=True)
        return [(frame, self._stall())]

    def end(self) -> Pause | None:
        """The pause before the body ends: a linger, a stall nothing came after, or a drop
        whose stream ended before it fell (the body is cut instead of ended)."""
        if self._fault in DROPS:
            if self._cut and not self.began:
                self.began = True
                return Pause(0.0, began=True, action=DROP)
            return None
        if self._fault == "linger":
            self.began = True
            return Pause(self._settings.linger, began=True)
        if self._armed and not self.began and self._fault != "drip":
            self.began = True
            return self._stall()
        return None

    def _drop(self, frame: bytes) -> list[tuple[bytes, Pause | None]]:
        """A drop's frame: through, or cut after its first line (the fault's block first)."""
        if self.began or not self._cut:
            return [(frame, None)]
        if self._upto < 0:
            kind = self._known()
            rpc = kind is not None and kind.rpc
            self._upto = _cut_after(self._seed, self._attempt, rpc)
        if not self._armed:
            if self._terminal(frame):
                self._armed = True
            elif self._carries_text(frame):
                self._texts += 1
                if self._upto:
                    self._armed = self._texts >= self._upto
                    return [(frame, None)]
                self._armed = True  # a drop at the start cuts the first text event
            else:
                return [(frame, None)]
        self.began = True
        cut = Pause(0.0, began=True, action=DROP)
        block = drop_block(self._fault, self._settings)
        if block:  # the block is the test: the cut follows it, between events
            return [(block, None), (frame, cut)]
        head, tail = _split(frame)
        return [(head, None), (tail, cut)]

    def _stall(self) -> Pause:
        s = self._settings
        if self._fault == "stall_keepalive":
            kind = self._known()
            ping = COMMENT_KEEPALIVE if kind is None else kind.keepalive
            return Pause(s.stall, ping, s.keepalive_every, began=True)
        return Pause(s.stall, began=True)

    def _drip(self, frame: bytes, *, first: bool = False) -> list[tuple[bytes, Pause | None]]:
        rate = self._settings.drip_rate
        step = max(1, math.floor(rate * _DRIP_TICK))
        out: list[tuple[bytes, Pause | None]] = []
        for i in range(0, len(frame), step):
            piece = frame[i : i + step]
            out.append((piece, Pause(len(piece) / rate, began=first and not i)))
        return out

    def _terminal(self, frame: bytes) -> bool:
        kind = self._known()
        return kind is not None and kind.terminal is not None and kind.terminal in frame

    def _carries_text(self, frame: bytes) -> bool:
        kind = self._known()
        if kind is None:
            return False
        event = parse_frame(frame)
        if kind.rpc:  # a notification: an object with a method and no id
            return _notification(event.data)
        slot = slot_of(event, kind.dialect)
        return slot is not None and bool(slot.text)
