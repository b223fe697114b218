"""Alerts: each fault of the mock upstream fires its alert, bound to the stream's id."""

from __future__ import annotations

import gzip
import zlib
from typing import Any

import aiohttp
import brotli
import pytest

from sse_proxy.tools import fixtures
from tests.support.logs import LogEntries, alert_names, named, summary, wait_for, warnings
from tests.support.net import STREAM_ID, read_all
from tests.support.stack import StartApp, StartProxy
from tests.support.upstreams import compressed_sse_app

ENDPOINTS = {
    "openai": "/v1/chat/completions",
    "responses": "/v1/responses",
    "anthropic": "/v1/messages",
    "text": "/v1/text",
}


async def _stream(
    session: aiohttp.ClientSession, url: str, fault: str | None, **headers: str
) -> tuple[bytes, Any]:
    if fault is not None:
        headers["X-Mock-Fault"] = fault
    async with session.post(url, json={"stream": True}, headers=headers) as resp:
        assert resp.status == 200
        return await resp.read(), resp.headers


@pytest.mark.asyncio
@pytest.mark.parametrize("fault", sorted(fixtures.FAULTS))
async def test_each_fault_fires_its_alert(
    proxy_url: str, session: aiohttp.ClientSession, logs: LogEntries, fault: str
) -> None:
    """Each mock fault logs exactly its alert events, bound with stream id and request info."""
    body, headers = await _stream(session, f"{proxy_url}/v1/chat/completions", fault)
    assert body == fixtures.faulty_stream(fault, "openai")
    sid = headers[STREAM_ID]
    assert alert_names(logs) == set(fixtures.expected_alerts("openai", fault))
    for alert in (e for e in logs if e["event"].startswith("sse.")):
        assert alert["stream_id"] == sid
        assert alert["method"] == "POST"
        assert alert["path"] == "/v1/chat/completions"
        assert alert["upstream_status"] == 200
        assert alert["upstream_request_id"] == headers["x-request-id"]
        assert alert["mode"] == "passthrough"
    line = summary(logs, sid)
    assert line["ended_by"] == "upstream_eof"
    assert set(line["alerts"]) == set(fixtures.expected_alerts("openai", fault))


@pytest.mark.asyncio
@pytest.mark.parametrize("dialect", ["responses", "anthropic", "text"])
@pytest.mark.parametrize(
    "fault", ["literal_fffd", "invalid_utf8", "unterminated", "truncated", "invalid_json"]
)
async def test_faults_alert_in_every_dialect(
    proxy_url: str, session: aiohttp.ClientSession, logs: LogEntries, dialect: str, fault: str
) -> None:
    """The other dialects raise what their grammar allows for each fault, nothing else."""
    body, headers = await _stream(session, proxy_url + ENDPOINTS[dialect], fault)
    assert body == fixtures.faulty_stream(fault, dialect)
    sid = headers[STREAM_ID]
    assert alert_names(logs, sid) == set(fixtures.expected_alerts(dialect, fault))
    assert summary(logs, sid)["dialect"] == dialect


@pytest.mark.asyncio
@pytest.mark.parametrize("dialect", ["openai", "anthropic", "text"])
async def test_an_upstream_reset_is_a_truncation_by_upstream_close(
    proxy_url: str, session: aiohttp.ClientSession, logs: LogEntries, dialect: str
) -> None:
    """The mock's ``reset`` fault: the proxy passes on what came and reports the stream
    truncated because upstream closed it (in raw text too: the one fault it can see)."""
    headers = {"X-Mock-Fault": "reset"}
    url = proxy_url + ENDPOINTS[dialect]
    async with session.post(url, json={"stream": True}, headers=headers) as resp:
        sid = resp.headers[STREAM_ID]
        with pytest.raises(aiohttp.ClientPayloadError):
            await resp.read()
    line = await wait_for(logs, "stream.summary", sid)
    (truncated,) = named(logs, "sse.truncated", sid)
    assert truncated["reason"] == "upstream_closed"
    assert line["ended_by"] == "upstream_error"
    assert line["verdict"] == "broken"


@pytest.mark.asyncio
async def test_alert_fields(
    proxy_url: str, session: aiohttp.ClientSession, logs: LogEntries
) -> None:
    """Alert lines carry the contract's fields: cause, offsets, counts, preview, reason."""
    url = f"{proxy_url}/v1/chat/completions"
    await _stream(session, url, "invalid_utf8")
    await _stream(session, url, "literal_fffd")
    await _stream(session, url, "unterminated")
    await _stream(session, url, "crlf")
    await _stream(session, url, "mixed_newlines")
    fffd = named(logs, "sse.replacement_char")
    causes = {e["cause"] for e in fffd}
    assert causes == {"invalid_utf8", "upstream_literal"}
    for e in fffd:
        assert e["log_level"] == "warning"
        assert isinstance(e["byte_offset"], int)
        assert isinstance(e["event_index"], int)
    (open_frame,) = named(logs, "sse.unterminated_frame")
    assert open_frame["pending_bytes"] == len(b'data: {"choi')
    # no message text without --log-text: where the frame broke, and its shape
    assert open_frame["preview"] == 'data: {"*'
    assert "choi" not in str(open_frame)
    (truncated,) = named(logs, "sse.truncated")
    assert truncated["reason"] == "no_terminal_marker"
    crlf, mixed = named(logs, "sse.crlf_framing")
    assert (crlf["log_level"], crlf["mixed"]) == ("info", False)
    assert (mixed["log_level"], mixed["mixed"]) == ("warning", True)
    assert crlf["counts"]["crlf"] > 0
    assert mixed["counts"]["cr"] > 0


@pytest.mark.asyncio
async def test_previews_keep_the_text_with_log_text(
    mock_url: str, start: StartProxy, session: aiohttp.ClientSession, logs: LogEntries
) -> None:
    """With --log-text the preview is the escaped bytes themselves."""
    url = await start(mock_url, log_text=True)
    await _stream(session, f"{url}/v1/chat/completions", "unterminated")
    (open_frame,) = named(logs, "sse.unterminated_frame")
    assert open_frame["preview"] == 'data: {"choi'


@pytest.mark.asyncio
async def test_oversized_frame_alert_honours_the_limit(
    mock_url: str, start: StartProxy, session: aiohttp.ClientSession, logs: LogEntries
) -> None:
    """A frame past max_frame_bytes is reported once; its bytes still reach the client."""
    url = await start(mock_url, max_frame_bytes=4096, max_line_bytes=4096)
    big = b"data: " + b"x" * 10_000 + b"\n\n"
    data = b"data: hello\n\n" + big + b"data: world\n\n"
    async with session.post(f"{url}/sse/raw?chunk=999", data=data) as resp:
        assert await resp.read() == data
        sid = resp.headers[STREAM_ID]
    (alert,) = named(logs, "sse.oversized_frame", sid)
    assert alert["limit"] == 4096
    assert alert["log_level"] == "warning"
    assert summary(logs, sid)["events"] >= 2


@pytest.mark.asyncio
async def test_alert_flood_is_rate_limited_but_counted(
    mock_url: str, start: StartProxy, session: aiohttp.ClientSession, logs: LogEntries
) -> None:
    """Beyond max_alerts_per_kind alerts are only counted; the summary has the exact total."""
    url = await start(mock_url, max_alerts_per_kind=2)
    data = b"".join(b"data: bad \xff byte\n\n" for _ in range(7))
    async with session.post(f"{url}/sse/raw", data=data) as resp:
        await resp.read()
        sid = resp.headers[STREAM_ID]
    assert len(named(logs, "sse.replacement_char", sid)) == 2
    line = summary(logs, sid)
    assert line["alerts"]["sse.replacement_char"] == 7
    assert line["alerts_suppressed"]["sse.replacement_char"] == 5


def _gzip(data: bytes) -> bytes:
    return gzip.compress(data)


def _deflate(data: bytes) -> bytes:
    return zlib.compress(data)


def _raw_deflate(data: bytes) -> bytes:
    obj = zlib.compressobj(wbits=-15)
    return obj.compress(data) + obj.flush()


def _br(data: bytes) -> bytes:
    out: bytes = brotli.compress(data)
    return out


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("coding", "compress"),
    [("gzip", _gzip), ("deflate", _deflate), ("deflate", _raw_deflate), ("br", _br)],
)
@pytest.mark.parametrize("mode", ["passthrough", "frames"])
async def test_compressed_sse_still_alerts_and_is_forwarded_unchanged(
    start_app: StartApp,
    start: StartProxy,
    session: aiohttp.ClientSession,
    logs: LogEntries,
    coding: str,
    compress: Any,
    mode: str,
) -> None:
    """gzip/deflate/br SSE reaches the client compressed as sent; the faults still alert."""
    plain = fixtures.faulty_stream("invalid_utf8", "openai")
    packed = compress(plain)

    app = compressed_sse_app("/v1/chat/completions", packed, coding, seed=5, max_size=97)
    url = await start(await start_app(app), mode=mode)
    async with session.post(f"{url}/v1/chat/completions", json={"stream": True}) as resp:
        received = b"".join(await read_all(resp))
        assert resp.headers["Content-Encoding"] == coding
        sid = resp.headers[STREAM_ID]
    assert received == packed
    assert alert_names(logs, sid) == {"sse.replacement_char"}
    line = summary(logs, sid)
    assert line["observed"] is True
    assert line["bytes"] == len(packed)
    assert line["bytes_observed"] == len(plain)
    assert line["text_length"] == len(fixtures.expected_text("openai", "invalid_utf8"))


@pytest.mark.asyncio
async def test_clean_compressed_stream_raises_no_warning(
    start_app: StartApp, start: StartProxy, session: aiohttp.ClientSession, logs: LogEntries
) -> None:
    """A clean gzip stream cut into tiny reads decodes to the exact text with no warning."""
    plain = fixtures.clean_stream("anthropic")
    packed = gzip.compress(plain)

    app = compressed_sse_app("/v1/messages", packed, "gzip", seed=1, max_size=5)
    url = await start(await start_app(app))
    async with session.post(f"{url}/v1/messages", json={"stream": True}) as resp:
        assert await resp.read() == packed
        sid = resp.headers[STREAM_ID]
    assert warnings(logs) == []
    line = summary(logs, sid)
    assert line["dialect"] == "anthropic"
    assert line["text_length"] == len(fixtures.MESSAGE)
