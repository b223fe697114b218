"""OpenAI Responses shapes: reasoning summaries, annotations, other output items first,
``response.in_progress`` again; then every event's ``sequence_number`` counted anew.

Output items a variant inserts take their place in the response, so every later
``output_index`` moves up, and the final ``response.completed`` lists them too.
"""

from __future__ import annotations

import copy
from typing import Any, Final

from sse_proxy.rechunk.shapes.events import Event, Stage
from sse_proxy.rechunk.shapes.requires import HOSTED_SEARCH, REASONING_SUMMARY, TOOLS

__all__ = ["STAGES", "Renumber"]

SUMMARY: Final = ("**Weighing", " the", " request**", "\n\n", "The user", " wants", " a", " reply.")
_ANNOTATION_EVERY = 10


def _event(kind: str, *, key: str | None = None, **fields: Any) -> Event:
    return Event.of({"type": kind, "sequence_number": 0, **fields}, kind, key=key)


class _Responses(Stage):
    dialect = "responses"


class _Items(_Responses):
    """Inserts output items before the first one; renumbers the ones after them."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.shift = 0
        self.items: list[dict[str, Any]] = []

    def insert(self) -> list[Event]:
        raise NotImplementedError

    def take(self, event: Event) -> list[Event]:
        obj = event.obj
        if type(obj) is not dict:
            return [event]
        out: list[Event] = []
        if not self.shift and obj.get("type") == "response.output_item.added":
            out = self.insert()
            self.shift = len(self.items)
        if not self.shift:
            return [event]
        if type(obj.get("output_index")) is int:
            return [*out, event.changed({**obj, "output_index": obj["output_index"] + self.shift})]
        response = obj.get("response")
        if obj.get("type") in _FINAL and type(response) is dict:
            new = copy.deepcopy(obj)
            output = new["response"].get("output")
            new["response"]["output"] = [*self.items, *(output if type(output) is list else [])]
            return [*out, event.changed(new)]
        return [*out, event]


_FINAL = frozenset({"response.completed", "response.incomplete", "response.failed"})


class ReasoningSummary(_Items):
    """A reasoning model's summary: a ``reasoning`` output item first, its summary
    streamed as ``response.reasoning_summary_text.delta``, then the message."""

    name = "reasoning_summary"
    requires = REASONING_SUMMARY

    def insert(self) -> list[Event]:
        item_id = "rs_mock0000000000000001"
        text = "".join(SUMMARY)
        done_item = {
            "id": item_id,
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": text}],
        }
        self.items = [done_item]
        ids: dict[str, Any] = {"item_id": item_id, "output_index": 0, "summary_index": 0}
        deltas = [
            _event("response.reasoning_summary_text.delta", key=self.key(), **ids, delta=piece)
            for piece in SUMMARY
        ]
        return [
            _event(
                "response.output_item.added",
                output_index=0,
                item={"id": item_id, "type": "reasoning", "summary": []},
            ),
            _event(
                "response.reasoning_summary_part.added",
                **ids,
                part={"type": "summary_text", "text": ""},
            ),
            *deltas,
            _event("response.reasoning_summary_text.done", **ids, text=text),
            _event(
                "response.reasoning_summary_part.done",
                **ids,
                part={"type": "summary_text", "text": text},
            ),
            _event("response.output_item.done", output_index=0, item=done_item),
        ]


class OutputItems(_Items):
    """Several output items: a hosted tool's item (a web search call) before the message,
    so the message is not at ``output_index`` 0."""

    name = "output_items"
    requires = HOSTED_SEARCH

    def insert(self) -> list[Event]:
        item_id = "ws_mock0000000000000001"
        done_item = {
            "id": item_id,
            "type": "web_search_call",
            "status": "completed",
            "action": {"type": "search", "query": "quick brown fox"},
        }
        self.items = [done_item]
        ids: dict[str, Any] = {"output_index": 0, "item_id": item_id}
        return [
            _event(
                "response.output_item.added",
                key=self.key(),
                output_index=0,
                item={"id": item_id, "type": "web_search_call", "status": "in_progress"},
            ),
            _event("response.web_search_call.in_progress", **ids),
            _event("response.web_search_call.searching", **ids),
            _event("response.web_search_call.completed", **ids),
            _event("response.output_item.done", output_index=0, item=done_item),
        ]


class Annotations(_Responses):
    """``response.output_text.annotation.added`` (URL citations) among the text deltas; the
    finished part, item and response list the annotations too."""

    name = "annotations"
    requires = HOSTED_SEARCH

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.deltas = 0
        self.chars = 0
        self.added: list[dict[str, Any]] = []

    def _annotate(self, node: Any) -> Any:
        """Every ``output_text`` part in ``node`` gets the annotations made so far."""
        if type(node) is dict:
            new = {k: self._annotate(v) for k, v in node.items()}
            if node.get("type") == "output_text" and "annotations" in node:
                new["annotations"] = list(self.added)
            return new
        if type(node) is list:
            return [self._annotate(v) for v in node]
        return node

    def take(self, event: Event) -> list[Event]:
        obj = event.obj
        if type(obj) is not dict:
            return [event]
        kind = obj.get("type")
        if kind == "response.output_text.delta" and type(obj.get("delta")) is str:
            start = self.chars
            self.chars += len(obj["delta"])
            self.deltas += 1
            if self.deltas % _ANNOTATION_EVERY:
                return [event]
            annotation = {
                "type": "url_citation",
                "start_index": start,
                "end_index": self.chars,
                "title": "Pangrams",
                "url": "https://example.com/pangrams",
            }
            added = _event(
                "response.output_text.annotation.added",
                key=self.key(),
                item_id=obj.get("item_id"),
                output_index=obj.get("output_index"),
                content_index=obj.get("content_index"),
                annotation_index=len(self.added),
                annotation=annotation,
            )
            self.added.append(annotation)
            return [event, added]
        if self.added and kind in (
            "response.content_part.done",
            "response.output_item.done",
            *_FINAL,
        ):
            return [event.changed(self._annotate(obj))]
        return [event]


class InProgressRepeated(_Responses):
    """``response.in_progress`` more than once (the API may send it again at any time)."""

    name = "in_progress_repeated"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.last: Event | None = None
        self.deltas = 0

    def _again(self) -> Event:
        assert self.last is not None
        return Event.of(copy.deepcopy(self.last.obj), self.last.etype, key=self.key())

    def take(self, event: Event) -> list[Event]:
        kind = event.kind
        if kind == "response.in_progress" and self.last is None:
            self.last = event
            return [event, self._again()]
        if kind == "response.output_text.delta" and self.last is not None:
            self.deltas += 1
            if self.deltas == 8:
                return [self._again(), event]
        return [event]


class LateItemDone(_Responses):
    """The first item's ``response.output_item.done`` arrives after the next item's events,
    its ``done`` included: items finish out of ``output_index`` order (their
    ``output_index`` still says where each goes)."""

    name = "late_item_done"
    requires = TOOLS  # several output items: the message, then the calls

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.held: Event | None = None
        self.done = False

    def take(self, event: Event) -> list[Event]:
        kind = event.kind
        if self.done or kind not in ("response.output_item.done", *_FINAL):
            return [event]
        if self.held is None:
            if kind != "response.output_item.done":
                return [event]
            self.held = event
            return []
        held, self.held = self.held, None
        self.done = True
        late = held.changed(copy.deepcopy(held.obj), key=self.key())
        if kind == "response.output_item.done":
            return [event, late]
        return [late, event]  # no later item: it stays before the end

    def release(self) -> list[Event]:
        held, self.held = self.held, None
        return [held] if held is not None else []


class Renumber(_Responses):
    """Every event's ``sequence_number`` in order again, after the variants inserted some."""

    name = "renumber"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.next = 0

    def take(self, event: Event) -> list[Event]:
        obj = event.obj
        if type(obj) is not dict or "sequence_number" not in obj:
            return [event]
        number, self.next = self.next, self.next + 1
        if obj["sequence_number"] == number:
            return [event]
        return [event.changed({**obj, "sequence_number": number})]


STAGES: Final[tuple[type[Stage], ...]] = (
    ReasoningSummary,
    OutputItems,
    Annotations,
    InProgressRepeated,
    LateItemDone,
)
"""Every Responses variant, in the order they are applied (:class:`Renumber` after all)."""
