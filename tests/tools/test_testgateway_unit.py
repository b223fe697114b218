"""test-gateway's pure parts: the HTTP decoding of what the upstream sent, the reading of a
stream's meaning, and the comparison of the two sides, on the fixtures' own streams."""

from __future__ import annotations

import json

import pytest

from sse_proxy.tools import fixtures
from sse_proxy.tools.fixtures.streams import openai_chat_stream, tool_stream
from sse_proxy.tools.testgateway.compare import judge
from sse_proxy.tools.testgateway.meaning import Meaning, Transport, read_meaning
from sse_proxy.tools.testgateway.router import model_key
from sse_proxy.tools.testgateway.wire import (
    ResponseDecoder,
    WireError,
    decode_chunked,
    parse_request_head,
)


def _chunked(body: bytes, size: int = 100) -> bytes:
    out = (
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    )
    for i in range(0, len(body), size):
        piece = body[i : i + size]
        out += b"%x\r\n%s\r\n" % (len(piece), piece)
    return out + b"0\r\n\r\n"


def test_the_response_decoder_gives_each_read_its_body_bytes_wherever_reads_are_cut() -> None:
    """Chunk sizes, CRLFs and the last chunk cut at every offset: the same body, complete
    only once the last chunk arrived, and each read's body bytes no later than they came."""
    body = fixtures.clean_stream("openai", fixtures.SHORT_TOKENS)[:400]
    raw = _chunked(body, 37)
    for cut in range(1, len(raw)):
        decoder = ResponseDecoder()
        first = decoder.feed(raw[:cut])
        assert body.startswith(first)
        assert not decoder.complete or cut == len(raw)
        assert first + decoder.feed(raw[cut:]) == body
        assert decoder.complete
        assert decoder.status == 200
        assert decoder.headers["content-type"] == "text/event-stream"


def test_a_response_cut_inside_its_chunked_body_is_incomplete() -> None:
    raw = _chunked(b"data: {}\n\n" * 20)
    decoder = ResponseDecoder()
    decoder.feed(raw[: len(raw) - 10])
    assert not decoder.complete
    sized = ResponseDecoder()
    got = sized.feed(b"HTTP/1.1 200 OK\r\nContent-Length: 5\r\n\r\nab")
    assert (got, sized.complete) == (b"ab", False)
    assert (sized.feed(b"cde"), sized.complete) == (b"cde", True)


def test_request_heads_and_chunked_request_bodies() -> None:
    head = parse_request_head(
        b"POST /v1/chat/completions?x=1 HTTP/1.1\r\nHost: a\r\nX-Gateway-Case: c7\r\n\r\n"
    )
    assert (head.method, head.path, head.get("x-gateway-case")) == (
        "POST",
        "/v1/chat/completions",
        "c7",
    )
    assert decode_chunked(b"3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nTrailer: x\r\n\r\nrest") == (
        b"abcde",
        len(b"3\r\nabc\r\n2;ext=1\r\nde\r\n0\r\nTrailer: x\r\n\r\n"),
    )
    assert decode_chunked(b"3\r\nab") is None
    with pytest.raises(WireError):
        parse_request_head(b"GARBAGE\r\n\r\n")
    assert model_key("gpt-4o-mini", "c12") == "gpt-4o-mini--sse-proxy-case-c12"


def _read(body: bytes, dialect: str = "openai", *, times: list[float] | None = None) -> Meaning:
    frames = body.split(b"\n\n")
    pieces = [f + b"\n\n" for f in frames[:-1]] + ([frames[-1]] if frames[-1] else [])
    at = times or [0.001 * i for i in range(len(pieces))]
    return read_meaning(
        dialect, Transport(200, "text/event-stream", list(zip(at, pieces, strict=True)), 0.0)
    )


def test_the_meaning_of_clean_and_broken_streams() -> None:
    clean = _read(openai_chat_stream(fixtures.TOKENS, include_usage=True))
    assert (clean.end, clean.text, clean.usage) == ("whole", fixtures.MESSAGE, (12, 121))
    assert clean.finish == ("stop",)
    assert clean.violations == ()
    cut = _read(fixtures.faulty_stream("no_terminal"))
    assert (cut.end, cut.usage) == ("cut", None)
    error = _read(fixtures.faulty_stream("error_event"))
    assert error.end == "error"
    assert error.errors[0].kind == "server_error"
    assert _read(fixtures.faulty_stream("unterminated")).end == "unterminated"
    for dialect in ("responses", "anthropic"):
        assert _read(fixtures.clean_stream(dialect), dialect).end == "whole"
        assert _read(fixtures.clean_stream(dialect), dialect).text == fixtures.MESSAGE
    calls = _read(tool_stream("openai"))
    assert [name for name, _ in calls.calls] == ["get_weather", "get_time", "get_location"]


def _litellm_like(body: bytes, usage: tuple[int, int]) -> bytes:
    """What LiteLLM 1.108.7 makes of an OpenAI stream that ended without usage or [DONE]:
    a usage chunk with a choice in it, then an appended [DONE]."""
    chunk = {
        "id": "chatcmpl-x",
        "object": "chat.completion.chunk",
        "choices": [{"index": 0, "delta": {}}],
        "usage": {"prompt_tokens": usage[0], "completion_tokens": usage[1]},
    }
    return body + b"data: " + json.dumps(chunk).encode() + b"\n\ndata: [DONE]\n\n"


def test_a_cut_stream_made_whole_with_invented_usage_is_named_as_such() -> None:
    """The issue's LiteLLM case: the verdict is masked, and each change is named with its
    numbers and the event that shows it."""
    upstream = fixtures.faulty_stream("no_terminal")
    up, gw = _read(upstream), _read(_litellm_like(upstream, (9, 136)))
    verdict = judge(up, gw)
    assert verdict.outcome == "masked"
    families = {f.family: f for f in verdict.findings}
    assert verdict.main is not None
    assert verdict.main.family == "ending (made a cut stream look whole)"
    assert "appended `data: [DONE]`" in verdict.main.reason
    assert "data: [DONE]" in verdict.main.evidence
    invented = families["usage (invented)"]
    assert "9 input and 136 output tokens" in invented.reason
    shape = families["shape (usage chunk choices)"]
    assert '"choices": [{"index": 0, "delta": {}}]' in shape.evidence
    assert shape.fix


def test_error_events_passed_reworded_or_swallowed() -> None:
    upstream = fixtures.faulty_stream("error_event")
    up = _read(upstream)
    assert judge(up, _read(upstream)).outcome == "pass"
    reworded = upstream.replace(
        b'"type": "server_error", "param": null, "code": null',
        b'"type": null, "param": null, "code": "500"',
    )
    verdict = judge(up, _read(reworded.replace(b'"message": "The', b'"message": "proxy: The')))
    assert verdict.main is not None
    assert verdict.main.family == "error event (reworded)"
    assert "500" in verdict.main.reason
    swallowed = judge(up, _read(upstream[: upstream.rindex(b'data: {"error"')]))
    assert swallowed.main is not None
    assert swallowed.main.family == "error event (swallowed)"


def test_usage_dropped_changed_and_a_whole_stream_cut() -> None:
    upstream = openai_chat_stream(fixtures.TOKENS, include_usage=True)
    up = _read(upstream)
    dropped = judge(up, _read(openai_chat_stream(fixtures.TOKENS)))
    assert [f.family for f in dropped.findings] == ["usage (dropped)"]
    assert judge(up, _read(openai_chat_stream(fixtures.TOKENS)), usage_asked=False).passed
    changed = judge(
        up, _read(upstream.replace(b'"completion_tokens":121', b'"completion_tokens":7'))
    )
    assert changed.main is not None
    assert "12 input and 7 output tokens" in changed.main.reason
    cut = judge(up, _read(upstream[: len(upstream) // 2]))
    assert cut.outcome == "broken"
    assert cut.main is not None
    assert cut.main.family.startswith("ending (cut a whole stream)")


def test_deltas_held_back_into_one_burst_are_a_delivery_finding() -> None:
    """The upstream's output over a second; through the gateway all of it at the end."""
    body = fixtures.clean_stream("openai")
    n = body.count(b"\n\n")
    up = _read(body, times=[i / n for i in range(n)])
    held = _read(body, times=[1.05] * n)
    verdict = judge(up, held)
    assert verdict.outcome == "held"
    assert verdict.main is not None
    assert verdict.main.family == "delivery (held back)"
    assert verdict.delivery is not None
    assert verdict.delivery.held_back > 0.9
    prompt = _read(body, times=[i / n + 0.002 for i in range(n)])
    assert judge(up, prompt).passed
    slow = judge(up, _read(body, times=[3 * i / n for i in range(n)]))
    assert slow.main is not None
    assert slow.main.family == "delivery (slow relay)"
    assert "over 2.9" in slow.main.reason


def test_a_translated_stream_is_compared_by_meaning() -> None:
    """OpenAI Chat upstream, Anthropic to the client: the same text, finish reason and
    usage in the other API's words pass, and the translation is named."""
    up = _read(openai_chat_stream(fixtures.TOKENS, include_usage=True))
    gw = _read(fixtures.clean_stream("anthropic"), "anthropic")
    verdict = judge(up, gw)
    assert verdict.translation == "anthropic <- openai"
    assert gw.finish == ("end_turn",)
    assert verdict.passed, verdict.findings
    lost = _read(
        fixtures.clean_stream("anthropic").replace(b'"text":"The"', b'"text":""'), "anthropic"
    )
    assert judge(up, lost).main is not None
