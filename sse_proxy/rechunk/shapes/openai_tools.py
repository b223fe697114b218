"""OpenAI Chat tool-call shapes: how the calls' fragments come, by provider."""

from __future__ import annotations

import copy
from typing import Any, Final

from sse_proxy.rechunk.shapes.events import Event, Stage
from sse_proxy.rechunk.shapes.requires import TOOLS

__all__ = ["STAGES", "choice_of", "delta_of", "fragment"]


def choice_of(obj: Any) -> dict[str, Any] | None:
    """The chunk's only choice, if it has exactly one (the variants leave others alone)."""
    if type(obj) is not dict:
        return None
    choices = obj.get("choices")
    if type(choices) is list and len(choices) == 1 and type(choices[0]) is dict:
        return choices[0]
    return None


def delta_of(obj: Any) -> dict[str, Any] | None:
    """The only choice's delta, if it is an object."""
    choice = choice_of(obj)
    delta = None if choice is None else choice.get("delta")
    return delta if type(delta) is dict else None


def _with_choice(obj: dict[str, Any], **changes: Any) -> dict[str, Any]:
    new = copy.deepcopy(obj)
    new["choices"][0].update(changes)
    return new


class _Chat(Stage):
    dialect = "openai"
    requires = TOOLS  # tool calls come only to a request that declares tools


def fragment(obj: Any) -> dict[str, Any] | None:
    """The one tool-call fragment of a chunk that carries nothing else, else None."""
    delta = delta_of(obj)
    choice = choice_of(obj)
    if delta is None or choice is None or choice.get("finish_reason"):
        return None
    calls = delta.get("tool_calls")
    if set(delta) - {"tool_calls", "role", "content"} or delta.get("content"):
        return None
    if type(calls) is not list or len(calls) != 1 or type(calls[0]) is not dict:
        return None
    found = calls[0]
    return found if type(found.get("index")) is int else None


def _arguments(fragment: dict[str, Any]) -> str:
    fn = fragment.get("function")
    args = fn.get("arguments") if type(fn) is dict else None
    return args if type(args) is str else ""


def _fragment_chunk(template: dict[str, Any], fragment: dict[str, Any]) -> dict[str, Any]:
    return _with_choice(template, delta={"tool_calls": [fragment]})


def _with_arguments(fragment: dict[str, Any], args: str) -> dict[str, Any]:
    new = copy.deepcopy(fragment)
    fn = new.get("function")
    new["function"] = {**(fn if type(fn) is dict else {}), "arguments": args}
    return new


class _ToolHold(_Chat):
    """Holds a run of tool-call fragment chunks; :meth:`emit` re-shapes the run."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.run: list[tuple[Event, dict[str, Any]]] = []

    def take(self, event: Event) -> list[Event]:
        found = fragment(event.obj)
        if found is not None:
            self.run.append((event, found))
            return []
        return [*self.release(), event]

    def release(self) -> list[Event]:
        run, self.run = self.run, []
        return self.emit(run) if run else []

    def emit(self, run: list[tuple[Event, dict[str, Any]]]) -> list[Event]:
        raise NotImplementedError


def _by_index(run: list[tuple[Event, dict[str, Any]]]) -> dict[int, list[dict[str, Any]]]:
    calls: dict[int, list[dict[str, Any]]] = {}
    for _, fragment in run:
        calls.setdefault(fragment["index"], []).append(fragment)
    return calls


class ToolArgsWhole(_ToolHold):
    """Each tool call in one chunk: id, name and the whole arguments at once (Gemini's
    OpenAI-compatible endpoint, and servers that parse the call before streaming it)."""

    name = "tool_args_whole"

    def emit(self, run: list[tuple[Event, dict[str, Any]]]) -> list[Event]:
        template = run[0][0].obj
        out = []
        for _, fragments in sorted(_by_index(run).items()):
            first = copy.deepcopy(fragments[0])
            whole = _with_arguments(first, "".join(_arguments(f) for f in fragments))
            out.append(Event.of(_fragment_chunk(template, whole), key=self.key()))
        return out


class ToolArgsChars(_ToolHold):
    """Tool-call arguments one character per fragment."""

    name = "tool_args_chars"

    def emit(self, run: list[tuple[Event, dict[str, Any]]]) -> list[Event]:
        out = []
        for event, fragment in run:
            args = _arguments(fragment)
            rest = {k: v for k, v in fragment.items() if k != "function"}
            fn = fragment.get("function")
            announce = "id" in fragment or (type(fn) is dict and "name" in fn)
            if len(args) <= 1 and not (announce and args):
                out.append(event)
                continue
            if announce:
                out.append(event.changed(_fragment_chunk(event.obj, _with_arguments(fragment, ""))))
            for char in args:
                piece = {"index": rest["index"], "function": {"arguments": char}}
                out.append(Event.of(_fragment_chunk(event.obj, piece), key=self.key()))
        return out


class ToolInterleaved(_ToolHold):
    """Parallel calls interleaved: fragments alternate between the calls, by ``index``."""

    name = "tool_interleaved"

    def emit(self, run: list[tuple[Event, dict[str, Any]]]) -> list[Event]:
        queues = {i: [e for e, f in run if f["index"] == i] for i in sorted(_by_index(run))}
        out: list[Event] = []
        first = min(queues) if queues else 0
        while any(queues.values()):
            for i, queue in queues.items():
                if queue:
                    event = queue.pop(0)
                    if i != first and not self.marked:
                        event = event.changed(copy.deepcopy(event.obj), key=self.key())
                    out.append(event)
        return out


class ToolArgsWithId(_ToolHold):
    """The fragment that announces a call (id and name) also carries its first arguments."""

    name = "tool_args_with_id"

    def emit(self, run: list[tuple[Event, dict[str, Any]]]) -> list[Event]:
        out: list[Event] = []
        pending: tuple[Event, dict[str, Any]] | None = None
        for event, fragment in run:
            if "id" in fragment and not _arguments(fragment):
                if pending is not None:
                    out.append(pending[0])
                pending = (event, fragment)
                continue
            if pending is not None and pending[1]["index"] == fragment["index"]:
                merged = _with_arguments(pending[1], _arguments(fragment))
                out.append(Event.of(_fragment_chunk(event.obj, merged), key=self.key()))
                pending = None
                continue
            if pending is not None:
                out.append(pending[0])
                pending = None
            out.append(event)
        if pending is not None:
            out.append(pending[0])
        return out


STAGES: Final[tuple[type[Stage], ...]] = (
    ToolArgsWhole,
    ToolArgsChars,
    ToolInterleaved,
    ToolArgsWithId,
)
"""The tool-call variants, in the order they are applied."""
