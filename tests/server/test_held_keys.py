"""Held keys: the sidecar adds the upstream's credentials; the app never holds them."""

from __future__ import annotations

import io
import json
from pathlib import Path

import aiohttp
import pytest
from yarl import URL

from sse_proxy.config import load_config
from sse_proxy.errors import ConfigError
from sse_proxy.obs.logs import configure_logging, get_logger
from sse_proxy.server.routes import RouteTable
from sse_proxy.server.run import start_proxy
from sse_proxy.settings import Config, RouteSpec
from sse_proxy.tools import fixtures
from tests.support.logs import LogEntries, wait_for
from tests.support.stack import StartProxy

SECRET = "sk-held-0123456789abcdef"
CHAT = {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi"}]}


@pytest.mark.asyncio
async def test_route_headers_replace_and_drop_client_auth(
    mock_url: str,
    start: StartProxy,
    session: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
) -> None:
    monkeypatch.setenv("TEST_HELD_KEY", SECRET)
    key_file = tmp_path / "key"
    key_file.write_text("file-secret-value\n")
    proxy = await start(
        "",
        routes=(
            RouteSpec(
                prefix="/held",
                upstream=mock_url,
                headers=(
                    ("Authorization", "Bearer ${TEST_HELD_KEY}"),
                    ("X-Goog-Api-Key", "${file:" + str(key_file) + "}"),
                ),
                drop_client_auth=True,
            ),
            RouteSpec(
                prefix="/keep",
                upstream=mock_url,
                headers=(("Authorization", "Bearer ${TEST_HELD_KEY}"),),
            ),
        ),
    )
    client_auth = {"Authorization": "Bearer app-key", "x-api-key": "app-x", "api-key": "app-a"}
    async with session.get(f"{proxy}/held/echo/x?key=app-q&alt=sse", headers=client_auth) as r:
        echo = json.loads(await r.read())
    assert echo["headers"]["authorization"] == f"Bearer {SECRET}"
    assert echo["headers"]["x-goog-api-key"] == "file-secret-value"
    assert "x-api-key" not in echo["headers"]
    assert "api-key" not in echo["headers"]
    assert echo["query"] == "alt=sse"
    assert [k for k, _ in echo["header_list"]].count("Authorization") == 1
    # the key's name percent-encoded, or in capitals, is the same name to the upstream
    for query in ("k%65y=app-q&alt=sse", "%6B%65%79=app-q&alt=sse", "alt=sse&KEY=app-q&x=1"):
        url = URL(f"{proxy}/held/echo/x?{query}", encoded=True)
        async with session.get(url) as r:
            echo = json.loads(await r.read())
        assert "app-q" not in echo["query"], query
        assert "alt=sse" in echo["query"], query
    async with session.get(f"{proxy}/keep/echo/x?key=app-q", headers=client_auth) as r:
        echo = json.loads(await r.read())
    assert echo["headers"]["authorization"] == f"Bearer {SECRET}"  # replaced
    assert echo["headers"]["x-api-key"] == "app-x"  # kept: not dropped on this route
    assert echo["query"] == "key=app-q"


@pytest.mark.asyncio
async def test_held_key_is_never_logged_or_recorded(
    mock_url: str,
    start: StartProxy,
    session: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
    tmp_path: Path,
    logs: LogEntries,
) -> None:
    monkeypatch.setenv("TEST_HELD_KEY", SECRET)
    record = tmp_path / "rec"
    proxy = await start(
        mock_url,
        upstream_headers=(("X-Custom-Credential", "${TEST_HELD_KEY}"),),
        record_dir=str(record),
        log_level="debug",
    )
    async with session.post(f"{proxy}/v1/chat/completions", json=CHAT) as resp:
        assert await resp.read() == fixtures.clean_stream("openai")
        sid = resp.headers["X-SSE-Proxy-Stream-Id"]
    await wait_for(logs, "stream.summary", sid)
    await wait_for(logs, "recording.written", sid)  # (by the recorder's thread, after it)
    leaks = [e for e in logs if SECRET in json.dumps(e, default=str)]
    assert not leaks, leaks
    files = list(record.iterdir())
    assert files
    for file in files:
        assert SECRET.encode() not in file.read_bytes()
    # and a line that quotes it by accident is scrubbed by the log sink itself
    out = io.StringIO()
    configure_logging(stream=out)
    try:
        get_logger().warning("oops", detail=f"header was {SECRET}", nested=[{"v": SECRET}])
    finally:
        configure_logging()
    assert SECRET not in out.getvalue()
    assert "[redacted]" in out.getvalue()


def test_missing_or_bad_key_sources_fail_at_startup(tmp_path: Path) -> None:
    def table(template: str) -> None:
        RouteTable.from_config(
            Config(upstream="http://h", upstream_headers=(("Authorization", template),)),
            env={"EMPTY": "", "WITH_NL": "a\nb"},
        )

    for template, word in (
        ("Bearer ${NOPE_NOT_SET}", "NOPE_NOT_SET is not set"),
        ("Bearer ${EMPTY}", "EMPTY is not set or empty"),
        ("${WITH_NL}", "line break"),
        ("${file:" + str(tmp_path / "missing") + "}", "cannot read key file"),
        ("${bad name}", "neither"),
    ):
        with pytest.raises(ConfigError) as info:
            table(template)
        assert word in str(info.value)
        assert "Authorization" in str(info.value)


@pytest.mark.asyncio
async def test_start_refuses_a_missing_key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("SURELY_UNSET_KEY", raising=False)
    cfg = Config(
        upstream="http://127.0.0.1:9",
        port=0,
        upstream_headers=(("Authorization", "Bearer ${SURELY_UNSET_KEY}"),),
    )
    with pytest.raises(ConfigError, match="SURELY_UNSET_KEY"):
        await start_proxy(cfg)


def test_upstream_header_flag_and_file(tmp_path: Path) -> None:
    cfg = load_config(flags={"upstream_headers": ["Authorization: Bearer ${K}", "X-A: b: c"]})
    assert cfg.upstream_headers == (("Authorization", "Bearer ${K}"), ("X-A", "b: c"))
    path = tmp_path / "c.toml"
    path.write_text('[sse-proxy]\nupstream_headers = { "x-api-key" = "${K}" }\n')
    assert load_config(path=path).upstream_headers == (("x-api-key", "${K}"),)
    with pytest.raises(ConfigError) as info:
        load_config(flags={"upstream_headers": ["no colon sk-literal-secret"]})
    assert "sk-literal-secret" not in str(info.value)
    with pytest.raises(ConfigError, match="valid header name"):
        load_config(flags={"upstream_headers": ["Bad Name: x"]})
