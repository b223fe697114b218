"""House helpers: feed a reassembler whole, bytewise, at every cut, and in seeded k-way splits."""

from __future__ import annotations

import itertools
import json
import random
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

from sse_proxy.core import Alert, SSEEvent, StreamReassembler

# One fixture with 2-byte (é, ï), 3-byte (日本語) and 4-byte (🙂) characters, reused everywhere.
MESSAGE = "café 🙂 日本語 naïve"
TOKENS = ("The", " quick", " brown", " café", " 🙂", " 日本", "語", " naïve ", " ")
TEXT = "".join(TOKENS)


def every_cut(data: bytes) -> Iterator[tuple[int, list[bytes]]]:
    """Every two-way split of ``data``: (cut, [left, right])."""
    for cut in range(1, len(data)):
        yield cut, [data[:cut], data[cut:]]


def seeded_splits(data: bytes, k: int, seed: int) -> list[bytes]:
    """``data`` cut at k-1 random distinct offsets chosen by ``random.Random(seed)``."""
    rng = random.Random(seed)
    n = min(k - 1, max(len(data) - 1, 0))
    cuts = sorted(rng.sample(range(1, len(data)), n)) if n else []
    bounds = [0, *cuts, len(data)]
    return [data[a:b] for a, b in itertools.pairwise(bounds)]


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


@dataclass(frozen=True)
class Result:
    events: tuple[SSEEvent, ...]
    alerts: tuple[Alert, ...]
    text: str
    dialect: str
    frame_ends: tuple[int, ...]


def run(pieces: Sequence[bytes], dialect: str | None = None, **kw: object) -> Result:
    """Feed ``pieces`` in order, close, and collect everything that came out."""
    r = StreamReassembler(dialect, **kw)  # type: ignore[arg-type]
    events: list[SSEEvent] = []
    alerts: list[Alert] = []
    ends: list[int] = []
    for piece in pieces:
        out = r.feed(piece)
        events += out.events
        alerts += out.alerts
        ends += out.frame_ends
    out = r.close()
    events += out.events
    alerts += out.alerts
    ends += out.frame_ends
    return Result(tuple(events), tuple(alerts), r.text, r.dialect, tuple(ends))


def names(alerts: Sequence[Alert]) -> list[str]:
    return [a.name for a in alerts]


def chat_chunk(content: str, index: int = 0) -> str:
    return json.dumps(
        {
            "id": "chatcmpl-1",
            "object": "chat.completion.chunk",
            "choices": [{"index": index, "delta": {"content": content}, "finish_reason": None}],
        },
        ensure_ascii=False,
        separators=(",", ":"),
    )


def openai_stream(tokens: Sequence[str], newline: str = "\n", done: bool = True) -> bytes:
    nl = newline
    frames = [f"data: {chat_chunk(t)}{nl}{nl}" for t in tokens]
    if done:
        frames.append(f"data: [DONE]{nl}{nl}")
    return "".join(frames).encode()


def raw_text_stream(tokens: Sequence[str], newline: str = "\n") -> bytes:
    return "".join(f"data: {t}{newline}{newline}" for t in tokens).encode()
