"""Canonical fixture content: one multilingual answer and the exact wire bytes that carry it.

Tests, benchmarks, the demo, the mock upstream and the client-test harness all build their
streams here, so "the expected text" means the same string everywhere. Everything is pure
and deterministic (no I/O, no clock): the same call returns the same bytes, byte for byte.

The answer deliberately contains 2-, 3- and 4-byte UTF-8 characters, an emoji modifier
sequence split across two deltas, deltas with leading and trailing spaces and a delta of
spaces only, because those are what naive reassembly breaks (see CONTRACT.md).
"""

from __future__ import annotations

import json
import random
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Final

__all__ = [
    "DIALECTS",
    "FAULTS",
    "FAULT_ALERTS",
    "FIRST_TEXT_DIALECTS",
    "MESSAGE",
    "NEWLINES",
    "OVERSIZED_BYTES",
    "SHORT_MESSAGE",
    "SHORT_TOKENS",
    "TOKENS",
    "anthropic_stream",
    "clean_stream",
    "expected_alerts",
    "expected_text",
    "faulty_stream",
    "gemini_stream",
    "openai_chat_stream",
    "openai_responses_stream",
    "pattern_bytes",
    "raw_text_stream",
    "split_reads",
]

TOKENS: Final[tuple[str, ...]] = (
    # English: leading-space tokens, the classic trim() victim.
    "The", " quick", " brown", " fox", " 🦊", " jumps", " over", " the", " lazy", " dog", ".",
    # A delta made of spaces only (two-space sentence gap).
    "  ",
    # French: a word split into sub-word pieces, a 2-byte char alone, a 3-byte euro sign.
    "En", " Fran", "ç", "ais", ",", " un", " café", " na", "ïve", " coûte", " 3", ",50", " €",
    " —", " très", " bien", "! ",  # <- ends in a space
    # Spanish, German, Russian, then a paragraph break (multi-line data in the raw text dialect).
    "El", " niño", " dice", " «", "ma", "ñana", "».", " Grü", "ße", " aus", " Zür", "ich", ";",
    " Привет", ",", " мир", "!", "\n\n",
    # Greek (2-byte letters split mid-word).
    "Ελ", "λη", "νι", "κά", ":", " Καλη", "μέρα", " κόσμε", ".", " ",
    # Japanese, Chinese, Korean (3-byte), sub-word pieces.
    "日本", "語", "で", "は", "「", "こん", "にち", "は", "」", "と", "言", "います", "。",
    " 中文", "：", "你好", "，", "世界", "。", " 한국어", ":", " 안녕", "하세요", ".",
    " Prices", ":", " £", "4", " or", " ¥", "500", ",", " roughly", " ≈", " π", "².",
    # Astral plane: a musical symbol and an emoji + skin-tone modifier split across deltas.
    " Music", ": ", "𝄞", ";", " thumbs", " up", " 👍", "🏽", " and", " a", " smile", " 🙂", " ",
    "—", " end", " of", " answer", ".",
)  # fmt: skip
"""The canonical answer as LLM-like deltas; ``"".join(TOKENS) == MESSAGE``."""

MESSAGE: Final[str] = "".join(TOKENS)
"""The canonical answer text, exactly as a correct reassembler must produce it."""

SHORT_TOKENS: Final[tuple[str, ...]] = (
    "The", " quick", " brown", " fox ", "🦊", " says", " caf", "é", " —", " ok", ".",
)  # fmt: skip
"""A 43-byte answer (one 2-, one 3-, one 4-byte char) small enough to cut at every offset."""

SHORT_MESSAGE: Final[str] = "".join(SHORT_TOKENS)
"""``"".join(SHORT_TOKENS)``."""

DIALECTS: Final[tuple[str, ...]] = ("openai", "responses", "anthropic", "gemini", "text")
"""Stream dialects, named as the core's accumulators name them."""

NEWLINES: Final[tuple[str, ...]] = ("\n", "\r\n", "\r")
"""The three line endings the SSE grammar accepts."""

FIRST_TEXT_DIALECTS: Final[tuple[str, ...]] = ("openai", "text")
"""Dialects whose first event can carry text: OpenAI Chat (the role chunk with content, as
several compatible servers send it) and raw text (always). Responses and Anthropic open
with ``response.created`` / ``message_start``, which by protocol carry no text."""

OVERSIZED_BYTES: Final[int] = 4 * 1024 * 1024 + 1
"""Payload size of the extra frame in the ``oversized`` fault: past any sane frame limit."""

FAULTS: Final[Mapping[str, str]] = MappingProxyType(
    {
        "literal_fffd": "upstream sends an encoded U+FFFD inside a delta (already lost upstream)",
        "invalid_utf8": "a delta holds invalid UTF-8: a truncated 4-byte sequence and a 0xFF byte",
        "unterminated": "the stream ends mid-frame, without its terminal marker",
        "crlf": "CRLF line endings throughout, otherwise clean",
        "mixed_newlines": "frames rotate between LF, CRLF and bare CR line endings",
        "truncated": "the stream ends after a complete frame but without its terminal marker",
        "invalid_json": "one delta payload is cut short and is not valid JSON",
        "json_escape_fffd": 'a delta holds the JSON escape "\\ufffd" (already lost upstream)',
        "oversized": f"one extra non-text frame with a {OVERSIZED_BYTES}-byte data line",
    }
)
"""Fault name -> what is wrong with the stream ``faulty_stream(name)`` returns."""

FAULT_ALERTS: Final[Mapping[str, tuple[str, ...]]] = MappingProxyType(
    {
        "literal_fffd": ("sse.replacement_char",),
        "invalid_utf8": ("sse.replacement_char",),
        "unterminated": ("sse.unterminated_frame", "sse.truncated"),
        "crlf": ("sse.crlf_framing",),
        "mixed_newlines": ("sse.crlf_framing",),
        "truncated": ("sse.truncated",),
        "invalid_json": ("sse.invalid_json",),
        "json_escape_fffd": ("sse.replacement_char",),
        "oversized": ("sse.oversized_frame",),
    }
)
"""Fault name -> alert events it must raise in a JSON dialect; :func:`expected_alerts` knows
that the ``text`` dialect (no terminal marker, no JSON) cannot raise the last two kinds."""

# Tokens the faults corrupt, by value (each occurs once in TOKENS).
_FFFD_DELTA = "ç"
_BROKEN_JSON_DELTA = " lazy"
_FOX_DELTA = " 🦊"
_EURO_DELTA = " €"

_CREATED = 1_700_000_000
_SIGNATURE = "EqQBCgIYAhIM1gbcDa9GJwZA2b3hGgxBdjrkzLoky3dl1pkiMOYds"


def _dumps(obj: object) -> str:
    """JSON as the vendors send it: UTF-8 text unescaped, compact separators."""
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


def _encode(text: str) -> bytes:
    """UTF-8, except that surrogate escapes become the raw invalid bytes they stand for."""
    return text.encode("utf-8", "surrogateescape")


def _check_newline(newline: str) -> None:
    if newline not in NEWLINES:
        raise ValueError(f"newline must be one of {NEWLINES!r}, not {newline!r}")


def _check_dialect(dialect: str) -> None:
    if dialect not in DIALECTS:
        raise ValueError(f"unknown dialect {dialect!r}; valid: {', '.join(DIALECTS)}")


def _check_fault(fault: str) -> None:
    if fault not in FAULTS:
        raise ValueError(f"unknown fault {fault!r}; valid: {', '.join(FAULTS)}")


def _fragments(text: str) -> list[str]:
    """Cut a JSON argument string into uneven pieces, like a model streaming a tool call."""
    sizes = (1, 4, 7, 3, 11, 5)
    out: list[str] = []
    pos = 0
    i = 0
    while pos < len(text):
        out.append(text[pos : pos + sizes[i % len(sizes)]])
        pos += sizes[i % len(sizes)]
        i += 1
    return out


def _tuple(pieces: str | Sequence[str]) -> tuple[str, ...]:
    """A lone string means one delta, not one delta per character."""
    return (pieces,) if isinstance(pieces, str) else tuple(pieces)


# A frame is (event name or None, data text); data with "\n" becomes several data lines.
_Frame = tuple[str | None, str]


def _frame_text(frame: _Frame, newline: str) -> str:
    event, data = frame
    lines = [] if event is None else [f"event: {event}"]
    lines.extend(f"data: {line}" for line in data.split("\n"))
    return "".join(line + newline for line in lines) + newline


def _serialize(frames: Sequence[_Frame], newline: str | Sequence[str]) -> bytes:
    """Frames to wire bytes; a sequence of newlines is rotated frame by frame."""
    endings = (newline,) if isinstance(newline, str) else tuple(newline)
    return b"".join(
        _encode(_frame_text(frame, endings[i % len(endings)])) for i, frame in enumerate(frames)
    )


# --------------------------------------------------------------------------- OpenAI Chat


def _openai_chat_frames(
    tokens: Sequence[str],
    *,
    choices: int = 1,
    model: str = "gpt-4o-mini-2024-07-18",
    include_done: bool = True,
    reasoning: str | Sequence[str] | None = None,
    tool_call: tuple[str, str] | None = None,
    include_usage: bool = False,
    first_text: bool = False,
) -> list[_Frame]:
    if choices < 1:
        raise ValueError("choices must be >= 1")
    head: dict[str, object] = {
        "id": "chatcmpl-mock0000000000000000000001",
        "object": "chat.completion.chunk",
        "created": _CREATED,
        "model": model,
        "system_fingerprint": "fp_mock0001",
    }

    def chunk(index: int, delta: dict[str, object], finish: str | None = None) -> _Frame:
        obj: dict[str, object] = dict(head)
        obj["choices"] = [
            {"index": index, "delta": delta, "logprobs": None, "finish_reason": finish}
        ]
        if include_usage:
            obj["usage"] = None
        return (None, _dumps(obj))

    # Each step is (delta, finish_reason); every step is sent once per choice.
    # first_text: the role chunk already carries the first token, as several
    # OpenAI-compatible servers send it, so a client that drops the first event loses text.
    opening = tokens[0] if first_text and tokens else ""
    if first_text:
        tokens = tokens[1:]
    steps: list[tuple[dict[str, object], str | None]] = [
        ({"role": "assistant", "content": opening, "refusal": None}, None)
    ]
    for piece in _tuple(reasoning) if reasoning is not None else ():
        steps.append(({"content": None, "reasoning_content": piece}, None))
    steps.extend(({"content": token}, None) for token in tokens)
    if tool_call is not None:
        name, arguments = tool_call
        first = {
            "index": 0,
            "id": "call_mock0000000000000001",
            "type": "function",
            "function": {"name": name, "arguments": ""},
        }
        steps.append(({"tool_calls": [first]}, None))
        steps.extend(
            ({"tool_calls": [{"index": 0, "function": {"arguments": frag}}]}, None)
            for frag in _fragments(arguments)
        )
    steps.append(({}, "tool_calls" if tool_call is not None else "stop"))

    # n > 1: OpenAI sends one chunk per choice, interleaved step by step.
    frames = [chunk(i, delta, finish) for delta, finish in steps for i in range(choices)]
    if include_usage:
        usage = {
            "prompt_tokens": 12,
            "completion_tokens": len(tokens) * choices,
            "total_tokens": 12 + len(tokens) * choices,
        }
        frames.append((None, _dumps({**head, "choices": [], "usage": usage})))
    if include_done:
        frames.append((None, "[DONE]"))
    return frames


def openai_chat_stream(
    tokens: Sequence[str] = TOKENS,
    *,
    newline: str = "\n",
    choices: int = 1,
    model: str = "gpt-4o-mini-2024-07-18",
    include_done: bool = True,
    reasoning: str | Sequence[str] | None = None,
    tool_call: tuple[str, str] | None = None,
    include_usage: bool = False,
    first_text: bool = False,
) -> bytes:
    """An OpenAI Chat Completions stream body: role chunk, deltas, finish chunk, ``[DONE]``.

    ``choices > 1`` interleaves one chunk per choice, each choice streaming the same tokens.
    ``reasoning`` deltas (``reasoning_content``) come before the content; ``tool_call`` is
    ``(name, arguments_json)`` streamed as ``tool_calls`` fragments after it.
    """
    _check_newline(newline)
    frames = _openai_chat_frames(
        tokens,
        choices=choices,
        model=model,
        include_done=include_done,
        reasoning=reasoning,
        tool_call=tool_call,
        include_usage=include_usage,
        first_text=first_text,
    )
    return _serialize(frames, newline)


# ------------------------------------------------------------------- OpenAI Responses


def _responses_frames(
    tokens: Sequence[str],
    *,
    function_call: tuple[str, str] | None = None,
    model: str = "gpt-4o-mini-2024-07-18",
    final_text: str | None = None,
) -> list[_Frame]:
    resp_id = "resp_mock0000000000000001"
    msg_id = "msg_mock0000000000000001"
    text = "".join(tokens) if final_text is None else final_text
    frames: list[_Frame] = []

    def emit(kind: str, **fields: object) -> None:
        frames.append((kind, _dumps({"type": kind, "sequence_number": len(frames), **fields})))

    def response(status: str, output: list[object]) -> dict[str, object]:
        return {
            "id": resp_id,
            "object": "response",
            "created_at": _CREATED,
            "status": status,
            "model": model,
            "output": output,
        }

    part_done = {"type": "output_text", "text": text, "annotations": []}
    msg_done = {
        "id": msg_id,
        "type": "message",
        "status": "completed",
        "role": "assistant",
        "content": [part_done],
    }
    ids = {"item_id": msg_id, "output_index": 0, "content_index": 0}
    emit("response.created", response=response("in_progress", []))
    emit("response.in_progress", response=response("in_progress", []))
    emit(
        "response.output_item.added",
        output_index=0,
        item={**msg_done, "status": "in_progress", "content": []},
    )
    emit(
        "response.content_part.added",
        **ids,
        part={"type": "output_text", "text": "", "annotations": []},
    )
    for token in tokens:
        emit("response.output_text.delta", **ids, delta=token, logprobs=[])
    emit("response.output_text.done", **ids, text=text, logprobs=[])
    emit("response.content_part.done", **ids, part=part_done)
    emit("response.output_item.done", output_index=0, item=msg_done)
    output: list[object] = [msg_done]
    if function_call is not None:
        name, arguments = function_call
        fc = {
            "id": "fc_mock0000000000000001",
            "type": "function_call",
            "status": "in_progress",
            "arguments": "",
            "call_id": "call_mock0000000000000001",
            "name": name,
        }
        emit("response.output_item.added", output_index=1, item=fc)
        for frag in _fragments(arguments):
            emit(
                "response.function_call_arguments.delta",
                item_id=fc["id"],
                output_index=1,
                delta=frag,
            )
        emit(
            "response.function_call_arguments.done",
            item_id=fc["id"],
            output_index=1,
            arguments=arguments,
        )
        fc_done = {**fc, "status": "completed", "arguments": arguments}
        emit("response.output_item.done", output_index=1, item=fc_done)
        output.append(fc_done)
    emit("response.completed", response=response("completed", output))
    return frames


def openai_responses_stream(
    tokens: Sequence[str] = TOKENS,
    *,
    newline: str = "\n",
    function_call: tuple[str, str] | None = None,
) -> bytes:
    """An OpenAI Responses API stream: ``event:`` + ``data:`` frames, ``sequence_number``ed.

    Text arrives as ``response.output_text.delta``; ``function_call`` is ``(name,
    arguments_json)`` streamed as ``response.function_call_arguments.delta`` fragments.
    """
    _check_newline(newline)
    return _serialize(_responses_frames(tokens, function_call=function_call), newline)


# ------------------------------------------------------------------------- Anthropic


def _anthropic_frames(
    tokens: Sequence[str],
    *,
    tool_use: tuple[str, str] | None = None,
    thinking: str | Sequence[str] | None = None,
    model: str = "claude-3-5-sonnet-20241022",
) -> list[_Frame]:
    frames: list[_Frame] = []

    def emit(kind: str, **fields: object) -> None:
        frames.append((kind, _dumps({"type": kind, **fields})))

    emit(
        "message_start",
        message={
            "id": "msg_mock0000000000000001",
            "type": "message",
            "role": "assistant",
            "model": model,
            "content": [],
            "stop_reason": None,
            "stop_sequence": None,
            "usage": {"input_tokens": 12, "output_tokens": 1},
        },
    )
    index = 0
    pinged = False

    def ping_once() -> None:
        # Anthropic sends one ping right after the first content_block_start.
        nonlocal pinged
        if not pinged:
            frames.append(("ping", '{"type": "ping"}'))
            pinged = True

    if thinking is not None:
        emit("content_block_start", index=index, content_block={"type": "thinking", "thinking": ""})
        ping_once()
        for piece in _tuple(thinking):
            emit(
                "content_block_delta",
                index=index,
                delta={"type": "thinking_delta", "thinking": piece},
            )
        emit(
            "content_block_delta",
            index=index,
            delta={"type": "signature_delta", "signature": _SIGNATURE},
        )
        emit("content_block_stop", index=index)
        index += 1
    emit("content_block_start", index=index, content_block={"type": "text", "text": ""})
    ping_once()
    for token in tokens:
        emit("content_block_delta", index=index, delta={"type": "text_delta", "text": token})
    emit("content_block_stop", index=index)
    if tool_use is not None:
        index += 1
        name, input_json = tool_use
        emit(
            "content_block_start",
            index=index,
            content_block={
                "type": "tool_use",
                "id": "toolu_mock000000000000000001",
                "name": name,
                "input": {},
            },
        )
        for frag in _fragments(input_json):
            emit(
                "content_block_delta",
                index=index,
                delta={"type": "input_json_delta", "partial_json": frag},
            )
        emit("content_block_stop", index=index)
    emit(
        "message_delta",
        delta={"stop_reason": "tool_use" if tool_use else "end_turn", "stop_sequence": None},
        usage={"output_tokens": len(tokens)},
    )
    emit("message_stop")
    return frames


def anthropic_stream(
    tokens: Sequence[str] = TOKENS,
    *,
    newline: str = "\n",
    tool_use: tuple[str, str] | None = None,
    thinking: str | Sequence[str] | None = None,
) -> bytes:
    """An Anthropic Messages stream: message_start ... ping ... deltas ... message_stop.

    ``thinking`` deltas form block 0 (with a signature) before the text block;
    ``tool_use`` is ``(name, input_json)`` streamed as ``input_json_delta`` fragments.
    """
    _check_newline(newline)
    return _serialize(_anthropic_frames(tokens, tool_use=tool_use, thinking=thinking), newline)


# ---------------------------------------------------------------------------- Gemini


def _gemini_frames(
    tokens: Sequence[str],
    *,
    thinking: str | Sequence[str] | None = None,
    function_call: tuple[str, str] | None = None,
    model: str = "gemini-2.0-flash",
) -> list[_Frame]:
    """One GenerateContentResponse per delta; the last, text-less one finishes."""
    frames: list[_Frame] = []
    prompt_tokens = 12

    def emit(parts: list[dict[str, object]], done: int, finish: str | None = None) -> None:
        cand: dict[str, object] = {"content": {"parts": parts, "role": "model"}}
        if finish is not None:
            cand["finishReason"] = finish
        cand["index"] = 0
        usage: dict[str, object] = {"promptTokenCount": prompt_tokens}
        if done:
            usage["candidatesTokenCount"] = done
        usage["totalTokenCount"] = prompt_tokens + done
        obj = {
            "candidates": [cand],
            "usageMetadata": usage,
            "modelVersion": model,
            "responseId": "mockGeminiResponse0001",
        }
        frames.append((None, _dumps(obj)))

    done = 0
    for piece in _tuple(thinking) if thinking is not None else ():
        emit([{"text": piece, "thought": True}], done)
    for token in tokens:
        done += 1
        emit([{"text": token}], done)
    if function_call is not None:
        name, arguments = function_call
        emit([{"functionCall": {"name": name, "args": json.loads(arguments)}}], done)
    emit([{"text": ""}], done, "STOP")
    return frames


def gemini_stream(
    tokens: Sequence[str] = TOKENS,
    *,
    newline: str = "\n",
    thinking: str | Sequence[str] | None = None,
    function_call: tuple[str, str] | None = None,
) -> bytes:
    """A Gemini ``streamGenerateContent?alt=sse`` body: one ``data:`` chunk per delta.

    ``thinking`` pieces come first as thought parts; ``function_call`` is ``(name,
    arguments_json)`` sent whole, as Gemini does; the last chunk has an empty text part and
    ``finishReason: STOP`` with the final usage. (Google's servers end lines with CRLF;
    pass ``newline="\r\n"`` for that.)
    """
    _check_newline(newline)
    frames = _gemini_frames(tokens, thinking=thinking, function_call=function_call)
    return _serialize(frames, newline)


# -------------------------------------------------------------------------- raw text


def _text_frames(tokens: Sequence[str], *, include_done: bool = False) -> list[_Frame]:
    frames: list[_Frame] = [(None, token) for token in tokens]
    if include_done:
        frames.append((None, "[DONE]"))
    return frames


def raw_text_stream(
    tokens: Sequence[str] = TOKENS, *, newline: str = "\n", include_done: bool = False
) -> bytes:
    """One ``data: <token>`` event per token, unquoted.

    The grammar strips exactly one space after the colon, so ``" quick"`` is written as
    ``data:  quick`` (two spaces); a token with ``"\\n"`` becomes several ``data:`` lines.
    """
    _check_newline(newline)
    return _serialize(_text_frames(tokens, include_done=include_done), newline)


# ---------------------------------------------------------------------- accessors


def _frames(
    dialect: str,
    tokens: Sequence[str],
    final_text: str | None = None,
    *,
    first_text: bool = False,
) -> list[_Frame]:
    _check_dialect(dialect)
    if dialect == "openai":
        return _openai_chat_frames(tokens, first_text=first_text)
    if dialect == "responses":
        return _responses_frames(tokens, final_text=final_text)
    if dialect == "anthropic":
        return _anthropic_frames(tokens)
    if dialect == "gemini":
        return _gemini_frames(tokens)
    return _text_frames(tokens)


def clean_stream(
    dialect: str = "openai",
    tokens: Sequence[str] = TOKENS,
    *,
    newline: str = "\n",
    first_text: bool = False,
) -> bytes:
    """The default, fault-free stream of ``dialect`` carrying ``tokens``.

    ``first_text``: the stream's first event carries text (see :data:`FIRST_TEXT_DIALECTS`),
    so a client that drops the first event (e.g. after a BOM) loses text and shows it.
    """
    _check_newline(newline)
    return _serialize(_frames(dialect, tokens, first_text=first_text), newline)


def _replace(tokens: Sequence[str], mapping: Mapping[str, str]) -> tuple[str, ...]:
    return tuple(mapping.get(t, t) for t in tokens)


def _fault_tokens(fault: str | None) -> tuple[str, ...]:
    """The deltas as upstream sends them; surrogate escapes stand for invalid bytes."""
    if fault in ("literal_fffd", "json_escape_fffd"):
        return _replace(TOKENS, {_FFFD_DELTA: "\ufffd"})
    if fault == "invalid_utf8":
        fox = _FOX_DELTA.encode()[:-1].decode("utf-8", "surrogateescape")  # 3 of 4 bytes
        return _replace(TOKENS, {_FOX_DELTA: fox, _EURO_DELTA: " \udcff"})  # raw 0xFF
    return TOKENS


def _padding_frame(dialect: str) -> _Frame:
    """A huge frame that carries no message text, so dropping it loses nothing."""
    pad = "x" * OVERSIZED_BYTES
    if dialect == "openai":
        return (
            None,
            _dumps({"id": "chatcmpl-pad", "object": "padding", "choices": [], "pad": pad}),
        )
    if dialect == "anthropic":
        return ("ping", _dumps({"type": "ping", "pad": pad}))
    if dialect == "responses":
        return ("response.padding", _dumps({"type": "response.padding", "pad": pad}))
    if dialect == "gemini":
        return (None, _dumps({"candidates": [], "pad": pad}))
    return ("padding", pad)


def faulty_stream(kind: str, dialect: str = "openai") -> bytes:
    """The canonical stream of ``dialect`` with fault ``kind`` (a key of :data:`FAULTS`).

    In the ``text`` dialect, which has no JSON, ``invalid_json`` yields the clean stream and
    ``json_escape_fffd`` the same bytes as ``literal_fffd``; ``truncated`` and
    ``unterminated`` cost it its last event, as it has no terminal marker to lose instead.
    """
    _check_fault(kind)
    _check_dialect(dialect)
    json_dialect = dialect != "text"
    # Faults hit the deltas only: the Responses ``*.done`` summaries keep the clean text.
    frames = _frames(dialect, _fault_tokens(kind), final_text=MESSAGE)
    if kind == "crlf":
        return _serialize(frames, "\r\n")
    if kind == "mixed_newlines":
        return _serialize(frames, NEWLINES)
    if kind == "json_escape_fffd" and json_dialect:
        frames = [(e, d.replace("\ufffd", "\\ufffd")) for e, d in frames]
    elif kind == "invalid_json" and json_dialect:
        target = _BROKEN_JSON_DELTA
        at = next(i for i, (_, d) in enumerate(frames) if _dumps(target) in d)
        event, data = frames[at]
        frames[at] = (event, data[:-2])  # the closing brackets never arrived
    elif kind == "oversized":
        frames.insert(len(frames) // 2, _padding_frame(dialect))
    elif kind == "truncated":
        frames = frames[:-1]  # the terminal marker (text: the last event)
    elif kind == "unterminated":
        if dialect == "text":
            # The last event never gets its blank line, so it must not be dispatched.
            return _serialize(frames[:-1], "\n") + _encode(f"data: {frames[-1][1]}\n")
        # Cut inside the first frame after the last text delta; the text itself is complete.
        if dialect == "openai":
            cut, partial = len(frames) - 2, b'data: {"choi'
        elif dialect == "gemini":  # inside the finishing chunk
            cut, partial = len(frames) - 1, b'data: {"candi'
        else:
            stop = "response.output_text.done" if dialect == "responses" else "content_block_stop"
            cut = next(i for i, (e, _) in enumerate(frames) if e == stop)
            nxt = _serialize([frames[cut]], "\n")
            partial = nxt[: nxt.index(b"data: ") + 12]
        return _serialize(frames[:cut], "\n") + partial
    return _serialize(frames, "\n")


def expected_alerts(dialect: str = "openai", fault: str | None = None) -> tuple[str, ...]:
    """The alert events a correct reassembler raises for ``faulty_stream(fault, dialect)``."""
    _check_dialect(dialect)
    if fault is None:
        return ()
    _check_fault(fault)
    alerts = FAULT_ALERTS[fault]
    if dialect == "text":  # no terminal marker, no JSON
        alerts = tuple(a for a in alerts if a not in ("sse.truncated", "sse.invalid_json"))
    return alerts


def expected_text(dialect: str = "openai", fault: str | None = None) -> str:
    """The text a correct reassembler must produce from ``faulty_stream(fault, dialect)``.

    ``fault=None`` is the clean stream (:data:`MESSAGE`); lost characters appear as U+FFFD.
    """
    _check_dialect(dialect)
    if fault is None:
        return MESSAGE
    _check_fault(fault)
    tokens = list(_fault_tokens(fault))
    if fault == "invalid_utf8":
        tokens = [_encode(t).decode("utf-8", "replace") for t in tokens]
    if dialect == "text":
        if fault in ("truncated", "unterminated"):
            tokens = tokens[:-1]
    elif fault == "invalid_json":
        tokens.remove(_BROKEN_JSON_DELTA)
    return "".join(tokens)


def split_reads(data: bytes, seed: int, *, min_size: int = 1, max_size: int = 64) -> list[bytes]:
    """Cut ``data`` into reads of random sizes in ``[min_size, max_size]``, seeded.

    Realistic socket reads: they ignore character and frame boundaries, so multi-byte
    characters and frames straddle reads. ``b"".join(result) == data`` always.
    """
    if min_size < 1 or max_size < min_size:
        raise ValueError("need 1 <= min_size <= max_size")
    rng = random.Random(seed)
    out: list[bytes] = []
    pos = 0
    while pos < len(data):
        size = rng.randint(min_size, max_size)
        out.append(data[pos : pos + size])
        pos += size
    return out


def pattern_bytes(n: int) -> bytes:
    """``n`` deterministic, non-text bytes (every value 0-255 occurs) for pass-through tests."""
    if n < 0:
        raise ValueError("n must be >= 0")
    block = bytes((i * 73 + 41) % 256 for i in range(256 * 17))
    reps, rest = divmod(n, len(block))
    return block * reps + block[:rest]
