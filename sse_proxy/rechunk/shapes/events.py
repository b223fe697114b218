"""What the shape and token variants work on: one stream's events, parsed once, re-serialised.

A variant is a :class:`Stage`: it takes one event at a time and returns the events that
replace it (none, while it holds some back; several, when it inserts), and at the end of
the stream whatever it still holds. An event it does not touch keeps its exact bytes
(``raw``), so a variant never disturbs what it is not about: an escape, a CRLF, an ``id``.
A frame that is not a plain ``event:``/``data:`` block (comments, ``id``, ``retry``) is
opaque and passes every stage unchanged; so does everything until the stream's dialect is
known, and every stage of another dialect.

``key`` marks an event a variant made that is *the* chunk of the variant (the Azure first
chunk, the first ``thinking_delta``): `test-client` shows it as the chunk that broke a
client.
"""

from __future__ import annotations

import json
import random
import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Any, ClassVar

from sse_proxy.rechunk.shapes.requires import Request, Requires

__all__ = ["BOM", "Context", "Event", "Stage", "dumps", "parse_frame", "serialize"]

BOM = b"\xef\xbb\xbf"
_LINE = re.compile(r"\r\n|\r|\n")
_FIRST_END = re.compile(rb"\r\n|\r|\n")


def dumps(obj: object) -> str:
    """JSON as the APIs send it: UTF-8 text unescaped, compact separators."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


@dataclass(slots=True)
class Event:
    """One event of the stream. ``obj`` is its data parsed as a JSON object (None: not
    one); ``raw`` its original bytes while it is unchanged; ``opaque`` frames are never
    changed (they are not a plain event)."""

    etype: str | None
    data: str
    obj: Any = None
    raw: bytes | None = None
    opaque: bool = False
    key: str | None = None
    comment: str | None = None
    """A comment-only frame's text (``: text``)."""

    @classmethod
    def of(cls, obj: dict[str, Any], etype: str | None = None, key: str | None = None) -> Event:
        """A new event carrying ``obj`` (with ``etype`` as its event name, if any)."""
        return cls(etype, dumps(obj), obj, key=key)

    @classmethod
    def comment_frame(cls, text: str, key: str | None = None) -> Event:
        """A comment-only frame (``: text``), as servers send to keep connections open."""
        return cls(None, "", opaque=True, key=key, comment=text)

    def changed(self, obj: dict[str, Any], key: str | None = None) -> Event:
        """This event carrying ``obj`` instead (its bytes are rebuilt)."""
        return replace(self, data=dumps(obj), obj=obj, raw=None, key=key or self.key)

    def text_changed(self, data: str, key: str | None = None) -> Event:
        """This (raw text) event carrying ``data`` instead."""
        return replace(self, data=data, raw=None, key=key or self.key)

    @property
    def kind(self) -> str | None:
        """The JSON ``type`` field, else the event name."""
        if type(self.obj) is dict:
            kind = self.obj.get("type")
            if type(kind) is str:
                return kind
        return self.etype


def parse_frame(frame: bytes) -> Event:
    """One complete frame (its blank line included) as an :class:`Event`."""
    try:
        text = frame.decode("utf-8")
    except UnicodeDecodeError:
        return Event(None, "", raw=frame, opaque=True)
    etype: str | None = None
    data: list[str] = []
    plain = True
    for line in _LINE.split(text):
        if not line:
            continue
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "data":
            data.append(value)
        elif name == "event":
            etype = value
        else:
            plain = False  # a comment, id, retry or unknown field: leave the frame alone
    if not plain or not data:
        return Event(etype, "\n".join(data), raw=frame, opaque=True)
    joined = "\n".join(data)
    obj: Any = None
    if joined.startswith("{"):
        try:
            obj = json.loads(joined)
        except ValueError:
            obj = None
        if type(obj) is not dict:
            obj = None
    return Event(etype, joined, obj, raw=frame)


def serialize(event: Event, newline: str) -> bytes:
    """The event's frame: its own bytes if unchanged, else built with ``newline``."""
    if event.raw is not None:
        return event.raw
    if event.comment is not None:
        return f": {event.comment}{newline}{newline}".encode()
    lines = [] if event.etype is None else [f"event: {event.etype}"]
    lines.extend(f"data: {line}" for line in event.data.split("\n"))
    return (newline.join(lines) + newline + newline).encode()


def newline_of(frame: bytes) -> str | None:
    """The line ending a frame uses (its first), or None if it has none."""
    match = _FIRST_END.search(frame)
    return None if match is None else match.group().decode()


@dataclass(slots=True)
class Context:
    """What the stages of one stream share: its dialect, a seeded generator per stage, and
    the request that asked for the stream (None: not known)."""

    dialect: str
    seed: int
    rngs: dict[str, random.Random] = field(default_factory=dict)
    request: Request | None = None

    def rng(self, name: str) -> random.Random:
        found = self.rngs.get(name)
        if found is None:
            found = self.rngs[name] = random.Random(f"shapes:{name}:{self.seed}")
        return found


class Stage:
    """One variant over one stream. Subclasses override :meth:`take` and maybe :meth:`end`;
    ``dialect`` is the dialect it applies to (None: every dialect); ``requires``, what a
    request must ask for before a provider sends the shape (None: providers send it
    whatever the request says)."""

    name: ClassVar[str] = ""
    dialect: ClassVar[str | None] = None
    requires: ClassVar[Requires | None] = None

    def __init__(self, ctx: Context) -> None:
        self.ctx = ctx
        self.marked = False

    def key(self) -> str | None:
        """The variant's name the first time it is asked (the first chunk it made), then
        None: one key chunk per variant."""
        if self.marked:
            return None
        self.marked = True
        return self.name

    def take(self, event: Event) -> list[Event]:
        return [event]

    def release(self) -> list[Event]:
        """Whatever the stage holds back, now (an opaque frame is about to pass)."""
        return []

    def end(self) -> list[Event]:
        """The end of the stream: whatever is still held."""
        return self.release()


def run_stage(stage: Stage, events: Iterable[Event]) -> list[Event]:
    """``events`` through ``stage``; an opaque one passes, after what the stage held."""
    out: list[Event] = []
    for event in events:
        if event.opaque:
            out.extend(stage.release())
            out.append(event)
        else:
            out.extend(stage.take(event))
    return out
