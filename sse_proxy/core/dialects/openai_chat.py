"""OpenAI Chat Completions streams: ``chat.completion.chunk`` objects, then ``[DONE]``."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Annotated, Any, Final, Literal

import msgspec

from sse_proxy.core.alerts import Alert
from sse_proxy.core.dialects.base import JsonAccumulator, ToolCall, json_loads, text_of
from sse_proxy.core.dialects.descriptor import Dialect, Provider
from sse_proxy.core.dialects.toolcalls import call_progress
from sse_proxy.core.streammeta import StreamMeta, openai_usage

__all__ = ["DIALECT", "OpenAIChatAccumulator"]

_HEAD_TRIES = 4
"""Chunks read for model and id: Azure's first chunk has them empty, the next has them."""
_SHARED_INDEX = (
    "index {i} got a second call id: two calls share one index, so a client that "
    "assembles calls by index joins them into one"
)


# The common chunk (one choice, index 0, a delta holding only ``content``, no finish reason,
# no usage) as types msgspec checks while it decodes: a chunk decodes into these exactly
# when it is that chunk, so the per-token path asks no question of it in Python. gc=False:
# one chunk per token makes these the most frequent allocations of a stream; untracked,
# they neither trigger nor lengthen garbage collections (no cycles here).
class _Delta(msgspec.Struct, gc=False):
    content: str
    reasoning_content: None = None
    reasoning: None = None
    tool_calls: None = None


class _ChoiceChunk(msgspec.Struct, gc=False):
    delta: _Delta
    index: Literal[0] = 0
    finish_reason: None = None


class _Chunk(msgspec.Struct, gc=False):
    """Just the fields the batch path needs; msgspec skips the rest without building them."""

    choices: Annotated[list[_ChoiceChunk], msgspec.Meta(min_length=1, max_length=1)]
    usage: None = None  # vLLM's continuous usage: such a chunk takes the general path


_decode_chunk = msgspec.json.Decoder(_Chunk).decode


def _common_run(payloads: list[bytes]) -> list[str]:
    """The contents of the common chunks that open ``payloads``, up to the first other."""
    contents = []
    for p in payloads:
        try:
            contents.append(_decode_chunk(p).choices[0].delta.content)
        except (ValueError, msgspec.MsgspecError):
            break
    return contents


@dataclass(slots=True)
class _Choice:
    content: list[str]
    reasoning: list[str] = field(default_factory=list)
    tool_calls: dict[int, ToolCall] = field(default_factory=dict)
    finish_reason: str | None = None


class OpenAIChatAccumulator(JsonAccumulator):
    """Accumulates every choice: content, reasoning content and tool-call arguments.

    ``text`` is the content of the lowest choice index (choice 0 for ``n=1``); all choices
    are in :meth:`details`.
    """

    def __init__(self, alerts: list[Alert], *, keep_text: bool = True) -> None:
        super().__init__(alerts, keep_text=keep_text)
        self._choices: dict[int, _Choice] = {}
        self._last_offset = 0
        self._last_index = 0
        self._meta = StreamMeta()
        self._head_seen = False  # model and id are read from the first chunks only
        self._head_tries = 0
        self._content0: list[str] | None = None  # choice 0's content parts, once it exists

    def accept(self, etype: str, data: str, index: int, offset: int) -> None:
        if data == "[DONE]":
            self.terminal_seen = True
            return
        obj = self.parse(data, index, offset)
        if obj is None:
            return
        if not self._head_seen:
            self._head(obj)
        try:  # the common chunk: one choice, index 0, a delta holding only content
            (choice,) = obj["choices"]
            delta = choice["delta"]
            if (
                choice["index"] == 0
                and len(delta) == 1
                and not choice.get("finish_reason")
                and not obj.get("usage")
            ):
                content = delta["content"]
                if type(content) is str and "\ufffd" not in content:
                    self._choice(0).content.append(content)
                    return
        except (TypeError, KeyError, ValueError, AttributeError):
            pass
        self._last_offset, self._last_index = offset, index
        usage = obj.get("usage")
        if usage:  # the last chunk with stream_options.include_usage (choices empty)
            openai_usage(self._meta, usage)
        choices = obj.get("choices")
        if not choices:
            if "error" in obj:
                self.error_event(obj, index, offset)
            return
        if type(choices) is not list:
            return
        for ch in choices:
            if type(ch) is not dict:
                continue
            idx = ch.get("index", 0)
            if type(idx) is not int:
                idx = 0
            state = self._choice(idx)
            delta = ch.get("delta")
            if type(delta) is dict:
                content = delta.get("content")
                if content and type(content) is str:
                    state.content.append(content)
                    if "\ufffd" in content:
                        self._fffd(content, data, index, offset)
                # DeepSeek and vLLM say reasoning_content, OpenRouter and Ollama reasoning
                for key in ("reasoning_content", "reasoning"):
                    reasoning = delta.get(key)
                    if reasoning and type(reasoning) is str:
                        state.reasoning.append(reasoning)
                        self._fffd(reasoning, data, index, offset)
                calls = delta.get("tool_calls")
                if calls and type(calls) is list:
                    self._tool_deltas(state, calls, data, index, offset)
            reason = ch.get("finish_reason")
            if reason:
                state.finish_reason = text_of(reason)
                for call in state.tool_calls.values():  # the choice is done: so are its calls
                    self.check_tool_call(call, offset, index)

    def accept_batch(self, payloads: list[bytes], index: int, pos: int, extra: int) -> int:
        """The common run: one choice, index 0, a delta holding only ``content``.

        The framer has checked the bytes (valid UTF-8, no U+FFFD). Each chunk goes
        straight into the typed structs above with msgspec, faster than building dicts
        (bench/bench_core.py measures it), and decodes only if it is the common chunk. The run is
        taken up to the first chunk of any other shape (``[DONE]``, broken JSON, another
        field set, a finish reason, an escaped U+FFFD), which comes back one event at a
        time with the rest.
        """
        try:
            contents = [_decode_chunk(p).choices[0].delta.content for p in payloads]
        except (ValueError, msgspec.MsgspecError):
            contents = _common_run(payloads)
        text = "".join(contents)
        if "\ufffd" in text:  # a JSON escape: the general path attributes it
            contents = contents[: next(i for i, c in enumerate(contents) if "\ufffd" in c)]
            text = "".join(contents)
        if not contents:
            return 0
        self._choice(0).content.append(text)
        if not self._head_seen:
            head = json_loads(payloads[0])
            self._head(head if type(head) is dict else {})
        return len(contents)

    def accept_one(self, payload: bytes, index: int, pos: int) -> bool:
        """:meth:`accept_batch` for a batch of one, in as few steps: this is per token."""
        try:
            content = _decode_chunk(payload).choices[0].delta.content
        except (ValueError, msgspec.MsgspecError):
            return False
        if "\ufffd" in content:  # an escape: the general path locates it
            return False
        parts = self._content0
        if parts is None or not self._head_seen:  # the first time: the batch path sets up
            return self.accept_batch([payload], index, pos, 8) == 1
        parts.append(content)
        return True

    def _choice(self, idx: int) -> _Choice:
        state = self._choices.get(idx)
        if state is None:
            state = self._choices[idx] = _Choice(self.text_parts())
            if idx == 0:
                self._content0 = state.content
        return state

    def _head(self, obj: dict[str, Any]) -> None:
        """Model and id from the first chunks that carry them (a few at most)."""
        meta = self._meta
        meta.head(obj)
        self._head_tries += 1
        self._head_seen = self._head_tries >= _HEAD_TRIES or (
            meta.response_model is not None and meta.response_id is not None
        )

    def _tool_deltas(
        self, state: _Choice, calls: list[Any], data: str, index: int, offset: int
    ) -> None:
        """One chunk's tool-call fragments, placed by ``index``; contradictions noted."""
        for tc in calls:
            if type(tc) is not dict:
                continue
            given = tc.get("id")
            cid = text_of(given) if given else None
            given_index = tc.get("index")
            unindexed = type(given_index) is not int
            if isinstance(given_index, int) and not isinstance(given_index, bool):
                i = given_index
            else:  # some compatible servers omit it: a new id starts a new call
                last = max(state.tool_calls, default=-1)
                known = state.tool_calls.get(last)
                i = last + 1 if last < 0 or (cid and known and cid != known.id) else last
            call = state.tool_calls.get(i)
            if call is None:
                call = state.tool_calls[i] = ToolCall(key=str(i), index=i)
            if unindexed:
                call.inconsistent(
                    "a tool-call fragment came without its index, so a client that "
                    "assembles calls by index cannot place it"
                )
            if cid:
                if call.id is None:
                    call.id = cid
                elif cid != call.id:
                    call.inconsistent(_SHARED_INDEX.format(i=i))
            fn = tc.get("function")
            if type(fn) is dict:
                name = fn.get("name")
                if name:
                    name = text_of(name)
                    if call.name is None:
                        call.name = name
                    elif name != call.name:
                        call.inconsistent(_SHARED_INDEX.format(i=i))
                args = fn.get("arguments")
                if args and type(args) is str:
                    call.parts.append(args)
                    self._fffd(args, data, index, offset)

    @property
    def tool_progress(self) -> int:
        return call_progress(c for st in self._choices.values() for c in st.tool_calls.values())

    def stream_meta(self) -> StreamMeta:
        """Model, id and usage as sent; one finish reason per choice that gave one."""
        self._meta.finish_reasons = [
            c.finish_reason[:200] for _, c in sorted(self._choices.items()) if c.finish_reason
        ]
        return self._meta

    def finish(self) -> None:
        for state in self._choices.values():
            self.check_tool_calls(
                list(state.tool_calls.values()), self._last_offset, self._last_index
            )

    @property
    def text(self) -> str:
        if not self._choices:
            return ""
        return "".join(self._choices[min(self._choices)].content)

    @property
    def text_length(self) -> int:
        """Characters of :attr:`text` (the lowest choice only), kept or merely counted."""
        if self.keep_text or not self._choices:
            return super().text_length
        self.compact()
        content = self._choices[min(self._choices)].content
        return getattr(content, "chars", 0) + sum(map(len, content))

    @property
    def reasoning(self) -> str:
        """``reasoning_content`` of the lowest choice, kept apart from :attr:`text`."""
        if not self._choices:
            return ""
        return "".join(self._choices[min(self._choices)].reasoning)

    @property
    def reasoning_length(self) -> int:
        return len(self.reasoning)

    def details(self) -> dict[str, Any]:
        return {
            "reasoning": self.reasoning,
            "choices": [
                {
                    "index": idx,
                    "content": "".join(c.content),
                    "reasoning_content": "".join(c.reasoning),
                    "finish_reason": c.finish_reason,
                    "tool_calls": [
                        {"index": i, "id": t.id, "name": t.name, "arguments": t.arguments}
                        for i, t in sorted(c.tool_calls.items())
                    ],
                }
                for idx, c in sorted(self._choices.items())
            ],
        }


DIALECT: Final = Dialect(
    name="openai",
    title="OpenAI Chat Completions",
    accumulator=OpenAIChatAccumulator,
    aliases=("openai_chat", "openai-chat", "chat"),
    path_suffixes=("/chat/completions",),
    example_path="/v1/chat/completions",
    example_body={
        "model": "gpt-4o-mini",
        "stream": True,
        "messages": [{"role": "user", "content": "Say hello"}],
    },
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
    terminal_marker="[DONE]",
    terminal_frame=b"data: [DONE]",
    error_frame=b'data: {"error": {"message": "The server had an error while processing your '
    b'request.", "type": "server_error", "param": null, "code": null}}\n\n',
    # the chunk is reported; without [DONE] after it the stream is also truncated
    error_ends_stream=False,
)
"""OpenAI Chat Completions and the many servers compatible with it."""
