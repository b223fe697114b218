"""The inspector through a real proxy on loopback: routes, bounds, secrets, the live feed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
import pytest_asyncio
from aiohttp import web

from sse_proxy.inspect.registry import Registry
from sse_proxy.inspect.web import REGISTRY
from sse_proxy.recording import load_recording
from sse_proxy.server.run import start_proxy, stop_proxy
from sse_proxy.settings import Config
from sse_proxy.tools.mock_upstream import start_mock_upstream
from tests.support.inspector import open_record
from tests.support.upstreams import compressed_sse_app

UI = "/_sse-proxy/ui"
SECRET = "sk-test-SECRET-0123456789abcdef"


@pytest_asyncio.fixture
async def mock_url() -> AsyncIterator[str]:
    runner, url = await start_mock_upstream(seed=5)
    try:
        yield url
    finally:
        await runner.cleanup()


@pytest_asyncio.fixture
async def proxies() -> AsyncIterator[list[web.AppRunner]]:
    runners: list[web.AppRunner] = []
    try:
        yield runners
    finally:
        for r in runners:
            await stop_proxy(r)


async def _proxy(runners: list[web.AppRunner], upstream: str, **kw: Any) -> str:
    runner, url = await start_proxy(
        Config(upstream=upstream, port=0, shutdown_grace=0.5, log_level="error", **kw)
    )
    runners.append(runner)
    return url


async def _stream(url: str, fault: str | None = None, path: str = "/v1/chat/completions") -> str:
    headers = {"Authorization": f"Bearer {SECRET}"}
    if fault:
        headers["X-Mock-Fault"] = fault
    async with (
        aiohttp.ClientSession() as s,
        s.post(url + path, json={"stream": True}, headers=headers) as resp,
    ):
        await resp.read()
        return resp.headers["X-SSE-Proxy-Stream-Id"]


@pytest.mark.asyncio
async def test_ui_is_off_by_default(mock_url: str, proxies: list[web.AppRunner]) -> None:
    url = await _proxy(proxies, mock_url)
    async with aiohttp.ClientSession() as s, s.get(url + UI) as resp:
        assert resp.status == 404


@pytest.mark.asyncio
async def test_stream_page_and_recording(
    mock_url: str, proxies: list[web.AppRunner], tmp_path
) -> None:
    url = await _proxy(proxies, mock_url, ui=True, ui_text=True)
    sid = await _stream(url, "invalid_utf8")
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{url}{UI}/streams.json") as resp:
            rows = (await resp.json())["streams"]
        (row,) = rows
        assert row["id"] == sid
        assert row["alerts"] == {"sse.replacement_char": 2}
        assert row["model"] == "-" or isinstance(row["model"], str)
        async with s.get(f"{url}{UI}/stream/{sid}") as resp:
            page = await resp.text()
        async with s.get(f"{url}{UI}/stream/{sid}.ssrec") as resp:
            assert resp.status == 200
            (tmp_path / "s.ssrec").write_bytes(await resp.read())
    assert 'class="m alert"' in page
    # values as the logs show them: JSON, never Python reprs
    assert "active <strong>false</strong>" in page
    assert "route <strong>default</strong>" in page
    assert "False" not in page
    assert "[&#x27;" not in page
    assert "sse.replacement_char" in page
    assert SECRET not in page
    rec = load_recording(tmp_path / "s.ssrec")
    from sse_proxy.tools import fixtures

    assert rec.body == fixtures.faulty_stream("invalid_utf8", "openai")
    assert rec.end == "upstream_eof"
    assert SECRET not in (tmp_path / "s.ssrec").read_text()


@pytest.mark.asyncio
async def test_text_hidden_without_ui_text(mock_url: str, proxies: list[web.AppRunner]) -> None:
    url = await _proxy(proxies, mock_url, ui=True)
    sid = await _stream(url, path="/v1/text")
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{url}{UI}/stream/{sid}") as resp:
            page = await resp.text()
        async with s.get(f"{url}{UI}/stream/{sid}.ssrec") as resp:
            assert resp.status == 403
    from sse_proxy.tools import fixtures

    for word in fixtures.MESSAGE.split()[:5]:
        if len(word) > 3:
            assert word not in page


@pytest.mark.asyncio
async def test_memory_is_bounded(mock_url: str, proxies: list[web.AppRunner]) -> None:
    url = await _proxy(proxies, mock_url, ui=True, ui_text=True, ui_streams=3, ui_stream_bytes=500)
    ids = [await _stream(url) for _ in range(5)]
    async with aiohttp.ClientSession() as s:
        async with s.get(f"{url}{UI}/streams.json") as resp:
            rows = (await resp.json())["streams"]
        assert [r["id"] for r in rows] == ids[:1:-1]  # the last three, newest first
        async with s.get(f"{url}{UI}/stream/{ids[0]}") as resp:
            assert resp.status == 404
        async with s.get(f"{url}{UI}/stream/{ids[-1]}.ssrec") as resp:
            body = await resp.read()
    lines = [json.loads(x) for x in body.splitlines()]
    assert lines[-1]["end"] == "inspector_cap"
    assert lines[-1]["bytes"] == 500


@pytest.mark.asyncio
async def test_feed_announces_streams_live(mock_url: str, proxies: list[web.AppRunner]) -> None:
    url = await _proxy(proxies, mock_url, ui=True)
    async with aiohttp.ClientSession() as s, s.get(f"{url}{UI}/events") as feed:
        assert feed.headers["Content-Type"].startswith("text/event-stream")
        await feed.content.readuntil(b"\n\n")  # the greeting: subscribed from here on
        task = asyncio.ensure_future(_stream(url, "crlf"))
        seen: dict[str, Any] = {}
        while seen.get("row", {}).get("ended_by", "-") == "-":
            block = await feed.content.readuntil(b"\n\n")
            if block.startswith(b"event: stream"):
                seen = json.loads(block.split(b"data: ", 1)[1])
        sid = await task
    assert seen["row"]["id"] == sid
    assert seen["row"]["alerts"] == {"sse.crlf_framing": 1}
    assert f'id="row-{sid}"' in seen["html"]


def test_registry_bounds_bytes_and_reads() -> None:
    reg = Registry(max_streams=2, max_bytes=10, max_reads=3)
    rec = open_record(reg, "a", method="GET", path="/x")
    for _ in range(5):
        rec.read(b"0123456")
    assert rec.kept == 10
    assert rec.body == b"0123456012"
    assert rec.received == 35
    assert len(rec.reads) == 3
    assert rec.reads_dropped == 2
    for name in ("b", "c"):
        open_record(reg, name, method="GET", path="/x")
    assert list(reg.streams) == ["b", "c"]


def test_ui_flags_reach_the_config() -> None:
    from sse_proxy.cli import build_parser
    from sse_proxy.cli_serve import SERVE_FLAGS as _SERVE_FLAGS
    from sse_proxy.config import load_config

    args = build_parser().parse_args(
        [
            "serve",
            "--upstream",
            "http://127.0.0.1:1",
            "--ui",
            "--ui-text",
            "--ui-allow-remote",
            "--ui-streams",
            "7",
            "--ui-stream-bytes",
            "4096",
        ]
    )
    cfg = load_config(flags={n: getattr(args, n, None) for n in _SERVE_FLAGS}, env={})
    assert (cfg.ui, cfg.ui_text, cfg.ui_allow_remote) == (True, True, True)
    assert (cfg.ui_streams, cfg.ui_stream_bytes) == (7, 4096)
    default = load_config(flags={}, env={})
    assert (default.ui, default.ui_text, default.ui_allow_remote) == (False, False, False)


@pytest.mark.asyncio
async def test_foreign_host_name_is_refused(mock_url: str, proxies: list[web.AppRunner]) -> None:
    """A page on another site that rebinds its name to 127.0.0.1 must not read the inspector."""
    url = await _proxy(proxies, mock_url, ui=True)
    async with aiohttp.ClientSession() as s:
        async with s.get(url + UI, headers={"Host": "evil.example"}) as resp:
            assert resp.status == 421  # the front door, before the inspector
        port = url.rsplit(":", 1)[1]
        for host in (f"localhost:{port}", f"127.0.0.1:{port}", f"[::1]:{port}"):
            async with s.get(url + UI, headers={"Host": host}) as resp:
                assert resp.status == 200, host
    # a name the front door serves is still no loopback name to the inspector
    url1 = await _proxy(proxies, mock_url, ui=True, allowed_hosts=("a.example",))
    async with aiohttp.ClientSession() as s, s.get(url1 + UI, headers={"Host": "a.example"}) as r:
        assert r.status == 403
    url2 = await _proxy(
        proxies, mock_url, ui=True, ui_allow_remote=True, allowed_hosts=("a.example",)
    )
    async with aiohttp.ClientSession() as s, s.get(url2 + UI, headers={"Host": "a.example"}) as r:
        assert r.status == 200


@pytest.mark.parametrize(
    ("remote", "host", "allowed"),
    [
        ("127.0.0.1", "127.0.0.1:8787", True),
        ("127.0.0.1", "localhost", True),
        ("::1", "[::1]:8787", True),
        ("127.0.0.1", "127.0.0.1:8787@evil.example", False),
        ("127.0.0.1", "127.0.0.1:8787, evil.example", False),
        ("127.0.0.1", "127.0.0.1:8787 ", False),
        ("127.0.0.1", "127.0.0.1:", False),
        ("127.0.0.1", "127.0.0.1.evil.example", False),
        ("127.0.0.1", "127.1", False),
        ("127.0.0.1", None, False),
        ("10.0.0.2", "127.0.0.1:8787", False),
    ],
)
def test_the_inspectors_host_parser_is_strict(remote: str, host: str | None, allowed: bool) -> None:
    """The inspector's own check reads Host as strictly as the front door."""
    from sse_proxy.inspect.web import loopback_request

    assert loopback_request(remote, host) is allowed


def _unframeable(headers: Any) -> bool:
    return (
        headers.get("X-Frame-Options") == "DENY"
        and headers.get("X-Content-Type-Options") == "nosniff"
        and "frame-ancestors 'none'" in headers.get("Content-Security-Policy", "")
    )


@pytest.mark.asyncio
@pytest.mark.parametrize("admin_port", [False, True])
async def test_the_proxys_own_pages_cannot_be_framed(
    mock_url: str, proxies: list[web.AppRunner], admin_port: bool
) -> None:
    """Every inspector page, its JSON, feed, download and errors, health, metrics and the
    admin prefix's 404s, on the traffic port or on an admin listener of their own: never
    framed by another page (X-Frame-Options, CSP frame-ancestors), never type-sniffed."""
    extra: dict[str, Any] = {"admin_port": 0} if admin_port else {}
    runner, url = await start_proxy(
        Config(
            upstream=mock_url,
            port=0,
            shutdown_grace=0.5,
            log_level="error",
            ui=True,
            allowed_hosts=("a.example",),
            **extra,
        )
    )
    proxies.append(runner)
    from sse_proxy.server.run import admin_url

    admin = admin_url(runner)
    sid = await _stream(url)
    paths = [
        UI,
        f"{UI}/streams.json",
        f"{UI}/stream/{sid}",
        f"{UI}/stream/{sid}.ssrec",
        f"{UI}/stream/nosuchstream",  # a 404 of the inspector
        "/favicon.ico",
        "/_sse-proxy/health",
        "/_sse-proxy/metrics",
        "/_sse-proxy/nothing-here",
    ]
    seen: dict[str, tuple[int, bool]] = {}
    async with aiohttp.ClientSession() as s:
        for path in paths:
            async with s.get(admin + path) as resp:
                seen[path] = (resp.status, _unframeable(resp.headers))
        async with s.get(admin + f"{UI}/events") as resp:  # the live feed: its head
            seen["events"] = (resp.status, _unframeable(resp.headers))
        async with s.get(admin + UI, headers={"Host": "a.example"}) as resp:
            seen["a foreign name"] = (resp.status, _unframeable(resp.headers))
        if admin_port:  # and whatever else that listener answers
            async with s.get(admin + "/v1/models") as resp:
                seen["not an endpoint"] = (resp.status, _unframeable(resp.headers))
            async with s.get(admin + UI, headers={"Sec-Fetch-Site": "cross-site"}) as resp:
                seen["refused"] = (resp.status, _unframeable(resp.headers))
    assert all(framed for _, framed in seen.values()), seen
    assert seen[UI][0] == seen["events"][0] == seen["/_sse-proxy/health"][0] == 200, seen
    assert seen["a foreign name"][0] == 403, seen


def test_a_content_security_policy_keeps_its_rules() -> None:
    from multidict import CIMultiDict

    from sse_proxy.inspect.web import unframeable

    headers = CIMultiDict({"Content-Security-Policy": "default-src 'self';"})
    unframeable(headers)
    assert headers["Content-Security-Policy"] == "default-src 'self'; frame-ancestors 'none'"
    unframeable(headers)  # once is enough
    assert headers["Content-Security-Policy"] == "default-src 'self'; frame-ancestors 'none'"


async def _ssrec(url: str, sid: str, into: Any) -> Any:
    """The inspector's recording of stream ``sid``, loaded."""
    async with aiohttp.ClientSession() as s, s.get(f"{url}{UI}/stream/{sid}.ssrec") as resp:
        assert resp.status == 200
        into.write_bytes(await resp.read())
    return load_recording(into)


@pytest.mark.asyncio
async def test_the_inspector_and_the_flight_recorder_share_the_reads_each_to_its_bound(
    mock_url: str, proxies: list[web.AppRunner], tmp_path
) -> None:
    """With both on, one log of the stream's reads serves both: the recording holds the
    whole stream, the inspector its first ``ui_stream_bytes`` and every alert."""
    from sse_proxy.tools import fixtures

    url = await _proxy(
        proxies,
        mock_url,
        ui=True,
        ui_text=True,  # (the download holds the text)
        ui_stream_bytes=300,
        record_dir=str(tmp_path / "rec"),
        record_on="ok",
    )
    sid = await _stream(url, "invalid_utf8")
    whole = fixtures.faulty_stream("invalid_utf8", "openai")
    assert len(whole) > 300
    async with aiohttp.ClientSession() as s, s.get(f"{url}{UI}/streams.json") as resp:
        (row,) = (await resp.json())["streams"]
    assert row["alerts"] == {"sse.replacement_char": 2}
    record = proxies[0].app[REGISTRY].get(sid)
    assert record is not None
    # each alert marked where it fell, as the stream went (the strip's marks)
    assert [m.name for m in record.alerts] == ["sse.replacement_char"] * 2
    shown = await _ssrec(url, sid, tmp_path / "ui.ssrec")
    assert shown.body == whole[:300]
    assert shown.end == "inspector_cap"
    for _ in range(200):  # the recorder's thread writes it once the stream is over
        written = list((tmp_path / "rec").glob(f"*{sid}.ssrec"))
        if written:
            break
        await asyncio.sleep(0.05)
    (path,) = written
    recorded = load_recording(path)
    assert recorded.body == whole
    assert recorded.end == "upstream_eof"


@pytest.mark.asyncio
async def test_a_compressed_stream_is_inspected_decoded_and_recorded_as_it_came(
    proxies: list[web.AppRunner], tmp_path
) -> None:
    import gzip

    from sse_proxy.tools import fixtures

    plain = fixtures.faulty_stream("invalid_utf8", "openai")
    packed = gzip.compress(plain)

    app = compressed_sse_app("/v1/chat/completions", packed, "gzip", seed=5, max_size=97)
    runner = web.AppRunner(app)
    await runner.setup()
    site = web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    try:
        port = runner.addresses[0][1]
        url = await _proxy(
            proxies,
            f"http://127.0.0.1:{port}",
            ui=True,
            ui_text=True,
            record_dir=str(tmp_path / "rec"),
            record_on="ok",
        )
        async with (
            aiohttp.ClientSession(auto_decompress=False) as s,
            s.post(url + "/v1/chat/completions", json={"stream": True}) as resp,
        ):
            assert await resp.read() == packed
            sid = resp.headers["X-SSE-Proxy-Stream-Id"]
        shown = await _ssrec(url, sid, tmp_path / "ui.ssrec")
        assert shown.body == plain  # the inspector shows what was observed: decoded
        for _ in range(200):
            written = list((tmp_path / "rec").glob(f"*{sid}.ssrec"))
            if written:
                break
            await asyncio.sleep(0.05)
        (path,) = written
        assert load_recording(path).body == packed  # the recording: the bytes as they came
    finally:
        await runner.cleanup()
