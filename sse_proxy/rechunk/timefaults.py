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
always has some text and never the end. ``linger`` begins after the last frame.

Durations are :class:`TimeSettings`, checked here once for every tool (a negative, NaN,
infinite or absurd one is refused with a one-line ``ValueError``). A fault that acts on
the connection itself (a drop) fits the same pattern: a :class:`Pause` with an action the
shells perform.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, fields
from types import MappingProxyType
from typing import Final

from sse_proxy.rechunk.shapes.events import parse_frame
from sse_proxy.rechunk.shapes.tokens import slot_of

__all__ = [
    "COMMENT_KEEPALIVE",
    "DAY",
    "DEFAULT_TIMING",
    "SETTINGS",
    "TEXT_BEFORE",
    "TIME_FAULTS",
    "KindOf",
    "Pause",
    "Setting",
    "StreamKind",
    "TimeSettings",
    "Timeline",
]

TIME_FAULTS: Final[Mapping[str, str]] = MappingProxyType(
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
"""Every fault in time, by name: what the client sees."""

TEXT_BEFORE: Final = 8
"""Events carrying text that go out before a stall or a drip begins."""
DAY: Final = 86_400.0
"""No duration is longer (a longer one is a typo, not a test)."""
COMMENT_KEEPALIVE: Final = b": keep-alive\n\n"
_DRIP_TICK: Final = 0.05  # at most 20 writes a second, however fast the drip


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
        )
    }
)
"""The settings, by the name every tool spells them with (``--stall``, ``stall=``...)."""


@dataclass(frozen=True, slots=True)
class TimeSettings:
    """How long the faults last: ``stall`` and ``linger`` in seconds, ``keepalive_every``
    between keep-alives, ``drip_rate`` in bytes per second."""

    stall: float = 60.0
    keepalive_every: float = 5.0
    linger: float = 60.0
    drip_rate: float = 8.0

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
    writing ``keepalive`` every ``every`` seconds meanwhile (``b""``: nothing at all).

    ``began``: the fault begins with this pause (a harness starts its patience here).
    """

    seconds: float
    keepalive: bytes = b""
    every: float = 0.0
    began: bool = False


@dataclass(frozen=True, slots=True)
class StreamKind:
    """What a timeline needs to know of a stream's dialect (the shell knows the dialects):
    its name, the bytes found in its terminal frame, its own ping event (None: comments)."""

    dialect: str
    terminal: bytes | None = None
    ping: bytes | None = None

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

    __slots__ = ("_armed", "_fault", "_kind", "_settings", "_texts", "began")

    def __init__(self, fault: str, settings: TimeSettings, kind: KindOf) -> None:
        if fault not in TIME_FAULTS:
            raise ValueError(f"unknown time fault {fault!r}; valid: {', '.join(TIME_FAULTS)}")
        self._fault = fault
        self._settings = settings
        self._kind = kind
        self._texts = 0
        self._armed = False  # the text is out: the next frame begins the fault
        self.began = False

    @property
    def fault(self) -> str:
        return self._fault

    def _known(self) -> StreamKind | None:
        kind = self._kind
        return kind() if callable(kind) else kind

    def frame(self, frame: bytes) -> list[tuple[bytes, Pause | None]]:
        """One complete frame: the pieces to write and the pause before each."""
        if self._fault == "linger" or not frame:
            return [(frame, None)] if frame else []
        if self.began:  # a stall is over (the rest goes out), a drip goes on
            return self._drip(frame) if self._fault == "drip" else [(frame, None)]
        if not self._armed:
            if self._terminal(frame):
                self._armed = True  # the end comes after the stall, never before it
            elif self._carries_text(frame):
                self._texts += 1
                if self._texts >= TEXT_BEFORE:
                    self._armed = True
                return [(frame, None)]
            else:
                return [(frame, None)]
        self.began = True
        if self._fault == "drip":
            return self._drip(frame, first=True)
        return [(frame, self._stall())]

    def end(self) -> Pause | None:
        """The pause before the body ends: a linger, or a stall nothing came after."""
        if self._fault == "linger":
            self.began = True
            return Pause(self._settings.linger, began=True)
        if self._armed and not self.began and self._fault != "drip":
            self.began = True
            return self._stall()
        return None

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
        slot = slot_of(parse_frame(frame), kind.dialect)
        return slot is not None and bool(slot.text)
