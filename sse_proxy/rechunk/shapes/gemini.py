"""Gemini shapes: thought parts, chunks without a text part, the finish in a chunk of its
own, parallel function calls in one chunk."""

from __future__ import annotations

import copy
from typing import Any, Final

from sse_proxy.rechunk.shapes.events import Event, Stage
from sse_proxy.rechunk.shapes.requires import INCLUDE_THOUGHTS, TOOLS

__all__ = ["STAGES"]

THOUGHTS: Final = (
    "**Weighing",
    " the",
    " request**",
    "\n\n",
    "The user",
    " wants",
    " a",
    " reply.",
)
# base64, as the API sends it (google-genai checks)
_SIGNATURE = "c3NlLXByb3h5IG1vY2sgdGhvdWdodCBzaWduYXR1cmUgMDAwMQ=="


def _candidate(obj: Any) -> dict[str, Any] | None:
    """The chunk's only candidate (index 0), if it has exactly one."""
    if type(obj) is not dict:
        return None
    cands = obj.get("candidates")
    if type(cands) is list and len(cands) == 1 and type(cands[0]) is dict:
        cand = cands[0]
        return cand if not cand.get("index", 0) else None
    return None


def _parts(cand: dict[str, Any]) -> list[Any]:
    content = cand.get("content")
    parts = content.get("parts") if type(content) is dict else None
    return parts if type(parts) is list else []


def _text_part(obj: Any) -> dict[str, Any] | None:
    """The one answer-text part of a chunk that carries nothing else and does not finish."""
    cand = _candidate(obj)
    if cand is None or cand.get("finishReason"):
        return None
    parts = _parts(cand)
    if len(parts) != 1 or type(parts[0]) is not dict:
        return None
    part = parts[0]
    text = part.get("text")
    return part if type(text) is str and text and not part.get("thought") else None


def _chunk(template: dict[str, Any], parts: list[Any] | None, **cand: Any) -> dict[str, Any]:
    """A chunk like ``template`` (its usage, model and id) with other parts."""
    new = {k: copy.deepcopy(v) for k, v in template.items() if k != "candidates"}
    candidate: dict[str, Any] = {}
    if parts is not None:
        candidate["content"] = {"parts": parts, "role": "model"}
    candidate.update(cand)
    candidate.setdefault("index", 0)
    return {"candidates": [candidate], **new}


class _Gemini(Stage):
    dialect = "gemini"


class Thoughts(_Gemini):
    """Thinking: ``thought: true`` parts before the answer, and the ``thoughtSignature`` on
    the first part of the answer."""

    name = "thoughts"
    requires = INCLUDE_THOUGHTS

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.done = False

    def take(self, event: Event) -> list[Event]:
        part = _text_part(event.obj)
        if self.done or part is None:
            return [event]
        self.done = True
        thoughts = [
            Event.of(_chunk(event.obj, [{"text": piece, "thought": True}]), key=self.key())
            for piece in THOUGHTS
        ]
        signed = _chunk(event.obj, [{**part, "thoughtSignature": _SIGNATURE}])
        return [*thoughts, event.changed(signed)]


class NoTextPart(_Gemini):
    """Chunks whose candidate has no text part: one that carries only a
    ``thoughtSignature``, one whose content has no ``parts`` at all."""

    name = "no_text_part"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.texts = 0

    def take(self, event: Event) -> list[Event]:
        if _text_part(event.obj) is None:
            return [event]
        self.texts += 1
        if self.texts == 2:
            signature = Event.of(
                _chunk(event.obj, [{"thoughtSignature": _SIGNATURE}]), key=self.key()
            )
            return [event, signature]
        if self.texts == 4:
            no_parts = _chunk(event.obj, None, content={"role": "model"})
            return [event, Event.of(no_parts)]
        return [event]


class FinishAlone(_Gemini):
    """The finish reason and the final usage in a chunk of their own, without content."""

    name = "finish_alone"

    def take(self, event: Event) -> list[Event]:
        cand = _candidate(event.obj)
        if cand is None or not cand.get("finishReason"):
            return [event]
        out: list[Event] = []
        parts = [p for p in _parts(cand) if not (type(p) is dict and p == {"text": ""})]
        if parts:
            out.append(Event.of(_chunk(event.obj, parts)))
        extra = {k: v for k, v in cand.items() if k not in ("content", "index")}
        alone = _chunk(event.obj, None, **extra)
        return [*out, event.changed(alone, key=self.key())]


class FunctionCallsOneChunk(_Gemini):
    """Parallel function calls as several ``functionCall`` parts of one chunk."""

    name = "function_calls_one_chunk"
    requires = TOOLS

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.held: list[Event] = []

    def take(self, event: Event) -> list[Event]:
        cand = _candidate(event.obj)
        parts = _parts(cand) if cand is not None and not cand.get("finishReason") else []
        if parts and all(type(p) is dict and "functionCall" in p for p in parts):
            self.held.append(event)
            return []
        return [*self.release(), event]

    def release(self) -> list[Event]:
        held, self.held = self.held, []
        if len(held) < 2:
            return held
        parts = [p for e in held for p in _parts(_candidate(e.obj) or {})]
        return [Event.of(_chunk(held[-1].obj, parts), key=self.key())]


class FunctionCallNoArgs(_Gemini):
    """A call to a tool that takes no arguments, whole in one chunk and without ``args``:
    ``{"functionCall": {"name": "X"}}`` (no ``args``, no ``partialArgs``)."""

    name = "function_call_no_args"
    requires = TOOLS

    def take(self, event: Event) -> list[Event]:
        cand = _candidate(event.obj)
        parts = _parts(cand) if cand is not None else []
        bare = [
            {k: v for k, v in p.items() if k != "functionCall"}
            | {"functionCall": {k: v for k, v in p["functionCall"].items() if k != "args"}}
            if _no_args_call(p)
            else p
            for p in parts
        ]
        if bare == parts:
            return [event]
        new = copy.deepcopy(event.obj)
        new["candidates"][0]["content"]["parts"] = bare
        return [event.changed(new, key=self.key())]


def _no_args_call(part: Any) -> bool:
    call = part.get("functionCall") if type(part) is dict else None
    return type(call) is dict and call.get("args") == {}


class SignatureApart(_Gemini):
    """The first function call's ``thoughtSignature`` on a part of its own, in the chunk
    before the call (an empty thought part: ``{"text": "", "thought": true,
    "thoughtSignature": ...}``), not on the ``functionCall`` part."""

    name = "signature_apart"
    requires = TOOLS

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.done = False

    def take(self, event: Event) -> list[Event]:
        cand = _candidate(event.obj)
        parts = _parts(cand) if cand is not None else []
        if self.done or not any(type(p) is dict and "functionCall" in p for p in parts):
            return [event]
        self.done = True
        signature = {"text": "", "thought": True, "thoughtSignature": _SIGNATURE}
        alone = Event.of(_chunk(event.obj, [signature]), key=self.key())
        unsigned = [
            {k: v for k, v in p.items() if k != "thoughtSignature"} if type(p) is dict else p
            for p in parts
        ]
        new = copy.deepcopy(event.obj)
        new["candidates"][0]["content"]["parts"] = unsigned
        return [alone, event.changed(new)]


STAGES: Final[tuple[type[Stage], ...]] = (
    Thoughts,
    NoTextPart,
    FinishAlone,
    FunctionCallsOneChunk,
    FunctionCallNoArgs,
    SignatureApart,
)
"""Every Gemini variant, in the order they are applied."""
