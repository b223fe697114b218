"""Logs people can read: the console format, debug lines, and the totals at shutdown."""

from __future__ import annotations

import asyncio
import io
import json
import re
from collections.abc import Iterator

import aiohttp
import pytest

from sse_proxy.core.alerts import CrlfFraming, Truncated
from sse_proxy.obs.logs import get_logger
from sse_proxy.obs.sink import AlertSink
from sse_proxy.tools.mock_upstream import mock_upstream
from tests.support.cli import ServeProcess
from tests.support.logs import configured_logging
from tests.support.net import free_port


@pytest.fixture
def console() -> Iterator[io.StringIO]:
    """structlog configured for the console format into a buffer; restored afterwards."""
    with configured_logging("console") as stream:
        yield stream


def test_console_is_one_line_per_stream_and_alerts_without_context(
    console: io.StringIO,
) -> None:
    """An alert: indented, its level, its own fields, the stream id; no context. The
    summary: verdict, reason, method, path, status, model, request id, TTFT, duration."""
    log = get_logger(
        stream_id="0123456789abcdef",
        method="POST",
        path="/v1/chat/completions",
        upstream_status=200,
        client_request_id="app-req-1",
        model="gpt-4o",
        route="api.openai.com",
    )
    sink = AlertSink(log)
    sink.emit(Truncated(reason="idle_timeout", dialect="openai", byte_offset=12))
    sink.emit(CrlfFraming(counts={"lf": 1, "crlf": 2, "cr": 0}, mixed=True))
    sink.summary(
        level="warning",
        verdict="broken",
        verdict_reason="truncated",
        ttft_ms=312.4,
        duration_ms=1240.0,
        note="x" * 2000,
        finish_reasons=["stop"],
    )
    lines = console.getvalue().splitlines()
    assert len(lines) == 3, lines
    truncated, crlf, summary = lines
    assert truncated.startswith(
        "  warning sse.truncated reason=idle_timeout dialect=openai byte_offset=12 "
        "stream=0123456789abcdef "
    )
    assert crlf.startswith('  warning sse.crlf_framing counts={"lf":1,"crlf":2,"cr":0} mixed=true')
    for line in (truncated, crlf):
        for context in ("POST", "/v1/chat", "app-req-1", "gpt-4o", "api.openai.com"):
            assert context not in line, (context, line)
    assert summary.startswith(
        "broken   truncated POST /v1/chat/completions 200 gpt-4o req=app-req-1 "
        'ttft=312ms dur=1.24s alerts={"sse.truncated":1,"sse.crlf_framing":1} '
        "stream=0123456789abcdef "
    ), summary
    assert "x" * 100 not in summary  # the 40-odd other fields stay in the JSON lines
    assert "\x1b[" not in console.getvalue()  # a StringIO is no terminal: no colour


def test_console_colours_by_level_and_renders_json_values() -> None:
    """Colour on request: verdicts and levels coloured; values are JSON, never reprs."""
    from sse_proxy.obs.console import ConsoleLines

    render = ConsoleLines(color=True)
    ok = render(None, "info", {"event": "stream.summary", "verdict": "ok", "stream_id": "s"})
    assert ok.startswith("\x1b[32mok      \x1b[0m ")
    bad = render(None, "warning", {"event": "stream.summary", "verdict": "broken"})
    assert bad.startswith("\x1b[1;31mbroken  \x1b[0m")
    warn = render(None, "warning", {"event": "x.y", "level": "warning", "stream_id": "s"})
    assert warn.startswith("  \x1b[33mwarning\x1b[0m \x1b[33mx.y\x1b[0m ")
    err = render(None, "error", {"event": "boom", "level": "error"})
    assert err.startswith("\x1b[1;31merror\x1b[0m ")
    plain = ConsoleLines(color=False)
    line = plain(
        None,
        "info",
        {"event": "e", "active": False, "gone": None, "d": {"a": [1, True]}, "s": "two words"},
    )
    assert line == 'e active=false d={"a":[1,true]} s="two words"'


def test_console_start_up_line_says_what_to_set_per_route() -> None:
    """proxy.started: where it listens, then one `set VAR=URL` line per route."""
    from sse_proxy.obs.console import ConsoleLines

    app_env = [
        {"route": "/anthropic", "upstream": "https://api.anthropic.com",
         "set": "ANTHROPIC_BASE_URL=http://127.0.0.1:8787/anthropic"},
        {"route": "default", "upstream": "https://api.openai.com",
         "set": "OPENAI_BASE_URL=http://127.0.0.1:8787/v1"},
    ]  # fmt: skip
    text = ConsoleLines()(
        None,
        "info",
        {
            "event": "proxy.started",
            "listen": "http://127.0.0.1:8787",
            "mode": "passthrough",
            "routes": [{"route": "default", "example": "x" * 300}],
            "network": {},
            "app_env": app_env,
            "timestamp": "2026-01-02T03:04:05.678901Z",
        },
    )
    assert text.splitlines() == [
        "proxy.started listen=http://127.0.0.1:8787 mode=passthrough 03:04:05.678",
        "  set ANTHROPIC_BASE_URL=http://127.0.0.1:8787/anthropic  "
        "(route /anthropic -> https://api.anthropic.com)",
        "  set OPENAI_BASE_URL=http://127.0.0.1:8787/v1  (route default -> https://api.openai.com)",
    ]


@pytest.mark.asyncio
async def test_debug_lines_request_id_lookup_and_totals_at_shutdown() -> None:
    """--log-level debug: redacted upstream URL and headers, connection reuse; the client's
    X-Request-ID finds its stream; one totals line at shutdown."""
    port = free_port()
    async with mock_upstream() as upstream:
        with ServeProcess(
            "--upstream", upstream, "--port", str(port), "--log-level", "debug"
        ) as serve:  # fmt: skip
            await asyncio.to_thread(serve.wait_for, "proxy.started")
            base = f"http://127.0.0.1:{port}"
            async with aiohttp.ClientSession() as session:
                for i, fault in enumerate(("none", "truncated")):
                    async with session.post(
                        f"{base}/v1/chat/completions?api_key=SECRET-QUERY-1",
                        json={"model": "gpt-test", "stream": True},
                        headers={
                            "Authorization": "Bearer SECRET-AUTH-2",
                            "X-Request-ID": f"app-debug-{i}",
                            "X-Mock-Fault": fault,
                        },
                    ) as resp:
                        await resp.read()
            await asyncio.to_thread(serve.wait_for, "stream.summary", 2)
            text = serve.stop()
    assert "SECRET-QUERY-1" not in text
    assert "SECRET-AUTH-2" not in text
    lines = [json.loads(line) for line in text.splitlines()]
    requests = [e for e in lines if e["event"] == "upstream.request"]
    assert len(requests) == 2
    assert requests[0]["level"] == "debug"
    assert requests[0]["url"].startswith(upstream + "/v1/chat/completions?api_key=")
    assert requests[0]["headers"]["Authorization"] == "[redacted]"
    assert requests[0]["headers"]["X-Request-ID"] == "app-debug-0"
    responses = [e for e in lines if e["event"] == "upstream.response"]
    assert responses[0]["headers"]["Content-Type"].startswith("text/event-stream")
    reuse = [e["reused"] for e in lines if e["event"] == "upstream.connection"]
    assert reuse == [False, True]
    # the app's request id finds the bad stream, its verdict and its model
    (bad,) = [
        e
        for e in lines
        if e.get("client_request_id") == "app-debug-1" and e["event"] == "stream.summary"
    ]
    assert bad["verdict"] == "broken"
    assert bad["level"] == "warning"
    assert bad["model"] == "gpt-test"
    truncated = [e for e in lines if e["event"] == "sse.truncated"]
    assert truncated[0]["client_request_id"] == "app-debug-1"
    (totals,) = [e for e in lines if e["event"] == "proxy.totals"]
    assert totals["streams"] == 2
    assert totals["verdicts"] == {"broken": 1, "ok": 1}
    assert totals["alerts"] == {"sse.truncated": 1}
    assert totals["bytes"] > 0
    assert re.search(r'"event":"proxy.totals"', text)
