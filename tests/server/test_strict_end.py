"""``--strict-end``: a stream the upstream ended wrongly reaches the client as a broken body.

Real sockets throughout: the mock upstream serves each way a stream ends wrongly (the
fixtures' vocabulary: ``no_terminal``, ``unterminated``, ``error_event``, ``reset``), the
proxy relays it in each mode, and the client is either a raw socket (which sees whether
the chunked body got its terminating chunk) or the openai SDK (which must raise under
``--strict-end`` and, without it, returns the partial answer as a success, which the app
cannot tell from a whole one).
"""

from __future__ import annotations

import json

import openai
import pytest
from aiohttp import web

from sse_proxy.core.verdict import STRICT_END_CAUSES, strict_end_cause
from sse_proxy.names import DIALECT_BODIES, DIALECT_PATHS, MOCK_FAULT_HEADER, MODES
from sse_proxy.obs.console import ConsoleLines
from sse_proxy.tools import fixtures
from tests.support.logs import LogEntries, summary
from tests.support.net import STREAM_ID, raw_exchange
from tests.support.stack import AppStarter, ProxyStarter

# Why the summary says the body was ended broken, per fault (an independent table: the
# fixtures say which alerts each fault raises, this says which cause that must be).
# ``reset`` is an upstream read error: cut off in every mode, with or without the flag.
CAUSE = {
    "no_terminal": "truncated",
    "unterminated": "unterminated_frame",
    "error_event": "error_event",
    "reset": None,
}
# Whether the client's body ends normally without --strict-end (only the reset is cut).
COMPLETE_WITHOUT = {"no_terminal": True, "unterminated": True, "error_event": True, "reset": False}


def _request(dialect: str, fault: str | None) -> bytes:
    path = DIALECT_PATHS[dialect]
    body = json.dumps(DIALECT_BODIES[dialect]).encode()
    head = [
        f"POST {path} HTTP/1.1",
        "Host: 127.0.0.1",
        "Content-Type: application/json",
        f"Content-Length: {len(body)}",
    ]
    if fault is not None:
        head.append(f"{MOCK_FAULT_HEADER}: {fault}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


async def _openai_text(base: str, fault: str | None) -> str:
    headers = {MOCK_FAULT_HEADER: fault} if fault else {}
    client = openai.AsyncOpenAI(
        base_url=f"{base}/v1", api_key="sk-test", max_retries=0, default_headers=headers
    )
    async with client:
        stream = await client.chat.completions.create(
            model="gpt-4o-mini", messages=[{"role": "user", "content": "hi"}], stream=True
        )
        parts = [c.choices[0].delta.content or "" async for c in stream if c.choices]
    return "".join(parts)


def test_the_cause_table_matches_the_fixtures() -> None:
    """The faults above are exactly the fixtures' wrong endings, and the cause each gets is
    the one its alerts (per the fixtures) call for."""
    assert set(CAUSE) == set(fixtures.ENDINGS)
    by_alert = dict(STRICT_END_CAUSES)
    for fault, cause in CAUSE.items():
        if fault == "reset":
            continue  # not an upstream_eof end: already cut
        alerts = fixtures.expected_alerts("openai", fault)
        assert by_alert[alerts[0]] == cause, fault
        assert strict_end_cause("upstream_eof", dict.fromkeys(alerts, 1)) == cause


def test_only_an_upstream_eof_is_judged() -> None:
    counts = {"sse.truncated": 1}
    assert strict_end_cause("upstream_eof", counts) == "truncated"
    for ended_by in ("upstream_error", "timeout", "shutdown", "client_disconnect"):
        assert strict_end_cause(ended_by, counts) is None
    assert strict_end_cause("upstream_eof", {"sse.replacement_char": 3}) is None
    assert strict_end_cause("upstream_eof", {}) is None


@pytest.mark.asyncio
async def test_openai_sdk_raises_on_a_truncated_stream_only_under_strict_end(
    mock_url: str, start: ProxyStarter
) -> None:
    lenient = await start(mock_url)
    strict = await start(mock_url, strict_end=True)
    partial = fixtures.expected_text("openai", "no_terminal")
    # Without the flag: the SDK returns the partial answer as a success.
    assert await _openai_text(lenient, "no_terminal") == partial
    with pytest.raises(openai.APIConnectionError) as raised:
        await _openai_text(strict, "no_terminal")
    # the SDK's transport (httpx, or the fork this openai release ships) saw the chunked
    # body end without its last chunk
    assert "incomplete chunked read" in str(raised.value.__cause__)
    # a clean stream is untouched by the flag
    assert await _openai_text(strict, None) == fixtures.expected_text("openai")


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("fault", sorted(CAUSE))
@pytest.mark.asyncio
async def test_each_wrong_end_is_a_broken_body_under_strict_end(
    mock_url: str, start: ProxyStarter, logs: LogEntries, mode: str, fault: str
) -> None:
    """Every byte the upstream sent is forwarded, then the body ends without its terminating
    chunk; the summary names the cause. Without the flag the body ends normally (but for a
    reset, which is always cut)."""
    sent = fixtures.faulty_stream(fault, "openai")
    for strict in (False, True):
        url = await start(mock_url, mode=mode, strict_end=strict, seed=7)
        got = await raw_exchange(url, _request("openai", fault))
        assert got.status == 200
        assert got.header("Transfer-Encoding") == "chunked"
        assert got.body == sent, (mode, fault, strict)  # nothing held back, nothing changed
        assert got.complete is (COMPLETE_WITHOUT[fault] and not strict), (mode, fault, strict)
        line = summary(logs, got.header(STREAM_ID) or "")
        assert line["verdict"] == "broken"
        if strict:
            assert line["strict_end"] == CAUSE[fault]
            # a person's terminal line says it too (the summary line is led by the verdict)
            human = ConsoleLines()(None, "info", {**line, "event": "stream.summary"})
            assert human.startswith("broken")
            assert (f"strict_end={CAUSE[fault]}" in human) is (CAUSE[fault] is not None)
        else:
            assert "strict_end" not in line


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.asyncio
async def test_a_clean_stream_ends_cleanly_under_strict_end(
    mock_url: str, start: ProxyStarter, logs: LogEntries, mode: str
) -> None:
    url = await start(mock_url, mode=mode, strict_end=True, seed=7)
    for dialect in DIALECT_PATHS:
        got = await raw_exchange(url, _request(dialect, None))
        assert got.complete, dialect
        assert got.body == fixtures.clean_stream(dialect), dialect
        line = summary(logs, got.header(STREAM_ID) or "")
        assert line["verdict"] == "ok", dialect
        assert line["strict_end"] is None


@pytest.mark.asyncio
async def test_the_cause_is_the_dialects(
    mock_url: str, start: ProxyStarter, logs: LogEntries
) -> None:
    """Anthropic's error event ends its stream (no truncation besides it); raw text has no
    terminal marker, so only a cut inside a frame is known to be wrong there, and a text
    stream that merely stops ends normally even under the flag."""
    url = await start(mock_url, strict_end=True)
    cases = [
        ("anthropic", "error_event", "error_event"),
        ("anthropic", "no_terminal", "truncated"),
        ("responses", "unterminated", "unterminated_frame"),
        ("responses", "error_event", "error_event"),
        ("gemini", "no_terminal", "truncated"),
        ("gemini", "error_event", "error_event"),
        ("text", "unterminated", "unterminated_frame"),
        ("text", "no_terminal", None),
    ]
    for dialect, fault, cause in cases:
        got = await raw_exchange(url, _request(dialect, fault))
        assert got.body == fixtures.faulty_stream(fault, dialect), (dialect, fault)
        assert got.complete is (cause is None), (dialect, fault)
        assert summary(logs, got.header(STREAM_ID) or "")["strict_end"] == cause, (dialect, fault)


@pytest.mark.asyncio
async def test_content_length_is_dropped_so_the_body_can_be_broken(
    start_app: AppStarter, start: ProxyStarter
) -> None:
    """An upstream that sends its event stream with a Content-Length: the client's copy is
    chunked under --strict-end, or a body cut after its last byte would look complete."""
    body = b'data: {"choices": [{"index": 0, "delta": {"content": "hi"}}]}\n\n'

    async def handler(_request: web.Request) -> web.Response:
        return web.Response(body=body, content_type="text/event-stream")

    app = web.Application()
    app.router.add_post("/v1/chat/completions", handler)
    upstream = await start_app(app)
    lenient = await raw_exchange(await start(upstream), _request("openai", None))
    assert lenient.header("Content-Length") == str(len(body))
    assert lenient.complete
    strict = await raw_exchange(await start(upstream, strict_end=True), _request("openai", None))
    assert strict.header("Content-Length") is None
    assert strict.header("Transfer-Encoding") == "chunked"
    assert strict.body == body
    assert not strict.complete
