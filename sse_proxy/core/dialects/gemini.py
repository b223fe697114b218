"""Google Gemini streams (Generative Language API and Vertex AI, ``alt=sse``).

Each event is a whole ``GenerateContentResponse``: ``candidates[].content.parts[]`` carry
text (``"thought": true`` marks reasoning), function calls and more; the candidate that
ends carries ``finishReason``; ``usageMetadata`` comes with the chunks (the last one is
final). There is no end-of-stream marker: a stream none of whose candidates finished
(and whose prompt was not blocked) was cut short. An error is an ``{"error": {...}}``
object (``code``, ``message``, ``status``). Every chunk names the model (``modelVersion``)
and the response (``responseId``).

The Interactions API (``/interactions``) streams typed events instead, each JSON object
naming its ``event_type`` and carrying an ``event_id`` (the cursor a client resumes with:
``GET .../interactions/{id}?stream=true&last_event_id=E``): ``interaction.created``, then
per step ``step.start``, ``step.delta`` (``delta.type`` ``text``: answer text; earlier API
versions: ``content.delta``), ``step.stop``, and ``interaction.completed`` at the end (an
``error`` event ends it too). The first such event turns the accumulator into
:class:`InteractionsAccumulator`.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Final, cast

from sse_proxy.core.alerts import Alert
from sse_proxy.core.dialects.base import JsonAccumulator, ToolCall, text_of
from sse_proxy.core.dialects.descriptor import Dialect, Provider
from sse_proxy.core.streammeta import StreamMeta, gemini_counts, gemini_head

__all__ = ["DIALECT", "GeminiAccumulator", "InteractionsAccumulator"]

INTERACTION_EVENTS: Final = ("interaction.", "step.", "content.")
"""What the ``event_type`` of an Interactions event starts with (``error`` aside)."""


@dataclass(slots=True)
class _Candidate:
    text: list[str]
    thought: list[str]
    finish_reason: str | None = None
    function_calls: list[dict[str, Any]] = field(default_factory=list)


def _length(parts: list[str]) -> int:
    """Characters in a part list, whether it is a real list or a folded tally."""
    return getattr(parts, "chars", 0) + sum(map(len, parts))


class GeminiAccumulator(JsonAccumulator):
    """Text and thoughts per candidate index, finish reasons, usage and function calls.

    ``text`` is the answer text of the lowest candidate index (thought parts excluded);
    :attr:`reasoning` is its thought text, kept apart.
    """

    def __init__(self, alerts: list[Alert], *, keep_text: bool = True) -> None:
        super().__init__(alerts, keep_text=keep_text)
        self._candidates: dict[int, _Candidate] = {}
        self._usage: dict[str, Any] | None = None
        self._model: str | None = None
        self._block_reason: str | None = None
        self._meta = StreamMeta()

    def _candidate(self, idx: int) -> _Candidate:
        cand = self._candidates.get(idx)
        if cand is None:
            cand = self._candidates[idx] = _Candidate(self.text_parts(), self.text_parts())
        return cand

    def accept(self, etype: str, data: str, index: int, offset: int) -> None:
        obj = self.parse(data, index, offset)
        if obj is None:
            return
        if "event_type" in obj:  # an Interactions stream: read as one from here on
            self.__class__ = InteractionsAccumulator
            cast("InteractionsAccumulator", self).accept_event(obj, data, index, offset)
            return
        meta = self._meta
        if meta.response_model is None or meta.response_id is None:
            gemini_head(meta, obj)
        candidates = obj.get("candidates")
        if type(candidates) is list:
            for cand in candidates:
                if type(cand) is dict:
                    self._accept_candidate(cand, data, index, offset)
        elif "error" in obj:
            err = obj["error"]
            if type(err) is dict:
                kind = err.get("status") or err.get("code") or "error"
                err = {"type": text_of(kind), "message": err.get("message") or ""}
            self.error_event({"error": err}, index, offset)
            self.terminal_seen = True  # an error ends the stream; it is reported as such
        usage = obj.get("usageMetadata")
        if type(usage) is dict:
            self._usage = usage
        model = obj.get("modelVersion")
        if type(model) is str:
            self._model = model
        feedback = obj.get("promptFeedback")
        if type(feedback) is dict and feedback.get("blockReason"):
            self._block_reason = text_of(feedback["blockReason"])
            self.terminal_seen = True  # a blocked prompt gets no candidates at all

    def _accept_candidate(self, cand: dict[str, Any], data: str, index: int, offset: int) -> None:
        idx = cand.get("index", 0)
        if type(idx) is not int:
            idx = 0
        state = self._candidate(idx)
        content = cand.get("content")
        parts = content.get("parts") if type(content) is dict else None
        if type(parts) is list:
            for part in parts:
                if type(part) is not dict:
                    continue
                text = part.get("text")
                if type(text) is str and text:
                    (state.thought if part.get("thought") is True else state.text).append(text)
                    if "\ufffd" in text:
                        self._fffd(text, data, index, offset)
                call = part.get("functionCall")
                if type(call) is dict:
                    self._function_call(state, call, offset, index)
        reason = cand.get("finishReason")
        if reason:
            state.finish_reason = text_of(reason)
            self.terminal_seen = True

    def _function_call(
        self, state: _Candidate, call: dict[str, Any], offset: int, index: int
    ) -> None:
        """A function call arrives whole (its ``args`` an object): checked at once."""
        name = call.get("name")
        args = call.get("args")
        state.function_calls.append({"name": text_of(name or ""), "args": args})
        checked = ToolCall(
            key=str(len(state.function_calls) - 1),
            index=len(state.function_calls) - 1,
            name=text_of(name) if name else None,
            value={} if args is None else args,
        )
        if args is not None and type(args) is not dict:
            checked.inconsistent("functionCall.args is not an object")
        self.check_tool_call(checked, offset, index)

    @property
    def tool_progress(self) -> int:
        return sum(len(c.function_calls) for c in self._candidates.values())

    def stream_meta(self) -> StreamMeta:
        """Model and id as first sent, the last usage, one finish reason per candidate."""
        meta = self._meta
        # the last usageMetadata is the whole count; nothing of an earlier one survives it
        meta.input_tokens = meta.output_tokens = meta.cached_tokens = None
        meta.reasoning_tokens = None
        gemini_counts(meta, self._usage)
        meta.finish_reasons = [
            c.finish_reason[:200] for _, c in sorted(self._candidates.items()) if c.finish_reason
        ]
        return meta

    def _first(self) -> _Candidate | None:
        return self._candidates[min(self._candidates)] if self._candidates else None

    @property
    def text(self) -> str:
        first = self._first()
        return "" if first is None else "".join(first.text)

    @property
    def text_length(self) -> int:
        first = self._first()
        if first is None:
            return 0
        if self.keep_text:
            return len(self.text)
        self.compact()
        return _length(first.text)

    @property
    def reasoning(self) -> str:
        """Thought text of the lowest candidate, apart from the answer ("" if not kept)."""
        first = self._first()
        return "" if first is None or not self.keep_text else "".join(first.thought)

    @property
    def reasoning_length(self) -> int:
        first = self._first()
        if first is None:
            return 0
        if not self.keep_text:
            self.compact()
        return _length(first.thought)

    def details(self) -> dict[str, Any]:
        return {
            "model": self._model,
            "usage": self._usage,
            "block_reason": self._block_reason,
            "reasoning": self.reasoning,
            "candidates": [
                {
                    "index": idx,
                    "text": "".join(c.text),
                    "thought": "".join(c.thought),
                    "finish_reason": c.finish_reason,
                    "function_calls": c.function_calls,
                }
                for idx, c in sorted(self._candidates.items())
            ],
        }


class InteractionsAccumulator(GeminiAccumulator):
    """A Gemini Interactions stream: the text of its ``text`` deltas (every step's, in
    order), the interaction's id, model, status and usage, and the last ``event_id``."""

    _event_id: str | None = None  # (a class default: the class is swapped in mid-stream)

    def accept(self, etype: str, data: str, index: int, offset: int) -> None:
        obj = self.parse(data, index, offset)
        if obj is not None:
            self.accept_event(obj, data, index, offset)

    def accept_event(self, obj: dict[str, Any], data: str, index: int, offset: int) -> None:
        event_id = obj.get("event_id")
        if type(event_id) is str:
            self._event_id = event_id
        kind = obj.get("event_type")
        if kind in ("step.delta", "content.delta"):
            delta = obj.get("delta")
            if type(delta) is not dict:
                return
            text = delta.get("text")
            if delta.get("type") == "text" and type(text) is str and text:
                self._candidate(0).text.append(text)
                if "\ufffd" in text:
                    self._fffd(text, data, index, offset)
        elif kind == "error":
            err = obj.get("error")
            if type(err) is dict:
                code = err.get("status") or err.get("code") or "error"
                err = {"type": text_of(code), "message": err.get("message") or ""}
            self.error_event({"error": err}, index, offset)
            self.terminal_seen = True
        elif kind in ("interaction.created", "interaction.completed", "interaction.status_update"):
            interaction = obj.get("interaction")
            if type(interaction) is not dict:
                return
            self._meta.head(interaction)
            status = interaction.get("status")
            if kind == "interaction.completed":
                self.terminal_seen = True
                self._candidate(0).finish_reason = text_of(status or "completed")
                usage = interaction.get("usage")
                if type(usage) is dict:
                    self._usage = {
                        "promptTokenCount": usage.get("total_input_tokens"),
                        "candidatesTokenCount": usage.get("total_output_tokens"),
                        "thoughtsTokenCount": usage.get("total_thought_tokens"),
                        "cachedContentTokenCount": usage.get("total_cached_tokens"),
                    }

    @property
    def event_cursor(self) -> str | None:
        """The ``event_id`` of the last event read whole: where a resume starts after."""
        return self._event_id

    def details(self) -> dict[str, Any]:
        return {**super().details(), "last_event_id": self._event_id}


DIALECT: Final = Dialect(
    name="gemini",
    title="Google Gemini",
    accumulator=GeminiAccumulator,
    aliases=("google", "vertex", "vertexai"),
    # Generative Language API and Vertex AI alike; the Interactions API
    path_suffixes=(":streamGenerateContent", ":generateContent", "/interactions"),
    example_path="/v1beta/models/gemini-2.0-flash:streamGenerateContent?alt=sse",
    example_body={"contents": [{"role": "user", "parts": [{"text": "Say hello"}]}]},
    providers=(
        # Vertex AI paths name a project and a location; the rest is the Gemini API
        Provider(
            "gcp.vertex_ai",
            "vertex_ai",
            "generate_content",
            path_contains="/locations/",
            host_contains="aiplatform",
            base_url_env="GOOGLE_VERTEX_BASE_URL",
        ),
        Provider(
            "gcp.gemini",
            "gemini",
            "generate_content",
            host_contains="generativelanguage",
            base_url_env="GOOGLE_GEMINI_BASE_URL",
        ),
    ),
    # Not a marker in the stream: a candidate's finish reason plays that part.
    terminal_marker="finishReason",
    terminal_frame=b'"finishReason"',
    error_frame=b'data: {"error": {"code": 503, "message": "The model is overloaded. Please '
    b'try again later.", "status": "UNAVAILABLE"}}\n\n',
    error_ends_stream=True,
    resumes_by="event_id",  # Interactions: GET .../interactions/{id}?stream=true&last_event_id=
)
"""Gemini: the Generative Language API and Vertex AI (generateContent, and Interactions)."""
