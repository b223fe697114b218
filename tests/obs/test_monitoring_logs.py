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


def test_console_puts_event_and_stream_id_first_then_own_fields(console: io.StringIO) -> None:
    """event, stream_id, level; the alert's fields before the context; JSON, not reprs."""
    log = get_logger(
        stream_id="0123456789abcdef",
        method="POST",
        path="/v1/chat/completions",
        client_request_id="app-req-1",
        model="gpt-4o",
        route="api.openai.com",
    )
    sink = AlertSink(log)
    sink.emit(Truncated(reason="idle_timeout", dialect="openai", byte_offset=12))
    sink.emit(CrlfFraming(counts={"lf": 1, "crlf": 2, "cr": 0}, mixed=True))
    sink.summary(level="warning", verdict="broken", note="x" * 2000, finish_reasons=["stop"])
    text = console.getvalue()
    lines = text.splitlines()
    assert lines[0].startswith("sse.truncated stream_id=0123456789abcdef level=warning ")
    records = re.split(r"\n(?! {4})", text.strip())  # a record and its continuation lines
    first = records[0]
    assert first.index("reason=idle_timeout") < first.index("client_request_id=app-req-1")
    assert first.index("byte_offset=12") < first.index("model=gpt-4o")
    assert 'counts={"lf":1,"crlf":2,"cr":0}' in text
    assert "{'" not in text
    assert "['" not in text
    assert 'finish_reasons=["stop"]' in text
    summary_at = next(i for i, ln in enumerate(lines) if ln.startswith("stream.summary "))
    assert lines[summary_at].startswith("stream.summary stream_id=0123456789abcdef level=warning")
    assert max(map(len, lines)) <= 160, max(lines, key=len)
    assert "x" * 100 not in text  # a long value is cut
    assert all(ln.startswith(("sse.", "stream.", "    ")) for ln in lines), lines


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
