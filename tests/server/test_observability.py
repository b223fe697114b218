"""Health, Prometheus metrics, reserved admin paths, and logs: JSON lines without secrets."""

from __future__ import annotations

import asyncio
import io
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import structlog
from aiohttp import web

from sse_proxy.obs.logs import configure_logging
from sse_proxy.tools import fixtures
from tests.support.logs import LogEntries, metric_sum, wait_for
from tests.support.net import STREAM_ID
from tests.support.stack import StartApp, StartProxy

SECRETS = {
    "Authorization": "Bearer sk-live-SECRET-authz-0001",
    "x-api-key": "SECRET-xapikey-0002",
    "api-key": "SECRET-apikey-0003",
    "Cookie": "session=SECRET-cookie-0004",
    "X-Custom-Token": "SECRET-token-0005",
    "X-Client-Secret": "SECRET-clientsecret-0006",
    "Proxy-Authorization": "Basic SECRET-proxyauth-0007",
}
SECRET_MARKERS = [v.split()[-1].split("=")[-1] for v in SECRETS.values()]


async def _get_text(session: aiohttp.ClientSession, url: str) -> tuple[int, str, str]:
    async with session.get(url) as resp:
        return resp.status, resp.headers.get("Content-Type", ""), await resp.text()


@pytest.mark.asyncio
async def test_health(proxy_url: str, session: aiohttp.ClientSession) -> None:
    """The health endpoint answers 200 with status ok and the active stream count."""
    async with session.get(f"{proxy_url}/_sse-proxy/health") as resp:
        assert resp.status == 200
        health = json.loads(await resp.read())
        assert health["status"] == "ok"
        assert health["active_streams"] == 0
        assert [r["route"] for r in health["routes"]] == ["default"]


@pytest.mark.asyncio
async def test_metrics_count_streams_alerts_bytes_and_errors(
    mock_url: str, start: StartProxy, session: aiohttp.ClientSession, logs: LogEntries
) -> None:
    """After clean, faulty, cut and failed requests the metrics hold the exact counts."""
    url = await start(mock_url)
    clean = fixtures.clean_stream("openai")
    async with session.post(f"{url}/v1/chat/completions", json={"stream": True}) as resp:
        assert await resp.read() == clean
    async with session.post(
        f"{url}/v1/chat/completions",
        json={"stream": True},
        headers={"X-Mock-Fault": "truncated"},
    ) as resp:
        faulty = await resp.read()
    async with session.post(f"{url}/sse/raw?close_early=1", data=clean) as resp:
        cut_sid = resp.headers[STREAM_ID]
        with pytest.raises(aiohttp.ClientPayloadError):
            await resp.read()
    async with session.get(f"{url}/bytes/1000") as resp:
        await resp.read()
    # The cut stream's summary (and its metrics, counted in the same step) may land just
    # after the client saw the cut.
    await wait_for(logs, "stream.summary", cut_sid)
    status, ctype, text = await _get_text(session, f"{url}/_sse-proxy/metrics")
    assert status == 200
    assert ctype.startswith("text/plain")
    assert metric_sum(text, "sse_proxy_streams_total", ended_by="upstream_eof") == 2
    assert metric_sum(text, "sse_proxy_streams_total", ended_by="upstream_error") == 1
    assert metric_sum(text, "sse_proxy_streams_active") == 0
    assert metric_sum(text, "sse_proxy_alerts_total", event="sse.truncated") == 2
    cut = len(clean) // 2  # close_early sends half the body
    assert metric_sum(text, "sse_proxy_stream_bytes_total") == len(clean) + len(faulty) + cut
    assert metric_sum(text, "sse_proxy_events_total") > 20
    assert metric_sum(text, "sse_proxy_time_to_first_byte_seconds_count") == 3
    assert metric_sum(text, "sse_proxy_stream_duration_seconds_count") == 3
    assert metric_sum(text, "sse_proxy_upstream_errors_total", kind="upstream_unreachable") == 0


@pytest.mark.asyncio
async def test_metrics_count_upstream_errors(
    start: StartProxy, session: aiohttp.ClientSession
) -> None:
    """Failed upstream connections are counted by kind."""
    url = await start("http://127.0.0.1:9")  # discard port: nothing listens on loopback
    for _ in range(2):
        async with session.get(f"{url}/v1/text") as resp:
            assert resp.status == 502
    _, _, text = await _get_text(session, f"{url}/_sse-proxy/metrics")
    assert metric_sum(text, "sse_proxy_upstream_errors_total", kind="upstream_unreachable") == 2


@pytest.mark.asyncio
async def test_active_streams_visible_while_streaming(
    start_app: StartApp, start: StartProxy, session: aiohttp.ClientSession
) -> None:
    """While a stream is open, health and the active gauge show it; after, they go to 0."""
    release = asyncio.Event()

    async def held(request: web.Request) -> web.StreamResponse:
        resp = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await resp.prepare(request)
        await resp.write(b"data: 1\n\n")
        await release.wait()
        await resp.write(b"data: 2\n\n")
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_get("/s", held)
    url = await start(await start_app(app))
    async with aiohttp.ClientSession() as other:
        resp = await other.get(f"{url}/s")
        await resp.content.readany()
        async with session.get(f"{url}/_sse-proxy/health") as health:
            assert json.loads(await health.read())["active_streams"] == 1
        _, _, text = await _get_text(session, f"{url}/_sse-proxy/metrics")
        assert metric_sum(text, "sse_proxy_streams_active") == 1
        release.set()
        await resp.read()
        resp.release()
    _, _, text = await _get_text(session, f"{url}/_sse-proxy/metrics")
    assert metric_sum(text, "sse_proxy_streams_active") == 0


@pytest.mark.asyncio
async def test_reserved_paths_are_404_and_never_forwarded(
    start_app: StartApp, start: StartProxy, session: aiohttp.ClientSession
) -> None:
    """Anything under the admin prefix is answered by the proxy; lookalikes are forwarded."""
    seen: list[str] = []

    async def record(request: web.Request) -> web.Response:
        seen.append(f"{request.method} {request.raw_path}")
        return web.Response(text="upstream")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", record)
    url = await start(await start_app(app))
    for method, path in [
        ("GET", "/_sse-proxy"),
        ("GET", "/_sse-proxy/"),
        ("GET", "/_sse-proxy/nope"),
        ("POST", "/_sse-proxy/health"),
        ("DELETE", "/_sse-proxy/metrics"),
        ("GET", "/_sse-proxy/health/extra"),
    ]:
        async with session.request(method, url + path) as resp:
            assert resp.status == 404, (method, path)
            assert json.loads(await resp.read())["error"]["type"] == "not_found"
    assert seen == []
    async with session.get(f"{url}/_sse-proxyish/x") as resp:
        assert await resp.text() == "upstream"
    async with session.get(f"{url}/v1/_sse-proxy/health") as resp:
        assert await resp.text() == "upstream"
    assert seen == ["GET /_sse-proxyish/x", "GET /v1/_sse-proxy/health"]


@pytest.mark.asyncio
async def test_custom_admin_prefix(
    mock_url: str, start: StartProxy, session: aiohttp.ClientSession
) -> None:
    """admin_prefix moves the reserved paths; the default prefix is then forwarded."""
    url = await start(mock_url, admin_prefix="/_ops")
    async with session.get(f"{url}/_ops/health") as resp:
        assert resp.status == 200
    async with session.get(f"{url}/_sse-proxy/health") as resp:
        assert resp.status == 404
        assert "not_found" not in await resp.text()  # the mock's own 404


async def _secret_traffic(url: str) -> list[str]:
    """SSE, faulty SSE, plain and cut requests carrying every kind of secret."""
    sids = []
    async with aiohttp.ClientSession() as client:
        for path, body, extra in [
            ("/v1/chat/completions?api_key=SECRET-query-0008", {"stream": True}, {}),
            ("/v1/messages", {"stream": True}, {"X-Mock-Fault": "invalid_utf8"}),
            ("/echo/plain?token=SECRET-query-0009", {"x": 1}, {}),
        ]:
            async with client.post(url + path, json=body, headers={**SECRETS, **extra}) as resp:
                await resp.read()
                sids.append(resp.headers[STREAM_ID])
        async with client.post(
            f"{url}/sse/raw?close_early=1", data=fixtures.clean_stream(), headers=SECRETS
        ) as resp:
            sids.append(resp.headers[STREAM_ID])
            with pytest.raises(aiohttp.ClientPayloadError):
                await resp.read()
    return sids


@pytest.mark.asyncio
async def test_secrets_absent_from_captured_logs(proxy_url: str, logs: LogEntries) -> None:
    """No header secret, query secret or message text shows up in any log event."""
    sids = await _secret_traffic(proxy_url)
    await wait_for(logs, "stream.summary", sids[0])
    assert len(logs) >= 5
    dumped = repr(logs)
    for marker in [*SECRET_MARKERS, "SECRET-query"]:
        assert marker not in dumped
    assert "Привет" not in dumped  # message text is not logged by default


@pytest.fixture
def json_log() -> Iterator[io.StringIO]:
    """The proxy's real JSON log rendering into a buffer; the old config restored after."""
    saved = structlog.get_config()
    buffer = io.StringIO()
    configure_logging(fmt="json", stream=buffer, level="debug")
    try:
        yield buffer
    finally:
        structlog.configure(**saved)


@pytest.mark.asyncio
async def test_json_log_lines_carry_no_secrets(
    mock_url: str, start: StartProxy, json_log: io.StringIO
) -> None:
    """The rendered JSON lines parse, carry event/level/timestamp, and hold no secret."""
    url = await start(mock_url)
    sids = await _secret_traffic(url)
    down = await start("http://127.0.0.1:9")
    async with (
        aiohttp.ClientSession() as client,
        client.get(f"{down}/x", headers=SECRETS) as resp,
    ):
        assert resp.status == 502
    # The cut stream's summary may land just after the client saw the cut.
    await _rendered(json_log, "stream.summary", sids[3])
    text = json_log.getvalue()
    lines = [json.loads(line) for line in text.splitlines()]
    assert len(lines) >= 6
    for entry in lines:
        assert {"event", "level", "timestamp"} <= set(entry)
    for marker in [*SECRET_MARKERS, "SECRET-query"]:
        assert marker not in text
    assert "Привет" not in text
    assert "Traceback" not in text
    by_event: dict[str, list[dict[str, Any]]] = {}
    for entry in lines:
        by_event.setdefault(entry["event"], []).append(entry)
    assert {e["stream_id"] for e in by_event["stream.summary"]} >= {sids[0], sids[1]}
    alerts = by_event["sse.replacement_char"]
    assert alerts
    assert all(a["level"] == "warning" and a["stream_id"] == sids[1] for a in alerts)
    assert by_event["upstream.error"][0]["level"] == "warning"


async def _rendered(buffer: io.StringIO, event: str, stream_id: str) -> None:
    """Wait until the JSON log in ``buffer`` holds ``event`` for ``stream_id`` (a buffer
    has no event to await: poll it, up to 5 s)."""
    for _ in range(500):
        lines = map(json.loads, buffer.getvalue().splitlines())
        if any(e["event"] == event and e.get("stream_id") == stream_id for e in lines):
            return
        await asyncio.sleep(0.01)
    raise AssertionError(f"{event} of {stream_id} not logged")


def test_redaction_of_fields_that_look_secret(json_log: io.StringIO) -> None:
    """Secret-named fields and header mappings are redacted by the log pipeline itself."""
    log = structlog.get_logger("sse-proxy")
    log.info(
        "probe",
        api_key="SECRET-a",
        headers={"Authorization": "SECRET-b", "Accept": "text/event-stream"},
        upstream="https://user:SECRET-c@api.example.com/v1?key=SECRET-d&x=1",
        access_token="SECRET-e",
    )
    (entry,) = [json.loads(line) for line in json_log.getvalue().splitlines()]
    assert "SECRET" not in json.dumps(entry)
    assert entry["headers"]["Accept"] == "text/event-stream"
    assert "x=1" in entry["upstream"]


def test_console_rendering(json_log: io.StringIO) -> None:
    """The console format renders readable lines (not JSON) and still redacts."""
    buffer = io.StringIO()
    configure_logging(fmt="console", stream=buffer)
    structlog.get_logger("sse-proxy").warning("sse.truncated", x_api_key="SECRET-f", n=1)
    out = buffer.getvalue()
    assert "sse.truncated" in out
    assert "SECRET" not in out
    with pytest.raises(json.JSONDecodeError):
        json.loads(out)


@pytest.mark.asyncio
async def test_recordings_carry_no_secrets(
    mock_url: str, start: StartProxy, logs: LogEntries, tmp_path: Path
) -> None:
    """With record_dir set, each SSE stream is recorded with its secret headers redacted."""
    url = await start(mock_url, record_dir=str(tmp_path))
    sids = await _secret_traffic(url)
    for sid in (sids[0], sids[1], sids[3]):  # written by the recorder's thread, at its end
        await wait_for(logs, "recording.written", sid)
    files = sorted(tmp_path.glob("*.ssrec"))  # noqa: ASYNC240 - a tiny local directory
    assert len(files) == 3  # the three SSE streams; the plain echo is not recorded
    for path in files:
        data = path.read_bytes()
        assert b"[redacted]" in data
        for marker in [*SECRET_MARKERS, "SECRET-query"]:
            assert marker.encode() not in data, (path.name, marker)
