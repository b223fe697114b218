"""Token variants: the same text (and the same tool-call arguments) in other deltas.

A tokenizer decides where a delta ends, and no rule says it is a word, a character or a
grapheme: byte-level BPE splits inside words and inside emoji sequences, and a model that
is told to stop at a phrase may stream the phrase in pieces. Each variant re-cuts every
text-carrying delta of any dialect (answer text, reasoning, tool-call argument fragments,
raw text events): one character each, inside every word, inside every grapheme cluster,
with whitespace and empty deltas of their own, inside every run of punctuation and
whitespace (where stop phrases live), or at seeded random places across the original
boundaries. The joined text never changes, so a client that assembles deltas by
concatenation passes; one that looks at deltas one by one shows it.
"""

from __future__ import annotations

import copy
import itertools
import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Final

from sse_proxy.rechunk.shapes.events import Event, Stage

__all__ = ["STAGES", "Slot", "slot_of"]

_WORD = re.compile(r"\w{2,}")
_RUN = re.compile(r"[^\w]{2,}")
_ZWJ = "\u200d"
_MAX_RUN = 12  # deltas re-cut together by ``retokenize``

Build = Callable[[str, bool], Event]
"""(text, first piece?) -> the event carrying that piece."""


@dataclass(frozen=True, slots=True)
class Slot:
    """The text a delta carries, where it goes (``key``: what run it continues) and how to
    build a delta carrying other text in its place."""

    key: tuple[Any, ...]
    text: str
    build: Build
    answer: bool = True
    """It carries answer text (not reasoning, not tool-call arguments)."""


def _openai(event: Event, obj: dict[str, Any]) -> Slot | None:
    choices = obj.get("choices")
    if type(choices) is not list or len(choices) != 1 or type(choices[0]) is not dict:
        return None
    choice = choices[0]
    delta = choice.get("delta")
    if choice.get("finish_reason") or type(delta) is not dict:
        return None
    strings = [
        k
        for k in ("content", "reasoning_content", "reasoning")
        if type(delta.get(k)) is str and delta[k]
    ]
    calls = delta.get("tool_calls")
    if calls is not None:
        if strings or type(calls) is not list or len(calls) != 1 or type(calls[0]) is not dict:
            return None
        call = calls[0]
        fn = call.get("function")
        args = fn.get("arguments") if type(fn) is dict else None
        if type(args) is not str or not args or type(call.get("index")) is not int:
            return None

        def build_args(text: str, first: bool) -> Event:
            piece = copy.deepcopy(call) if first else {"index": call["index"], "function": {}}
            piece["function"]["arguments"] = text
            new = copy.deepcopy(obj)
            new["choices"][0]["delta"] = (
                {**delta, "tool_calls": [piece]} if first else {"tool_calls": [piece]}
            )
            return Event.of(new, event.etype)

        return Slot(("args", choice.get("index", 0), call["index"]), args, build_args, False)
    if len(strings) != 1:
        return None
    field = strings[0]

    def build(text: str, first: bool) -> Event:
        new = copy.deepcopy(obj)
        piece = dict(delta) if first else {k: v for k, v in delta.items() if k != "role"}
        piece[field] = text
        new["choices"][0]["delta"] = piece
        return Event.of(new, event.etype)

    answer = field == "content" and not choice.get("index", 0)
    return Slot((field, choice.get("index", 0)), delta[field], build, answer)


_ANTHROPIC_FIELDS: Final = {
    "text_delta": "text",
    "thinking_delta": "thinking",
    "input_json_delta": "partial_json",
}


def _anthropic(event: Event, obj: dict[str, Any]) -> Slot | None:
    if obj.get("type") != "content_block_delta":
        return None
    delta = obj.get("delta")
    if type(delta) is not dict:
        return None
    field = _ANTHROPIC_FIELDS.get(str(delta.get("type")))
    if field is None:
        return None
    text = delta.get(field)
    if type(text) is not str or not text:
        return None

    def build(piece: str, first: bool) -> Event:
        return Event.of({**obj, "delta": {**delta, field: piece}}, event.etype)

    return Slot(("block", delta["type"], obj.get("index")), text, build, field == "text")


_RESPONSES_DELTAS: Final = frozenset(
    {
        "response.output_text.delta",
        "response.reasoning_summary_text.delta",
        "response.reasoning_text.delta",
        "response.function_call_arguments.delta",
    }
)


def _responses(event: Event, obj: dict[str, Any]) -> Slot | None:
    kind = obj.get("type")
    text = obj.get("delta")
    if kind not in _RESPONSES_DELTAS or type(text) is not str or not text:
        return None

    def build(piece: str, first: bool) -> Event:
        return Event.of({**obj, "delta": piece}, event.etype)

    key = (kind, obj.get("item_id"), obj.get("content_index"), obj.get("summary_index"))
    return Slot(key, text, build, kind == "response.output_text.delta")


def _gemini(event: Event, obj: dict[str, Any]) -> Slot | None:
    cands = obj.get("candidates")
    if type(cands) is not list or len(cands) != 1 or type(cands[0]) is not dict:
        return None
    cand = cands[0]
    content = cand.get("content")
    parts = content.get("parts") if type(content) is dict else None
    if cand.get("finishReason") or type(parts) is not list or len(parts) != 1:
        return None
    part = parts[0]
    text = part.get("text") if type(part) is dict else None
    if type(part) is not dict or type(text) is not str or not text:
        return None

    def build(piece: str, first: bool) -> Event:
        new = copy.deepcopy(obj)
        kept = dict(part) if first else {k: v for k, v in part.items() if k != "thoughtSignature"}
        kept["text"] = piece
        new["candidates"][0]["content"]["parts"] = [kept]
        return Event.of(new, event.etype)

    thought = part.get("thought") is True
    answer = not thought and not cand.get("index", 0)
    return Slot(("part", cand.get("index", 0), thought), text, build, answer)


def _text(event: Event) -> Slot | None:
    if not event.data or event.data == "[DONE]":
        return None

    def build(piece: str, first: bool) -> Event:
        return Event(event.etype, piece)

    return Slot(("data", event.etype), event.data, build)


def _interactions(event: Event, obj: dict[str, Any]) -> Slot | None:
    """A Gemini Interactions text delta (``step.delta``, or the older ``content.delta``)."""
    if obj.get("event_type") not in ("step.delta", "content.delta"):
        return None
    delta = obj.get("delta")
    text = delta.get("text") if type(delta) is dict else None
    if type(delta) is not dict or delta.get("type") != "text" or type(text) is not str or not text:
        return None

    def build(piece: str, first: bool) -> Event:
        new = copy.deepcopy(obj)
        new["delta"]["text"] = piece
        return Event.of(new, event.etype)

    return Slot(("delta", obj.get("index", 0)), text, build)


def slot_of(event: Event, dialect: str) -> Slot | None:
    """The text ``event`` carries as a delta of ``dialect``, or None (it carries none, or
    carries it beside other things, such as a finish reason, that must not be repeated)."""
    if dialect == "text":
        return _text(event)
    obj = event.obj
    if type(obj) is not dict:
        return None
    if dialect == "openai":
        return _openai(event, obj)
    if dialect == "anthropic":
        return _anthropic(event, obj)
    if dialect == "responses":
        return _responses(event, obj)
    if dialect == "gemini":  # generateContent chunks, or Interactions events
        return _gemini(event, obj) if "event_type" not in obj else _interactions(event, obj)
    return None


def _cut(text: str, cuts: list[int]) -> list[str]:
    bounds = [0, *sorted({c for c in cuts if 0 < c < len(text)}), len(text)]
    return [text[a:b] for a, b in itertools.pairwise(bounds)]


def _extends(prev: str, char: str) -> bool:
    """Whether ``char`` continues the grapheme cluster ``prev`` belongs to (enough of
    UAX #29 for combining marks, ZWJ sequences, modifiers, variation selectors, flags)."""
    code = ord(char)
    return (
        unicodedata.combining(char) > 0
        or unicodedata.category(char) in ("Mn", "Me", "Mc")
        or _ZWJ in (char, prev)
        or 0x1F3FB <= code <= 0x1F3FF  # skin tones
        or 0xFE00 <= code <= 0xFE0F  # variation selectors
        or 0xE0020 <= code <= 0xE007F  # tag characters
        or (0x1F1E6 <= code <= 0x1F1FF and 0x1F1E6 <= ord(prev) <= 0x1F1FF)
    )


def _inside_clusters(text: str) -> list[int]:
    cuts = []
    pair = False  # regional indicators pair up: a third one starts a new flag
    for i in range(1, len(text)):
        prev, char = text[i - 1], text[i]
        if 0x1F1E6 <= ord(char) <= 0x1F1FF and 0x1F1E6 <= ord(prev) <= 0x1F1FF:
            pair = not pair
            if pair:
                cuts.append(i)
            continue
        pair = False
        if _extends(prev, char):
            cuts.append(i)
    return cuts


def _chars(text: str) -> list[str]:
    return list(text)


def _midword(text: str) -> list[str]:
    return _cut(text, [m.start() + len(m.group()) // 2 for m in _WORD.finditer(text)])


def _graphemes(text: str) -> list[str]:
    return _cut(text, _inside_clusters(text))


def _runs(text: str) -> list[str]:
    return _cut(text, [m.start() + 1 for m in _RUN.finditer(text)])


def _whitespace(text: str) -> list[str]:
    core = text.strip()
    if not core:
        return [text]
    lead = text[: len(text) - len(text.lstrip())]
    trail = text[len(text.rstrip()) :]
    return [p for p in (lead, core, trail) if p]


class _Split(Stage):
    """Re-cuts every delta on its own, by ``split``."""

    def split(self, text: str) -> list[str]:
        raise NotImplementedError

    def take(self, event: Event) -> list[Event]:
        slot = slot_of(event, self.ctx.dialect)
        if slot is None:
            return [event]
        pieces = self.split(slot.text)
        if len(pieces) < 2:
            return [event]
        out = [slot.build(p, i == 0) for i, p in enumerate(pieces)]
        if not self.marked:
            out[1].key = self.key()
        return out


class Chars(_Split):
    """One character per delta."""

    name = "chars"

    def split(self, text: str) -> list[str]:
        return _chars(text)


class Midword(_Split):
    """A delta boundary inside every word (of two or more characters)."""

    name = "midword"

    def split(self, text: str) -> list[str]:
        return _midword(text)


class Graphemes(_Split):
    """A delta boundary inside every grapheme cluster of several code points: after a base
    letter before its combining mark, inside a ZWJ sequence, between the two halves of a
    flag, between a hand and its skin tone."""

    name = "graphemes"

    def split(self, text: str) -> list[str]:
        return _graphemes(text)


class StopRuns(_Split):
    """A delta boundary inside every run of two or more punctuation or whitespace
    characters (``"\\n\\n"``, ``". "``, ``"»."``, ``'":"'``): where stop phrases live."""

    name = "stop_runs"

    def split(self, text: str) -> list[str]:
        return _runs(text)


class Whitespace(_Split):
    """Leading and trailing whitespace in deltas of their own, and empty deltas."""

    name = "whitespace"
    every = 4

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.seen = 0

    def split(self, text: str) -> list[str]:
        return _whitespace(text)

    def take(self, event: Event) -> list[Event]:
        slot = slot_of(event, self.ctx.dialect)
        if slot is None:
            return [event]
        self.seen += 1
        pieces = self.split(slot.text)
        if self.seen % self.every == 1:
            pieces = ["", *pieces]  # an empty delta, as APIs send now and then
        if len(pieces) < 2:
            return [event]
        out = [slot.build(p, i == 0) for i, p in enumerate(pieces)]
        if not self.marked:
            at = next((i for i, p in enumerate(pieces) if not p.strip()), 1)
            out[at].key = self.key()
        return out


class Retokenize(Stage):
    """Seeded random retokenization: runs of consecutive deltas joined and cut again at
    random places, across the original boundaries."""

    name = "retokenize"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.run: list[Slot] = []

    def take(self, event: Event) -> list[Event]:
        slot = slot_of(event, self.ctx.dialect)
        if slot is None:
            return [*self.release(), event]
        out: list[Event] = []
        if self.run and (self.run[0].key != slot.key or len(self.run) >= _MAX_RUN):
            out = self.release()
        self.run.append(slot)
        return out

    def release(self) -> list[Event]:
        run, self.run = self.run, []
        if not run:
            return []
        text = "".join(s.text for s in run)
        if len(text) < 2:
            return [run[0].build(text, True)]
        rng = self.ctx.rng(self.name)
        count = min(len(text) - 1, rng.randint(max(1, len(run) // 2), len(run) + len(run) // 2))
        pieces = _cut(text, rng.sample(range(1, len(text)), count))
        out = [run[0].build(p, i == 0) for i, p in enumerate(pieces)]
        if not self.marked and len(out) > 1:
            out[1].key = self.key()
        return out


STAGES: Final[tuple[type[Stage], ...]] = (
    Chars,
    Midword,
    Graphemes,
    Whitespace,
    StopRuns,
    Retokenize,
)
"""Every token variant, in the order they are applied."""
