"""OpenAI Responses streams: typed ``response.*`` events, ending with ``response.completed``."""

from __future__ import annotations

from typing import Any, Final

from sse_proxy.core.alerts import Alert
from sse_proxy.core.dialects.base import JsonAccumulator, ToolCall, text_of
from sse_proxy.core.dialects.descriptor import Dialect, Provider
from sse_proxy.core.dialects.toolcalls import call_progress
from sse_proxy.core.streammeta import StreamMeta, openai_usage, short_str

__all__ = ["DIALECT", "OpenAIResponsesAccumulator"]

_TERMINAL = frozenset({"response.completed", "response.failed", "response.incomplete"})


class OpenAIResponsesAccumulator(JsonAccumulator):
    """Output text deltas per (output_index, content_index), function-call argument deltas.

    ``response.failed``/``response.incomplete`` end the stream as well (the response object
    says why); an ``error`` event is reported and also ends it.
    """

    def __init__(self, alerts: list[Alert], *, keep_text: bool = True) -> None:
        super().__init__(alerts, keep_text=keep_text)
        self._text: dict[tuple[int, int], list[str]] = {}
        self._reasoning: list[str] = []
        self._calls: dict[str, ToolCall] = {}
        self._status: str | None = None
        self._last_offset = 0
        self._last_index = 0
        self._meta = StreamMeta()
        self._incomplete: str | None = None

    def _call(self, key: str, output_index: object = None, announced: bool = True) -> ToolCall:
        call = self._calls.get(key)
        if call is None:
            call = self._calls[key] = ToolCall(key=key, index=_int(output_index))
            if not announced:
                call.inconsistent(
                    "function_call_arguments.delta for an item no output_item.added announced"
                )
        return call

    def accept(self, etype: str, data: str, index: int, offset: int) -> None:
        obj = self.parse(data, index, offset)
        self._last_offset, self._last_index = offset, index
        if obj is None:
            return
        kind = obj.get("type") or etype
        if kind == "response.output_text.delta":
            delta = obj.get("delta")
            if type(delta) is str:
                key = (_int(obj.get("output_index")), _int(obj.get("content_index")))
                parts = self._text.get(key)
                if parts is None:
                    parts = self._text[key] = self.text_parts()
                parts.append(delta)
                if "\ufffd" in delta:
                    self._fffd(delta, data, index, offset)
        elif kind == "response.function_call_arguments.delta":
            delta = obj.get("delta")
            if type(delta) is str:
                call_key = text_of(obj.get("item_id") or obj.get("output_index", ""))
                out_i = obj.get("output_index")
                self._call(call_key, out_i, announced=False).parts.append(delta)
                self._fffd(delta, data, index, offset)
        elif kind == "response.function_call_arguments.done":
            done = self._calls.get(text_of(obj.get("item_id") or obj.get("output_index", "")))
            args = obj.get("arguments")
            if done is not None:
                if type(args) is str and args != done.arguments:
                    done.inconsistent(
                        "function_call_arguments.done has other arguments than its deltas"
                    )
                self.check_tool_call(done, offset, index)
        elif kind in ("response.output_item.added", "response.output_item.done"):
            item = obj.get("item")
            if type(item) is dict and item.get("type") == "function_call":
                item_key = text_of(item.get("id") or obj.get("output_index", ""))
                call = self._call(item_key, obj.get("output_index"))
                call.name = text_of(item["name"]) if item.get("name") else call.name
                call.id = text_of(item["call_id"]) if item.get("call_id") else call.id
                if kind == "response.output_item.done":
                    final = item.get("arguments")
                    if type(final) is str and final and not call.parts:
                        call.parts.append(final)  # sent whole, without deltas
                    elif type(final) is str and final and final != call.arguments:
                        call.inconsistent("output_item.done has other arguments than the deltas")
                    self.check_tool_call(call, offset, index)
        elif kind in ("response.reasoning_summary_text.delta", "response.reasoning_text.delta"):
            delta = obj.get("delta")
            if type(delta) is str:
                self._reasoning.append(delta)
                self._fffd(delta, data, index, offset)
        elif type(kind) is str and kind in _TERMINAL:  # a list type is unhashable
            self.terminal_seen = True
            resp = obj.get("response")
            if type(resp) is dict:
                if resp.get("status"):
                    self._status = text_of(resp["status"])
                self._response(resp)
        elif kind in ("response.created", "response.in_progress"):
            resp = obj.get("response")
            if type(resp) is dict:
                self._meta.head(resp)
        elif kind == "error":
            self.error_event(obj, index, offset)
            self.terminal_seen = True

    def _response(self, resp: dict[str, Any]) -> None:
        """The final response object: model, id, usage, why it is incomplete."""
        self._meta.head(resp)
        openai_usage(self._meta, resp.get("usage"))
        details = resp.get("incomplete_details")
        if type(details) is dict:
            self._incomplete = short_str(details.get("reason"))

    @property
    def tool_progress(self) -> int:
        return call_progress(self._calls.values())

    def stream_meta(self) -> StreamMeta:
        """The finish reason is the response status, or why it is incomplete."""
        reason = self._incomplete or self._status
        self._meta.finish_reasons = [reason] if reason else []
        return self._meta

    def finish(self) -> None:
        self.check_tool_calls(list(self._calls.values()), self._last_offset, self._last_index)

    @property
    def text(self) -> str:
        return "".join("".join(parts) for _, parts in sorted(self._text.items()))

    @property
    def reasoning(self) -> str:
        """Reasoning summary (and reasoning text) deltas, apart from :attr:`text`."""
        return "".join(self._reasoning)

    @property
    def reasoning_length(self) -> int:
        return len(self.reasoning)

    def details(self) -> dict[str, Any]:
        return {
            "status": self._status,
            "reasoning": self.reasoning,
            "function_calls": [
                {"item": k, "call_id": c.id, "name": c.name, "arguments": c.arguments}
                for k, c in self._calls.items()
            ],
        }


def _int(value: object) -> int:
    return value if type(value) is int else 0


DIALECT: Final = Dialect(
    name="responses",
    title="OpenAI Responses",
    accumulator=OpenAIResponsesAccumulator,
    aliases=("openai_responses", "openai-responses"),
    path_suffixes=("/responses",),
    example_path="/v1/responses",
    example_body={"model": "gpt-4o-mini", "stream": True, "input": "Say hello"},
    providers=(
        Provider(
            "openai",
            "openai",
            "chat",
            host_contains="openai",
            base_url_env="OPENAI_BASE_URL",
            base_url_path="/v1",
        ),
    ),
    terminal_marker="response.completed",
    terminal_frame=b"response.completed",
    error_frame=b'event: error\ndata: {"type": "error", "code": "server_error", "message": '
    b'"The server had an error.", "param": null, "sequence_number": 999}\n\n',
    error_ends_stream=True,
)
"""The OpenAI Responses API."""
