"""The Gemini dialect, cut at every byte; reasoning kept apart from text in every dialect."""

from __future__ import annotations

import json
import random

import pytest

from sse_proxy.core import StreamReassembler, dialect_for_path
from sse_proxy.tools import fixtures
from sse_proxy.tools.fixtures import SHORT_MESSAGE, SHORT_TOKENS

THOUGHT = ("Let me ", "think: ", "ça ", "va 🤔.")


def _run(
    data: bytes, cuts: list[int], *, hint: str | None = "gemini", keep_text: bool = True
) -> StreamReassembler:
    r = StreamReassembler(None, hint=hint, keep_text=keep_text)
    prev = 0
    for cut in [*cuts, len(data)]:
        r.feed(data[prev:cut])
        prev = cut
    r.close()
    return r


def test_every_single_cut_point() -> None:
    data = fixtures.gemini_stream(SHORT_TOKENS, thinking=THOUGHT)
    for cut in range(len(data) + 1):
        r = _run(data, [cut])
        assert r.dialect == "gemini", cut
        assert r.text == SHORT_MESSAGE, cut
        assert r.reasoning == ("".join(THOUGHT), len("".join(THOUGHT))), cut
        assert not r.alert_counts, (cut, r.alert_counts)


def test_every_byte_its_own_read() -> None:
    data = fixtures.gemini_stream(fixtures.TOKENS)
    r = _run(data, list(range(1, len(data))))
    assert r.text == fixtures.MESSAGE
    assert not r.alert_counts


@pytest.mark.parametrize("newline", fixtures.NEWLINES, ids=["lf", "crlf", "cr"])
def test_seeded_random_splits_any_newline(newline: str) -> None:
    data = fixtures.gemini_stream(newline=newline)
    for seed in range(20):
        pieces = fixtures.split_reads(data, seed, max_size=17)
        cuts, at = [], 0
        for piece in pieces[:-1]:
            at += len(piece)
            cuts.append(at)
        r = _run(data, cuts, hint=None)
        assert r.dialect == "gemini", seed
        assert r.text == fixtures.MESSAGE, f"seed {seed}"
        expected = {} if newline == "\n" else {"sse.crlf_framing": 1}
        assert dict(r.alert_counts) == expected, f"seed {seed}"


@pytest.mark.parametrize("fault", sorted(fixtures.FAULTS))
def test_faults_raise_their_alerts(fault: str) -> None:
    data = fixtures.faulty_stream(fault, "gemini")
    rng = random.Random(fault)
    for _ in range(5):
        seed = rng.randrange(1 << 30)
        pieces = fixtures.split_reads(data, seed, max_size=4096)
        cuts, at = [], 0
        for piece in pieces[:-1]:
            at += len(piece)
            cuts.append(at)
        r = _run(data, cuts)
        assert r.text == fixtures.expected_text("gemini", fault), f"seed {seed}"
        assert set(r.alert_counts) == set(fixtures.expected_alerts("gemini", fault)), (
            f"seed {seed}",
            r.alert_counts,
        )


def test_detection_by_path_and_shape() -> None:
    assert dialect_for_path("/v1beta/models/gemini-2.0-flash:streamGenerateContent") == "gemini"
    vertex = "/v1/projects/p/locations/us-central1/publishers/google/models/g:streamGenerateContent"
    assert dialect_for_path(vertex) == "gemini"
    r = _run(fixtures.gemini_stream(SHORT_TOKENS), [], hint=None)
    assert r.dialect == "gemini"
    details = r.details()
    assert details["candidates"][0]["finish_reason"] == "STOP"
    assert details["usage"]["candidatesTokenCount"] == len(SHORT_TOKENS)
    assert details["model"] == "gemini-2.0-flash"


def _frames(*objs: object) -> bytes:
    return b"".join(b"data: " + json.dumps(o).encode() + b"\r\n\r\n" for o in objs)


def test_truncation_error_and_blocked_prompt() -> None:
    chunk = {"candidates": [{"content": {"parts": [{"text": "Hi"}]}, "index": 0}]}
    r = _run(_frames(chunk, chunk), [])
    assert r.alert_counts["sse.truncated"] == 1  # no candidate finished
    error = {
        "error": {"code": 429, "message": "Resource exhausted", "status": "RESOURCE_EXHAUSTED"}
    }
    r = _run(_frames(chunk, error), [])
    assert r.alert_counts["sse.error_event"] == 1
    assert "sse.truncated" not in r.alert_counts
    blocked = {"promptFeedback": {"blockReason": "SAFETY"}, "usageMetadata": {}}
    r = _run(_frames(blocked), [], hint=None)
    assert r.dialect == "gemini"
    assert set(r.alert_counts) == {"sse.crlf_framing"}  # Google's CRLF: info, not a fault
    assert r.details()["block_reason"] == "SAFETY"


def test_escaped_fffd_is_reported_as_upstream_literal() -> None:
    data = fixtures.faulty_stream("json_escape_fffd", "gemini")
    r = _run(data, [])
    assert r.alert_counts["sse.replacement_char"] == 1


def test_counting_without_keeping_text() -> None:
    data = fixtures.gemini_stream(fixtures.TOKENS * 20, thinking=THOUGHT)
    r = _run(data, list(range(1, len(data), 97)), keep_text=False)
    assert r.text == ""
    assert r.summary()["text_length"] == len(fixtures.MESSAGE) * 20
    assert r.reasoning[1] == len("".join(THOUGHT))


# --------------------------------------------- reasoning apart from text, every dialect


def test_reasoning_is_kept_apart_in_every_dialect() -> None:
    reasoning = "".join(THOUGHT)
    openai = fixtures.openai_chat_stream(SHORT_TOKENS, reasoning=THOUGHT)
    anthropic = fixtures.anthropic_stream(SHORT_TOKENS, thinking=THOUGHT)
    responses_events = (
        [{"type": "response.reasoning_summary_text.delta", "delta": piece} for piece in THOUGHT]
        + [
            {
                "type": "response.output_text.delta",
                "output_index": 1,
                "content_index": 0,
                "delta": t,
            }
            for t in SHORT_TOKENS
        ]
        + [{"type": "response.completed", "response": {"status": "completed"}}]
    )
    responses = b"".join(
        f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in responses_events
    )
    gemini = fixtures.gemini_stream(SHORT_TOKENS, thinking=THOUGHT)
    for name, data in (
        ("openai", openai),
        ("anthropic", anthropic),
        ("responses", responses),
        ("gemini", gemini),
    ):
        for cut in range(0, len(data) + 1, 7):
            r = _run(data, [cut], hint=None)
            assert r.dialect == name
            assert r.text == SHORT_MESSAGE, (name, cut)
            assert r.reasoning == (reasoning, len(reasoning)), (name, cut)
            assert r.details()["reasoning"] == reasoning
            assert not r.alert_counts, (name, cut, r.alert_counts)
