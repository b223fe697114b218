"""Deterministic SSE corpora for the core benchmark.

Every generator is driven by a seeded :class:`random.Random`, so a given ``(size, seed)``
always yields the same bytes, the same expected text and the same event payloads. Three
corpora share one token stream:

* ``lf``: an OpenAI Chat Completions stream (``chat.completion.chunk`` frames, ``[DONE]``);
* ``crlf``: the same stream with every line ending written ``\\r\\n``;
* ``anthropic``: an Anthropic Messages stream (``event:`` lines, ``message_start`` ...
  ``content_block_delta``/``text_delta`` ... ``message_stop``);
* ``mcp``: an MCP tool call (``event: message`` lines, as both official SDKs' servers
  write them): progress notifications and log messages carrying the tokens, then the
  JSON-RPC response whose text content is all of them.

Tokens mix ASCII words with leading spaces, 2-byte (Latin accents, Cyrillic, Greek),
3-byte (CJK, kana, Devanagari, Thai) and 4-byte (emoji, mathematical letters) characters,
newlines, tabs, quotes and backslashes; JSON is written compactly with
``ensure_ascii=False``, as both APIs do, so the raw bytes carry real UTF-8.
"""

from __future__ import annotations

import json
import random
import string
from collections.abc import Iterator
from dataclasses import dataclass

__all__ = [
    "CORPORA",
    "Corpus",
    "anthropic_corpus",
    "build",
    "crlf_corpus",
    "lf_corpus",
    "mcp_corpus",
    "reads",
]

CORPORA = ("lf", "crlf", "anthropic", "mcp")

_ASCII_WORDS = (  # noqa: SIM905 (a word list reads better as text)
    "the of and to in is that for it as with was on be by this are at from or an have not "
    "stream event token server client parse buffer chunk reassemble validate proxy latency "
    "throughput model response request header frame byte offset message content delta "
    "function argument return value error retry timeout connection upstream downstream"
).split()
_LATIN2 = "über café naïve façade señor jalapeño crème brûlée Ærø smørrebrød Łódź żółć "
_LATIN2 += "Straße Größe déjà vu fiancée coöperate"
_CYRILLIC = "привет мир поток событий сервер клиент данные сообщение ответ"
_GREEK = "γειά σου κόσμε ροή γεγονότων δεδομένα μήνυμα"
_CJK = "日本語 中文 字符 流式 传输 事件 服务器 客户端 数据 消息 응답 스트림 이벤트"
_KANA = "ストリーム イベント サーバー クライアント ひらがな カタカナ"
_INDIC = "नमस्ते दुनिया घटना धारा สวัสดี ชาวโลก"
_EMOJI = "😀 😂 🚀 🔥 ✨ 👍🏽 👨‍👩‍👧 🇯🇵 🧪 📦 🐍 🦀"
_MATH4 = "𝔸𝔹ℂ 𝒜ℬ𝒞 𝐀𝐁𝐂 𝛼𝛽𝛾 𐍈 𠜎𠜱"
_PUNCT = [".", ",", "!", "?", ":", ";", "\n", "\n\n", "\t", '"', "'", "\\", "/", " -", " (", ")"]
_CODE = [" def", " foo", "()", ":", "\n    ", " return", " {", "}", " x", " =", " 42", "`", "```"]


def _vocabulary() -> tuple[list[str], list[int]]:
    """Tokens and their weights (ASCII dominates, as in real traffic)."""
    groups: list[tuple[list[str], int]] = [
        ([" " + w for w in _ASCII_WORDS] + _ASCII_WORDS[:10], 50),
        ([" " + w for w in _LATIN2.split()], 8),
        ([" " + w for w in _CYRILLIC.split()] + list("абвгд"), 6),
        ([" " + w for w in _GREEK.split()], 4),
        (_CJK.split() + list("的一是不了人我在有他这个们中来上大为和国"), 8),
        (_KANA.split() + list("あいうえおかきくけこ"), 4),
        ([" " + w for w in _INDIC.split()], 3),
        ([" " + e for e in _EMOJI.split()] + _EMOJI.split(), 4),
        ([" " + m for m in _MATH4.split()] + _MATH4.split(), 2),
        (_PUNCT, 10),
        (_CODE, 3),
        ([*string.digits, " 2024", " 3.14"], 2),
    ]
    tokens: list[str] = []
    weights: list[int] = []
    for toks, weight in groups:
        for tok in toks:
            tokens.append(tok)
            weights.append(weight)
    return tokens, weights


_TOKENS, _WEIGHTS = _vocabulary()


def _dumps(obj: object) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(",", ":"))


@dataclass(frozen=True, slots=True)
class Corpus:
    """One SSE stream with the results every correct consumer must produce.

    ``text`` is the reassembled message text; ``payloads`` the ``data`` of every event in
    dispatch order (what a framing-only consumer sees); ``dialect`` which JSON shape it is.
    """

    name: str
    dialect: str  # "openai", "anthropic" or "mcp"
    data: bytes
    text: str
    payloads: tuple[str, ...]

    @property
    def events(self) -> int:
        return len(self.payloads)


def _token_stream(rng: random.Random) -> Iterator[str]:
    """Endless weighted tokens."""
    tokens, weights = _TOKENS, _WEIGHTS
    while True:
        yield from rng.choices(tokens, weights, k=1024)


def lf_corpus(size_mb: float = 10.0, seed: int = 1) -> Corpus:
    """An OpenAI Chat Completions SSE stream of about ``size_mb`` MB (1 MB = 10**6 bytes)."""
    rng = random.Random(seed)
    target = int(size_mb * 1_000_000)
    ident = "chatcmpl-" + "".join(rng.choices(string.ascii_letters + string.digits, k=29))
    created = 1_718_000_000 + rng.randrange(10_000_000)
    model = "gpt-4o-mini-2024-07-18"
    fingerprint = "fp_" + "".join(rng.choices("0123456789abcdef", k=10))

    def chunk(delta: dict[str, object], finish: str | None = None) -> str:
        return _dumps(
            {
                "id": ident,
                "object": "chat.completion.chunk",
                "created": created,
                "model": model,
                "system_fingerprint": fingerprint,
                "choices": [
                    {"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}
                ],
            }
        )

    payloads = [chunk({"role": "assistant", "content": "", "refusal": None})]
    parts: list[str] = []
    size = len(payloads[0]) + 8
    tail = 600  # room for the closing frames
    for tok in _token_stream(rng):
        if size >= target - tail:
            break
        p = chunk({"content": tok})
        payloads.append(p)
        parts.append(tok)
        size += len(p.encode()) + 8  # "data: " + "\n\n"
    payloads.append(chunk({}, "stop"))
    payloads.append("[DONE]")
    data = "".join(f"data: {p}\n\n" for p in payloads).encode()
    return Corpus("lf", "openai", data, "".join(parts), tuple(payloads))


def crlf_corpus(size_mb: float = 10.0, seed: int = 1, lf: Corpus | None = None) -> Corpus:
    """The ``lf`` corpus with every line ending written CRLF (payloads hold no raw LF)."""
    lf = lf or lf_corpus(size_mb, seed)
    return Corpus("crlf", lf.dialect, lf.data.replace(b"\n", b"\r\n"), lf.text, lf.payloads)


def anthropic_corpus(size_mb: float = 10.0, seed: int = 1) -> Corpus:
    """An Anthropic Messages SSE stream of about ``size_mb`` MB, one text content block."""
    rng = random.Random(seed + 1_000_003)
    target = int(size_mb * 1_000_000)
    msg_id = "msg_01" + "".join(rng.choices(string.ascii_letters + string.digits, k=22))
    frames: list[tuple[str, str]] = []

    def add(etype: str, obj: dict[str, object]) -> None:
        frames.append((etype, _dumps(obj)))

    add(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": msg_id,
                "type": "message",
                "role": "assistant",
                "model": "claude-sonnet-4-20250514",
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": {"input_tokens": 2095, "output_tokens": 1},
            },
        },
    )
    add(
        "content_block_start",
        {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": ""}},
    )
    add("ping", {"type": "ping"})
    parts: list[str] = []
    size = sum(len(f"event: {t}\ndata: {d}\n\n".encode()) for t, d in frames)
    tail = 600
    tokens = _token_stream(rng)
    n_out = 0
    while size < target - tail:
        # Anthropic deltas often carry a few tokens at once.
        text = "".join(next(tokens) for _ in range(rng.choice((1, 1, 1, 2, 2, 3))))
        n_out += 1
        d = _dumps(
            {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": text},
            }
        )
        frames.append(("content_block_delta", d))
        parts.append(text)
        size += len(d.encode()) + len("event: content_block_delta\ndata: \n\n")
    add("content_block_stop", {"type": "content_block_stop", "index": 0})
    add(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": "end_turn", "stop_sequence": None},
            "usage": {"output_tokens": n_out},
        },
    )
    add("message_stop", {"type": "message_stop"})
    data = "".join(f"event: {t}\ndata: {d}\n\n" for t, d in frames).encode()
    return Corpus("anthropic", "anthropic", data, "".join(parts), tuple(d for _, d in frames))


def mcp_corpus(size_mb: float = 10.0, seed: int = 1) -> Corpus:
    """An MCP ``tools/call`` stream of about ``size_mb`` MB: a progress notification per
    token (the token its ``message``), every eighth a log message instead, then the result
    with the whole text in one ``text`` item (a long tool call's shape)."""
    rng = random.Random(seed + 2_000_003)
    target = int(size_mb * 1_000_000)
    payloads: list[str] = []
    parts: list[str] = []
    size = 0
    tail = 600
    tokens = _token_stream(rng)
    n = 0
    head = len("event: message\ndata: \n\n")
    while size < target - tail:
        text = next(tokens)
        n += 1
        if n % 8:
            params: dict[str, object] = {
                "progressToken": "bench-1",
                "progress": n,
                "total": None,
                "message": text,
            }
            obj = {"jsonrpc": "2.0", "method": "notifications/progress", "params": params}
        else:
            params = {"level": "info", "logger": "bench", "data": text}
            obj = {"jsonrpc": "2.0", "method": "notifications/message", "params": params}
        p = _dumps(obj)
        payloads.append(p)
        parts.append(text)
        size += len(p.encode()) + head + len(text.encode())  # the text again in the result
    text = "".join(parts)
    result = {"content": [{"type": "text", "text": text}], "isError": False}
    payloads.append(_dumps({"jsonrpc": "2.0", "id": 1, "result": result}))
    data = "".join(f"event: message\ndata: {p}\n\n" for p in payloads).encode()
    return Corpus("mcp", "mcp", data, text, tuple(payloads))


def build(names: tuple[str, ...] = CORPORA, size_mb: float = 10.0, seed: int = 1) -> list[Corpus]:
    """The named corpora, in the order given."""
    out: list[Corpus] = []
    lf: Corpus | None = None
    for name in names:
        if name in ("lf", "crlf") and lf is None:
            lf = lf_corpus(size_mb, seed)
        if name == "lf":
            assert lf is not None
            out.append(lf)
        elif name == "crlf":
            out.append(crlf_corpus(size_mb, seed, lf))
        elif name == "anthropic":
            out.append(anthropic_corpus(size_mb, seed))
        elif name == "mcp":
            out.append(mcp_corpus(size_mb, seed))
        else:
            raise ValueError(f"unknown corpus {name!r} (valid: {', '.join(CORPORA)})")
    return out


def reads(data: bytes, seed: int, lo: int = 1, hi: int = 4096) -> list[bytes]:
    """``data`` cut into consecutive reads of random size in ``[lo, hi]`` (seeded).

    Cuts land anywhere: inside multi-byte characters, inside ``data:``, between CR and LF.
    """
    if not 1 <= lo <= hi:
        raise ValueError("need 1 <= lo <= hi")
    rng = random.Random(seed)
    randint = rng.randint
    out: list[bytes] = []
    pos, n = 0, len(data)
    while pos < n:
        step = randint(lo, hi)
        out.append(data[pos : pos + step])
        pos += step
    return out
