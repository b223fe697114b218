"""OpenAI Chat Completions shapes: the same message as Azure, DeepSeek, OpenRouter, vLLM and
the compatible servers stream it (which one sends what, with sources:
:mod:`sse_proxy.tools.fixtures.variants`)."""

from __future__ import annotations

import copy
from typing import Any, Final

from sse_proxy.rechunk.shapes.events import Event, Stage
from sse_proxy.rechunk.shapes.openai_tools import STAGES as TOOL_STAGES
from sse_proxy.rechunk.shapes.openai_tools import choice_of as _choice
from sse_proxy.rechunk.shapes.openai_tools import delta_of as _delta
from sse_proxy.rechunk.shapes.openai_tools import fragment as _fragment
from sse_proxy.rechunk.shapes.requires import INCLUDE_USAGE, N_CHOICES

__all__ = ["STAGES"]

_SAFE: Final = {"filtered": False, "severity": "safe"}
_CONTENT_FILTER: Final = {"hate": _SAFE, "self_harm": _SAFE, "sexual": _SAFE, "violence": _SAFE}
_PROMPT_FILTER: Final = [
    {
        "prompt_index": 0,
        "content_filter_results": {
            **_CONTENT_FILTER,
            "jailbreak": {"filtered": False, "detected": False},
        },
    }
]
REASONING: Final = ("Let me", " think", " about", " this", " for", " a", " moment", "…")
"""The reasoning the reasoning variants add (kept apart from the answer by every API)."""
_PROMPT_TOKENS = 12
_HEAD_FIELDS = ("id", "object", "created", "model", "system_fingerprint")


def _content(obj: Any) -> str | None:
    """The content of a plain text chunk of choice 0 (no finish reason), else None."""
    choice = _choice(obj)
    delta = _delta(obj)
    if choice is None or delta is None or choice.get("finish_reason") or choice.get("index", 0):
        return None
    content = delta.get("content")
    return content if type(content) is str and "tool_calls" not in delta else None


def _is_finish(obj: Any) -> bool:
    """A chunk of its own that finishes choice 0 (``delta: {}``)."""
    choice = _choice(obj)
    delta = None if choice is None else choice.get("delta")
    return (
        choice is not None
        and bool(choice.get("finish_reason"))
        and not choice.get("index", 0)
        and (delta is None or delta == {})
    )


def _head(obj: dict[str, Any]) -> dict[str, Any]:
    return {k: obj[k] for k in _HEAD_FIELDS if k in obj}


def _with_choice(obj: dict[str, Any], **changes: Any) -> dict[str, Any]:
    """A copy of a one-choice chunk with fields of its choice changed."""
    new = copy.deepcopy(obj)
    new["choices"][0].update(changes)
    return new


def _usage(completion: int) -> dict[str, int]:
    return {
        "prompt_tokens": _PROMPT_TOKENS,
        "completion_tokens": completion,
        "total_tokens": _PROMPT_TOKENS + completion,
    }


def _has_choices(obj: Any) -> bool:
    return type(obj) is dict and type(obj.get("choices")) is list and bool(obj["choices"])


class _Chat(Stage):
    dialect = "openai"


class Azure(_Chat):
    """Azure OpenAI: a first chunk with ``choices: []`` and ``prompt_filter_results`` only
    (empty id and model), then ``content_filter_results`` on every choice."""

    name = "azure"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.started = False

    def take(self, event: Event) -> list[Event]:
        out: list[Event] = []
        if not self.started:
            self.started = True
            first = {
                "choices": [],
                "created": 0,
                "id": "",
                "model": "",
                "object": "",
                "prompt_filter_results": _PROMPT_FILTER,
            }
            out.append(Event.of(first, key=self.key()))
        obj = event.obj
        if not _has_choices(obj):
            return [*out, event]
        new = copy.deepcopy(obj)
        for choice in new["choices"]:
            if type(choice) is dict:
                delta = choice.get("delta")
                text = type(delta) is dict and bool(delta.get("content"))
                choice["content_filter_results"] = _CONTENT_FILTER if text else {}
        return [*out, event.changed(new)]


class AzureAsyncFilter(_Chat):
    """Azure's asynchronous content filter: now and then a choice without ``delta``, carrying
    only ``content_filter_results`` and the ``content_filter_offsets`` it checked."""

    name = "azure_async_filter"
    every = 10

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.chunks = 0
        self.chars = 0
        self.checked = 0

    def _annotation(self) -> Event:
        offsets = {
            "check_offset": self.checked,
            "start_offset": self.checked,
            "end_offset": self.chars,
        }
        self.checked = self.chars
        obj = {
            "choices": [
                {
                    "index": 0,
                    "finish_reason": None,
                    "content_filter_results": _CONTENT_FILTER,
                    "content_filter_offsets": offsets,
                }
            ],
            "created": 0,
            "id": "",
            "model": "",
            "object": "",
            "usage": None,
        }
        return Event.of(obj, key=self.key())

    def take(self, event: Event) -> list[Event]:
        content = _content(event.obj)
        if content is not None:
            self.chunks += 1
            self.chars += len(content)
            if self.chunks % self.every == 0:
                return [event, self._annotation()]
            return [event]
        if _is_finish(event.obj) and self.chars > self.checked:
            return [self._annotation(), event]
        return [event]


class IncludeUsage(_Chat):
    """``stream_options.include_usage``: ``usage: null`` on every chunk, then one last chunk
    with ``choices: []`` and the usage, before ``[DONE]``."""

    name = "include_usage"
    requires = INCLUDE_USAGE

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.head: dict[str, Any] = {}
        self.completion = 0
        self.had_usage = False

    def take(self, event: Event) -> list[Event]:
        obj = event.obj
        if event.data == "[DONE]" and not self.had_usage:
            self.had_usage = True
            final = {**self.head, "choices": [], "usage": _usage(self.completion)}
            return [Event.of(final, key=self.key()), event]
        if type(obj) is not dict:
            return [event]
        if obj.get("choices") == [] and obj.get("usage"):
            self.had_usage = True
            return [event]
        if not _has_choices(obj):
            return [event]
        self.head = _head(obj) or self.head
        if _content(obj):
            self.completion += 1
        if "usage" in obj:
            return [event]
        return [event.changed({**obj, "usage": None})]


class UsageChunks(_Chat):
    """Usage-only control chunks (``choices: []``) in the stream and at its end, as several
    compatible servers and gateways send them."""

    name = "usage_chunks"
    every = 25

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.head: dict[str, Any] = {}
        self.chunks = 0
        self.completion = 0

    def _usage_chunk(self) -> Event:
        obj = {**self.head, "choices": [], "usage": _usage(self.completion)}
        return Event.of(obj, key=self.key())

    def take(self, event: Event) -> list[Event]:
        obj = event.obj
        if event.data == "[DONE]":
            return [self._usage_chunk(), event]
        if not _has_choices(obj):
            return [event]
        self.head = _head(obj) or self.head
        if _content(obj):
            self.completion += 1
        self.chunks += 1
        if self.chunks % self.every == 1:
            return [event, self._usage_chunk()]
        return [event]


class _Reasoning(_Chat):
    """Reasoning deltas (beside ``content: null`` or empty) after the role chunk."""

    field = "reasoning_content"
    content: str | None = None
    null_on_content = True

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.done = False

    def take(self, event: Event) -> list[Event]:
        obj = event.obj
        choice = _choice(obj)
        if choice is None or choice.get("index", 0):
            return [event]
        if not self.done:
            self.done = True
            head = _head(obj)
            pieces = []
            for piece in REASONING:
                delta = {"content": self.content, self.field: piece}
                chunk = {
                    **head,
                    "choices": [
                        {"index": 0, "delta": delta, "logprobs": None, "finish_reason": None}
                    ],
                }
                pieces.append(Event.of(chunk, key=self.key()))
            return [event, *pieces]
        content_delta = _delta(obj)
        if self.null_on_content and content_delta is not None and _content(obj) is not None:
            nulled = {**content_delta, self.field: None}
            return [event.changed(_with_choice(obj, delta=nulled))]
        return [event]


class ReasoningContent(_Reasoning):
    """DeepSeek (and vLLM, SGLang): ``reasoning_content`` deltas with ``content: null``, and
    ``reasoning_content: null`` beside every content delta."""

    name = "reasoning_content"


class ReasoningField(_Reasoning):
    """Ollama and OpenRouter: the reasoning in ``reasoning``, beside an empty ``content``."""

    name = "reasoning"
    field = "reasoning"
    content = ""
    null_on_content = False


class ReasoningWithContent(_Chat):
    """Reasoning deltas before the answer, the last of them in the same chunk as the first
    piece of the answer (``{"reasoning_content": "…", "content": "The"}``), as a reasoning
    parser emits the delta in which the thinking ends and the answer begins."""

    name = "reasoning_with_content"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.done = False

    def take(self, event: Event) -> list[Event]:
        delta = _delta(event.obj)
        if self.done or delta is None or not _content(event.obj):
            return [event]
        self.done = True
        head = _head(event.obj)
        pieces = []
        for piece in REASONING[:-1]:
            delta_only = {"content": None, "reasoning_content": piece}
            chunk = {
                **head,
                "choices": [
                    {"index": 0, "delta": delta_only, "logprobs": None, "finish_reason": None}
                ],
            }
            pieces.append(Event.of(chunk))
        both = {**delta, "reasoning_content": REASONING[-1]}
        return [*pieces, event.changed(_with_choice(event.obj, delta=both), key=self.key())]


class RoleOnly(_Chat):
    """A first chunk whose delta is ``{"role": "assistant"}`` alone: no ``content`` key."""

    name = "role_only"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.done = False

    def take(self, event: Event) -> list[Event]:
        delta = _delta(event.obj)
        if self.done or delta is None or "role" not in delta:
            return [event]
        self.done = True
        obj = event.obj
        role = event.changed(_with_choice(obj, delta={"role": delta["role"]}), key=self.key())
        rest = {k: v for k, v in delta.items() if k not in ("role", "refusal")}
        if rest.get("content") or len(rest) > 1:  # it carried text: that follows on its own
            return [role, Event.of(_with_choice(obj, delta=rest))]
        return [role]


class FirstText(_Chat):
    """The first chunk carries the role and the first piece of text at once."""

    name = "first_text"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.held: Event | None = None
        self.done = False

    def take(self, event: Event) -> list[Event]:
        if self.done:
            return [event]
        delta = _delta(event.obj)
        if self.held is None:
            if delta is not None and "role" in delta and not delta.get("content"):
                self.held = event
                return []
            return [event]
        held, self.held = self.held, None
        self.done = True
        content = _content(event.obj)
        if not content:
            return [held, event]
        role_delta = _delta(held.obj) or {}
        merged = _with_choice(held.obj, delta={**role_delta, "content": content})
        return [held.changed(merged, key=self.key())]

    def release(self) -> list[Event]:
        held, self.held = self.held, None
        return [held] if held is not None else []


class FinishWithText(_Chat):
    """The finish reason comes with the last piece of text (or the last tool-call
    fragment), not in a chunk of its own."""

    name = "finish_with_text"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.held: Event | None = None

    def take(self, event: Event) -> list[Event]:
        obj = event.obj
        if _is_finish(obj) and self.held is not None:
            held, self.held = self.held, None
            choice = _choice(obj) or {}
            merged = _with_choice(held.obj, finish_reason=choice.get("finish_reason"))
            if obj.get("usage") is not None:
                merged["usage"] = obj["usage"]
            return [held.changed(merged, key=self.key())]
        out = self.release()
        if _content(obj) or _fragment(obj) is not None:
            self.held = event
            return out
        return [*out, event]

    def release(self) -> list[Event]:
        held, self.held = self.held, None
        return [held] if held is not None else []


class ChoicesN2(_Chat):
    """``n: 2``: every chunk of choice 0 followed by the same chunk of choice 1. A request
    that asked for several choices gets them from the upstream itself: nothing is added."""

    name = "choices_n2"
    requires = N_CHOICES

    def take(self, event: Event) -> list[Event]:
        if N_CHOICES.met(self.ctx.request):
            return [event]
        choice = _choice(event.obj)
        if choice is None or choice.get("index", 0) != 0:
            return [event]
        key = self.key() if _content(event.obj) else None  # the first with text is the one
        return [event, Event.of(_with_choice(event.obj, index=1), key=key)]


class OpenRouterComments(_Chat):
    """OpenRouter's ``: OPENROUTER PROCESSING`` comments, before the first chunk and now and
    then between chunks."""

    name = "openrouter_comments"
    every = 20

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.seen = 0

    def take(self, event: Event) -> list[Event]:
        self.seen += 1
        if self.seen == 1:
            first = Event.comment_frame("OPENROUTER PROCESSING", key=self.key())
            return [first, Event.comment_frame("OPENROUTER PROCESSING"), event]
        if self.seen % self.every == 0:
            return [Event.comment_frame("OPENROUTER PROCESSING"), event]
        return [event]


class VllmUsage(_Chat):
    """vLLM's ``continuous_usage_stats``: a running ``usage`` object on every chunk."""

    name = "vllm_usage"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.completion = 0

    def take(self, event: Event) -> list[Event]:
        obj = event.obj
        if not _has_choices(obj):
            return [event]
        if _content(obj) or _is_finish(obj):
            self.completion += 1 if _content(obj) else 0
        return [event.changed({**obj, "usage": _usage(self.completion)}, key=self.key())]


class UsageOnLastChoice(_Chat):
    """The final usage on the last chunk that still has choices: the one with the last text
    (or tool-call fragment), which carries the finish reason too; no usage-only chunk
    after it."""

    name = "usage_on_last_choice"

    def __init__(self, *args: Any) -> None:
        super().__init__(*args)
        self.held: Event | None = None
        self.final: Event | None = None
        self.completion = 0

    def take(self, event: Event) -> list[Event]:
        obj = event.obj
        final = self.final
        if final is not None:
            if type(obj) is dict and obj.get("choices") == [] and obj.get("usage"):
                # the upstream's own usage chunk: its usage goes on the last choice instead
                self.final = final.changed({**final.obj, "usage": obj["usage"]})
                return []
            self.final = None
            return [final, event]
        if _is_finish(obj) and self.held is not None:
            held, self.held = self.held, None
            choice = _choice(obj) or {}
            merged = _with_choice(held.obj, finish_reason=choice.get("finish_reason"))
            merged["usage"] = obj.get("usage") or _usage(self.completion)
            self.final = held.changed(merged, key=self.key())
            return []
        out = self.release()
        if _content(obj) or _fragment(obj) is not None:
            self.completion += 1
            self.held = event
            return out
        return [*out, event]

    def release(self) -> list[Event]:
        held, self.held = self.held, None
        return [held] if held is not None else []

    def end(self) -> list[Event]:
        final, self.final = self.final, None
        return [*self.release(), *([final] if final is not None else [])]


class NoIds(_Chat):
    """Chunks without ``id``, ``created`` or ``system_fingerprint`` (Gemini's
    OpenAI-compatible endpoint)."""

    name = "no_ids"

    def take(self, event: Event) -> list[Event]:
        obj = event.obj
        if type(obj) is not dict or not any(k in obj for k in ("id", "created")):
            return [event]
        new = {k: v for k, v in obj.items() if k not in ("id", "created", "system_fingerprint")}
        return [event.changed(new, key=self.key())]


class ToolCallsEmpty(_Chat):
    """``tool_calls: []`` beside the content of every text delta, as some servers fill
    the field whether or not there is a call."""

    name = "tool_calls_empty"

    def take(self, event: Event) -> list[Event]:
        delta = _delta(event.obj)
        if delta is None or not _content(event.obj):
            return [event]
        marked = {**delta, "tool_calls": []}
        return [event.changed(_with_choice(event.obj, delta=marked), key=self.key())]


STAGES: Final[tuple[type[Stage], ...]] = (
    Azure,
    AzureAsyncFilter,
    IncludeUsage,
    UsageChunks,
    ReasoningContent,
    ReasoningField,
    ReasoningWithContent,
    RoleOnly,
    FirstText,
    FinishWithText,
    ChoicesN2,
    OpenRouterComments,
    VllmUsage,
    UsageOnLastChoice,
    NoIds,
    ToolCallsEmpty,
    *TOOL_STAGES,
)
"""Every OpenAI Chat variant, in the order they are applied."""
