"""Anthropic Messages shapes: pings, thinking, several text blocks, citations, server tools.

Blocks a variant inserts take their place in the message, so every later block's ``index``
moves up by as many (:class:`_Blocks`), as the API numbers them.
"""

from __future__ import annotations

from typing import Any, Final

from sse_proxy.rechunk.shapes.events import Event, Stage
from sse_proxy.rechunk.shapes.requires import CITATIONS, TOOLS, WEB_SEARCH
from sse_proxy.rechunk.shapes.requires import THINKING as THINKING_ENABLED

__all__ = ["STAGES"]

THINKING: Final = ("Let me", " think", " about", " this", " for", " a", " moment", "…")
_SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"
_BLOCK_EVENTS = frozenset({"content_block_start", "content_block_delta", "content_block_stop"})


def _event(kind: str, *, key: str | None = None, **fields: Any) -> Event:
    return Event.of({"type": kind, **fields}, kind, key=key)


def _text_delta(event: Event) -> bool:
    obj = event.obj
    if type(obj) is not dict or obj.get("type") != "content_block_delta":
        return False
    delta = obj.get("delta")
    return type(delta) is dict and delta.get("type") == "text_delta"


class _Anthropic(Stage):
    dialect = "anthropic"


class _Blocks(_Anthropic):
    """Renumbers the blocks after those it inserted; tracks the open text block."""

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.shift = 0
        self.text_block: int | None = None  # the open text block's index, as sent
        self.deltas = 0

    def reindex(self, event: Event) -> Event:
        obj = event.obj
        if not self.shift or type(obj) is not dict or obj.get("type") not in _BLOCK_EVENTS:
            return event
        index = obj.get("index")
        if type(index) is not int:
            return event
        return event.changed({**obj, "index": index + self.shift})

    def track(self, event: Event) -> None:
        obj = event.obj
        if type(obj) is not dict:
            return
        if obj.get("type") == "content_block_start":
            block = obj.get("content_block")
            is_text = type(block) is dict and block.get("type") == "text"
            self.text_block = obj.get("index") if is_text else None
            self.deltas = 0
        elif obj.get("type") == "content_block_stop":
            self.text_block = None

    def split(self, event: Event, extra: list[Event], inserted: int = 0) -> list[Event]:
        """End the open text block, insert ``extra`` (``inserted`` blocks), open a new text
        block and put ``event`` (a text delta of the old one) in it."""
        old = self.text_block
        assert old is not None
        new = old + inserted + 1
        self.shift += inserted + 1
        self.text_block = new
        start = _event("content_block_start", index=new, content_block={"type": "text", "text": ""})
        moved = event.changed({**event.obj, "index": new})
        return [_event("content_block_stop", index=old), *extra, start, moved]


class Ping(_Anthropic):
    """``ping`` events after ``message_start``, every few events and before the end."""

    name = "ping"
    every = 10

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.seen = 0

    def _ping(self) -> Event:
        return Event("ping", '{"type": "ping"}', {"type": "ping"}, key=self.key())

    def take(self, event: Event) -> list[Event]:
        self.seen += 1
        kind = event.kind
        if kind == "message_start":
            return [event, self._ping()]
        if kind == "message_stop":
            return [self._ping(), event]
        if self.seen % self.every == 0:
            return [self._ping(), event]
        return [event]


class Thinking(_Blocks):
    """Extended thinking: a ``thinking`` block (``thinking_delta`` pieces, then its
    ``signature_delta``) before the text, at index 0."""

    name = "thinking"
    requires = THINKING_ENABLED

    def take(self, event: Event) -> list[Event]:
        if event.kind != "message_start" or self.shift:
            return [self.reindex(event)]
        self.shift = 1
        start = _event(
            "content_block_start",
            index=0,
            content_block={"type": "thinking", "thinking": "", "signature": ""},
        )
        deltas = [
            _event(
                "content_block_delta",
                key=self.key(),
                index=0,
                delta={"type": "thinking_delta", "thinking": piece},
            )
            for piece in THINKING
        ]
        signature = _event(
            "content_block_delta",
            index=0,
            delta={"type": "signature_delta", "signature": _SIGNATURE},
        )
        return [event, start, *deltas, signature, _event("content_block_stop", index=0)]


class TextBlocks(_Blocks):
    """The answer in several text blocks, one after the other (as with citations or
    server tools), each with its own ``index``."""

    name = "text_blocks"
    every = 8

    def take(self, event: Event) -> list[Event]:
        event = self.reindex(event)
        self.track(event)
        if self.text_block is not None and _text_delta(event):
            self.deltas += 1
            if self.deltas % self.every == 0:
                out = self.split(event, [])
                out[1] = out[1].changed(out[1].obj, key=self.key())
                return out
        return [event]


class Citations(_Blocks):
    """Citations: text blocks that each start with a ``citations_delta`` (the cited
    source), then their ``text_delta`` pieces."""

    name = "citations"
    requires = CITATIONS
    every = 12

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.cited = 0

    def _citation(self, index: int) -> Event:
        self.cited += 1
        citation = {
            "type": "char_location",
            "cited_text": "The quick brown fox jumps over the lazy dog.",
            "document_index": 0,
            "document_title": "Pangrams",
            "start_char_index": 0,
            "end_char_index": 44,
        }
        return _event(
            "content_block_delta",
            key=self.key(),
            index=index,
            delta={"type": "citations_delta", "citation": citation},
        )

    def take(self, event: Event) -> list[Event]:
        event = self.reindex(event)
        before = self.text_block
        self.track(event)
        if self.text_block is not None and before is None:
            return [event, self._citation(self.text_block)]  # a text block opens: cite
        if self.text_block is not None and _text_delta(event):
            self.deltas += 1
            if self.deltas % self.every == 0:
                out = self.split(event, [])
                return [*out[:2], self._citation(out[1].obj["index"]), out[2]]
        return [event]


class ServerTool(_Blocks):
    """A server tool (web search) mid-answer: a ``server_tool_use`` block whose input
    streams as ``input_json_delta``, its ``web_search_tool_result`` block, then the text
    goes on in a new block."""

    name = "server_tool"
    requires = WEB_SEARCH
    after = 5

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.done = False

    def take(self, event: Event) -> list[Event]:
        event = self.reindex(event)
        self.track(event)
        if self.done or self.text_block is None or not _text_delta(event):
            return [event]
        self.deltas += 1
        if self.deltas < self.after:
            return [event]
        self.done = True
        at = self.text_block + 1
        tool_id = "srvtoolu_mock000000000000000001"
        extra = [
            _event(
                "content_block_start",
                index=at,
                content_block={
                    "type": "server_tool_use",
                    "id": tool_id,
                    "name": "web_search",
                    "input": {},
                },
            ),
            _event(
                "content_block_delta",
                key=self.key(),
                index=at,
                delta={"type": "input_json_delta", "partial_json": '{"query": "quick br'},
            ),
            _event(
                "content_block_delta",
                index=at,
                delta={"type": "input_json_delta", "partial_json": 'own fox"}'},
            ),
            _event("content_block_stop", index=at),
            _event(
                "content_block_start",
                index=at + 1,
                content_block={
                    "type": "web_search_tool_result",
                    "tool_use_id": tool_id,
                    "content": [
                        {
                            "type": "web_search_result",
                            "title": "Pangrams",
                            "url": "https://example.com/pangrams",
                            "encrypted_content": "EqgfCioIARgBIiQ3YTAwMjY1Mi1mZjM5",
                            "page_age": None,
                        }
                    ],
                },
            ),
            _event("content_block_stop", index=at + 1),
        ]
        return self.split(event, extra, inserted=2)


class EmptyPartialJson(_Anthropic):
    """A tool block's first ``input_json_delta`` with ``partial_json: ""``, as Claude sends."""

    name = "empty_partial_json"
    requires = TOOLS

    def take(self, event: Event) -> list[Event]:
        obj = event.obj
        if event.kind != "content_block_start" or type(obj) is not dict:
            return [event]
        block = obj.get("content_block")
        if type(block) is not dict or block.get("type") != "tool_use":
            return [event]
        empty = _event(
            "content_block_delta",
            key=self.key(),
            index=obj.get("index"),
            delta={"type": "input_json_delta", "partial_json": ""},
        )
        return [event, empty]


STAGES: Final[tuple[type[Stage], ...]] = (
    Ping,
    Thinking,
    TextBlocks,
    Citations,
    ServerTool,
    EmptyPartialJson,
)
"""Every Anthropic variant, in the order they are applied."""
