"""Anthropic Messages streams: content blocks by index, ending with ``message_stop``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final

from sse_proxy.core.alerts import Alert
from sse_proxy.core.dialects.base import JsonAccumulator, ToolCall, text_of
from sse_proxy.core.dialects.descriptor import Dialect, Provider
from sse_proxy.core.dialects.toolcalls import call_progress
from sse_proxy.core.streammeta import StreamMeta, anthropic_usage

__all__ = ["DIALECT", "AnthropicAccumulator"]


@dataclass(slots=True)
class _Block:
    type: str
    text: list[str]
    thinking: list[str] = field(default_factory=list)
    tool: ToolCall | None = None


class AnthropicAccumulator(JsonAccumulator):
    """``text_delta`` text and ``input_json_delta`` tool input, per content block index.

    ``text`` joins the text blocks in index order. An ``error`` event ends the stream
    legitimately (reported as ``sse.error_event``, not as truncation).
    """

    def __init__(self, alerts: list[Alert], *, keep_text: bool = True) -> None:
        super().__init__(alerts, keep_text=keep_text)
        self._blocks: dict[int, _Block] = {}
        self._stop_reason: str | None = None
        self._last_offset = 0
        self._last_index = 0
        self._meta = StreamMeta()

    def _block(self, idx: int, kind: str = "text") -> _Block:
        block = self._blocks.get(idx)
        if block is None:
            block = self._blocks[idx] = _Block(kind, self.text_parts())
        return block

    def accept(self, etype: str, data: str, index: int, offset: int) -> None:
        obj = self.parse(data, index, offset)
        self._last_offset, self._last_index = offset, index
        if obj is None:
            return
        kind = obj.get("type") or etype
        idx = obj.get("index", 0)
        if type(idx) is not int:
            idx = 0
        if kind == "content_block_delta":
            delta = obj.get("delta")
            if type(delta) is not dict:
                return
            dtype = delta.get("type")
            if dtype == "text_delta":
                text = delta.get("text")
                if type(text) is str:
                    self._block(idx).text.append(text)
                    if "\ufffd" in text:
                        self._fffd(text, data, index, offset)
            elif dtype == "input_json_delta":
                part = delta.get("partial_json")
                if type(part) is str:
                    started = idx in self._blocks
                    block = self._block(idx, "tool_use")
                    if block.tool is None:
                        block.tool = ToolCall(key=str(idx), index=idx)
                        block.tool.inconsistent(
                            f"input_json_delta for block {idx}, which is a {block.type} block"
                            if started
                            else f"input_json_delta for block {idx}, which never started"
                        )
                    block.tool.parts.append(part)
                    self._fffd(part, data, index, offset)
            elif dtype == "thinking_delta":
                thinking = delta.get("thinking")
                if type(thinking) is str:
                    self._block(idx, "thinking").thinking.append(thinking)
                    self._fffd(thinking, data, index, offset)
        elif kind == "content_block_start":
            cb = obj.get("content_block")
            if type(cb) is not dict:
                return
            block = self._block(idx, text_of(cb.get("type") or "text"))
            block.type = text_of(cb.get("type") or block.type)
            if block.type in ("tool_use", "server_tool_use", "mcp_tool_use"):
                block.tool = block.tool or ToolCall(key=str(idx), index=idx)
                block.tool.name = text_of(cb["name"]) if cb.get("name") else block.tool.name
                block.tool.id = text_of(cb["id"]) if cb.get("id") else block.tool.id
            text = cb.get("text")
            if text and type(text) is str:
                block.text.append(text)
                self._fffd(text, data, index, offset)
        elif kind == "content_block_stop":
            stopped = self._blocks.get(idx)
            if stopped is not None and stopped.tool is not None:
                self.check_tool_call(stopped.tool, offset, index)
        elif kind == "message_delta":
            delta = obj.get("delta")
            if type(delta) is dict and delta.get("stop_reason"):
                self._stop_reason = text_of(delta["stop_reason"])
            anthropic_usage(self._meta, obj.get("usage"))
        elif kind == "message_start":
            message = obj.get("message")
            if type(message) is dict:
                self._meta.head(message)
                anthropic_usage(self._meta, message.get("usage"))
        elif kind == "message_stop":
            self.terminal_seen = True
        elif kind == "error":
            self.error_event(obj, index, offset)
            self.terminal_seen = True
        elif kind == "ping":
            self.pings += 1

    @property
    def tool_progress(self) -> int:
        return call_progress(b.tool for b in self._blocks.values() if b.tool is not None)

    def stream_meta(self) -> StreamMeta:
        """One finish reason: the message's ``stop_reason``."""
        self._meta.finish_reasons = [self._stop_reason[:200]] if self._stop_reason else []
        return self._meta

    def finish(self) -> None:
        calls = [b.tool for _, b in sorted(self._blocks.items()) if b.tool is not None]
        self.check_tool_calls(calls, self._last_offset, self._last_index)

    @property
    def text(self) -> str:
        return "".join("".join(b.text) for _, b in sorted(self._blocks.items()) if b.text)

    @property
    def reasoning(self) -> str:
        """``thinking_delta`` text of every block in index order, apart from :attr:`text`."""
        return "".join("".join(b.thinking) for _, b in sorted(self._blocks.items()))

    @property
    def reasoning_length(self) -> int:
        return len(self.reasoning)

    def details(self) -> dict[str, Any]:
        return {
            "stop_reason": self._stop_reason,
            "reasoning": self.reasoning,
            "blocks": [
                {
                    "index": idx,
                    "type": b.type,
                    "text": "".join(b.text),
                    "thinking": "".join(b.thinking),
                    "tool": None
                    if b.tool is None
                    else {"id": b.tool.id, "name": b.tool.name, "input_json": b.tool.arguments},
                }
                for idx, b in sorted(self._blocks.items())
            ],
        }


DIALECT: Final = Dialect(
    name="anthropic",
    title="Anthropic Messages",
    accumulator=AnthropicAccumulator,
    aliases=("messages",),
    path_suffixes=("/messages",),
    example_path="/v1/messages",
    example_body={
        "model": "claude-3-5-sonnet-20241022",
        "max_tokens": 1024,
        "stream": True,
        "messages": [{"role": "user", "content": "Say hello"}],
    },
    providers=(
        Provider(
            "anthropic",
            "anthropic",
            "chat",
            host_contains="anthropic",
            base_url_env="ANTHROPIC_BASE_URL",
        ),
    ),
    terminal_marker="message_stop",
    terminal_frame=b"message_stop",
    error_frame=b'event: error\ndata: {"type": "error", "error": {"type": "overloaded_error", '
    b'"message": "Overloaded"}}\n\n',
    error_ends_stream=True,
    ping_frame=b'event: ping\ndata: {"type": "ping"}\n\n',
)
"""The Anthropic Messages API."""
