"""The mock LLM upstream over real loopback sockets: endpoints, faults, echo and raw bytes."""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import signal
import socket
import subprocess
import sys
import urllib.request
from collections.abc import AsyncIterator

import aiohttp
import pytest
import pytest_asyncio
from pytest_aiohttp import AiohttpClient

from sse_proxy.core.dialects.registry import DIALECTS
from sse_proxy.errors import UsageError
from sse_proxy.names import DIALECT_BODIES, DIALECT_PATHS
from sse_proxy.tools import fixtures
from sse_proxy.tools.mock_upstream import make_mock_app, mock_upstream, run_mock_upstream
from tests.support.cli import ROOT


@pytest_asyncio.fixture
async def base_url() -> AsyncIterator[str]:
    """A clean mock upstream on an ephemeral loopback port."""
    async with mock_upstream() as url:
        yield url


async def _post(url: str, body: object, **headers: str) -> tuple[aiohttp.ClientResponse, bytes]:
    async with (
        aiohttp.ClientSession() as session,
        session.post(url, json=body, headers=headers) as resp,
    ):
        return resp, await resp.read()


@pytest.mark.asyncio
async def test_chat_stream_is_the_canonical_fixture(base_url: str) -> None:
    """A streaming chat request gets the exact fixture bytes with SSE response headers."""
    resp, body = await _post(f"{base_url}/v1/chat/completions", {"model": "x", "stream": True})
    assert resp.status == 200
    assert resp.content_type == "text/event-stream"
    assert resp.headers["Cache-Control"] == "no-cache"
    assert resp.headers["x-request-id"].startswith("req_mock_")
    assert body == fixtures.clean_stream("openai")


@pytest.mark.asyncio
@pytest.mark.parametrize(
    ("path", "dialect"),
    [("/v1/responses", "responses"), ("/v1/messages", "anthropic"), ("/v1/text", "text")],
)
async def test_other_dialect_streams(base_url: str, path: str, dialect: str) -> None:
    """Responses, Anthropic and raw-text endpoints stream their dialect's fixture."""
    resp, body = await _post(base_url + path, {"stream": True})
    assert resp.content_type == "text/event-stream"
    assert body == fixtures.clean_stream(dialect)


@pytest.mark.asyncio
async def test_text_endpoint_answers_get(base_url: str) -> None:
    """GET /v1/text streams raw text too, and request ids differ per request."""
    async with aiohttp.ClientSession() as session:
        ids = []
        for _ in range(2):
            async with session.get(f"{base_url}/v1/text") as resp:
                assert await resp.read() == fixtures.raw_text_stream()
                ids.append(resp.headers["x-request-id"])
    assert ids[0] != ids[1]


@pytest.mark.asyncio
async def test_non_streaming_requests_get_json(base_url: str) -> None:
    """Without "stream": true each endpoint answers one JSON object holding the message."""
    resp, body = await _post(f"{base_url}/v1/chat/completions", {"messages": []})
    assert resp.content_type == "application/json"
    assert json.loads(body)["choices"][0]["message"]["content"] == fixtures.MESSAGE
    _, body = await _post(f"{base_url}/v1/responses", {"stream": False})
    assert json.loads(body)["output"][0]["content"][0]["text"] == fixtures.MESSAGE
    _, body = await _post(f"{base_url}/v1/messages", {})
    assert json.loads(body)["content"][0]["text"] == fixtures.MESSAGE


@pytest.mark.asyncio
async def test_chat_honours_n_and_include_usage(base_url: str) -> None:
    """n=2 and stream_options.include_usage shape the stream like OpenAI does."""
    request = {"stream": True, "n": 2, "stream_options": {"include_usage": True}}
    _, body = await _post(f"{base_url}/v1/chat/completions", request)
    assert body == fixtures.openai_chat_stream(choices=2, include_usage=True)


@pytest.mark.asyncio
async def test_bad_requests_get_400(base_url: str) -> None:
    """Broken JSON, a bad n and an unknown fault are refused with a readable 400."""
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{base_url}/v1/chat/completions", data=b"{nope") as resp:
            assert resp.status == 400
        async with session.post(f"{base_url}/v1/chat/completions", json={"n": 0}) as resp:
            assert resp.status == 400
        async with session.post(
            f"{base_url}/v1/messages", json={"stream": True}, headers={"X-Mock-Fault": "bogus"}
        ) as resp:
            assert resp.status == 400
            message = (await resp.json())["error"]["message"]
            assert "bogus" in message
            assert "invalid_utf8" in message


@pytest.mark.asyncio
@pytest.mark.parametrize("kind", sorted(fixtures.FAULTS))
async def test_fault_per_request_header(base_url: str, kind: str) -> None:
    """The X-Mock-Fault header picks the fault for one request."""
    resp, body = await _post(f"{base_url}/v1/messages", {"stream": True}, **{"X-Mock-Fault": kind})
    assert resp.status == 200
    assert body == fixtures.faulty_stream(kind, "anthropic")


@pytest.mark.asyncio
async def test_fault_per_request_query_and_app_default() -> None:
    """An app-wide fault applies by default; ?fault= overrides it, and "none" turns it off."""
    async with mock_upstream(fault="truncated", seed=3) as url:
        _, body = await _post(f"{url}/v1/responses", {"stream": True})
        assert body == fixtures.faulty_stream("truncated", "responses")
        _, body = await _post(f"{url}/v1/responses?fault=crlf", {"stream": True})
        assert body == fixtures.faulty_stream("crlf", "responses")
        _, body = await _post(f"{url}/v1/chat/completions?fault=none", {"stream": True})
        assert body == fixtures.clean_stream("openai")


def test_unknown_fault_is_a_usage_error() -> None:
    """An unknown app-wide fault raises UsageError naming every valid kind."""
    with pytest.raises(UsageError, match="valid kinds") as info:
        make_mock_app(fault="bogus")
    assert all(kind in str(info.value) for kind in fixtures.FAULTS)
    with pytest.raises(UsageError, match="bogus"):
        run_mock_upstream(port=0, fault="bogus")


@pytest.mark.asyncio
async def test_streams_are_written_in_pieces_that_cut_characters() -> None:
    """With a small delay between writes the client's reads cut multi-byte characters."""
    cut_chars = False
    async with mock_upstream(chunk_delay=0.002) as url, aiohttp.ClientSession() as session:
        for seed in range(3):
            async with session.get(f"{url}/v1/text?seed={seed}") as resp:
                reads = [chunk async for chunk in resp.content.iter_any()]
            assert b"".join(reads) == fixtures.raw_text_stream()
            assert len(reads) > 5
            for chunk in reads:
                try:
                    chunk.decode("utf-8")
                except UnicodeDecodeError:
                    cut_chars = True
    assert cut_chars


@pytest.mark.asyncio
@pytest.mark.parametrize("query", ["", "?chunk=1", "?chunk=7", "?seed=5"])
async def test_sse_raw_echoes_bytes_exactly(base_url: str, query: str) -> None:
    """POST /sse/raw streams any byte sequence back verbatim as text/event-stream."""
    payload = b"data: caf\xc3\r\n\xa9 \xff\r\r\n: comment\ndata: x" + fixtures.clean_stream("text")
    url = f"{base_url}/sse/raw{query}"
    async with aiohttp.ClientSession() as session, session.post(url, data=payload) as resp:
        assert resp.content_type == "text/event-stream"
        assert await resp.read() == payload


@pytest.mark.asyncio
async def test_sse_raw_close_early_breaks_the_body(base_url: str) -> None:
    """close_early=1 sends half the body, then drops the connection mid-stream."""
    payload = fixtures.clean_stream("openai")
    received: list[bytes] = []
    async with aiohttp.ClientSession() as session:
        async with session.post(f"{base_url}/sse/raw?chunk=100&close_early=1", data=payload) as r:
            assert r.status == 200
            with pytest.raises(aiohttp.ClientPayloadError):  # noqa: PT012 - raised mid-loop
                async for chunk in r.content.iter_any():
                    received.append(chunk)
        # The server is still fine afterwards.
        async with session.get(f"{base_url}/healthz") as resp:
            assert (await resp.json())["status"] == "ok"
    assert b"".join(received) == payload[: len(payload) // 2]


@pytest.mark.asyncio
async def test_echo_reports_what_arrived(base_url: str) -> None:
    """ANY /echo/... returns method, raw path and query, headers and a digest of the body."""
    parts = [b"abc" * 1000, b"\x00\xff" * 500, b"tail"]

    async def upload() -> AsyncIterator[bytes]:
        for part in parts:
            yield part

    async with aiohttp.ClientSession() as session:
        async with session.put(
            f"{base_url}/echo/a/b%20c?x=1&y=2",
            data=upload(),
            headers={"X-Custom": "yes", "Authorization": "Bearer sk-test"},
        ) as resp:
            echo = await resp.json()
        async with session.get(f"{base_url}/echo") as resp:
            empty = await resp.json()
    body = b"".join(parts)
    assert echo["method"] == "PUT"
    assert echo["path"] == "/echo/a/b%20c"
    assert echo["query"] == "x=1&y=2"
    assert echo["headers"]["x-custom"] == "yes"
    assert echo["headers"]["authorization"] == "Bearer sk-test"
    assert ["X-Custom", "yes"] in echo["header_list"]
    assert echo["body_len"] == len(body)
    assert echo["body_sha256"] == hashlib.sha256(body).hexdigest()
    assert empty["method"] == "GET"
    assert empty["body_len"] == 0


@pytest.mark.asyncio
async def test_bytes_endpoint(aiohttp_client: AiohttpClient) -> None:
    """GET /bytes/{n} returns n deterministic octet-stream bytes; a bad n is a 400."""
    client = await aiohttp_client(make_mock_app())
    resp = await client.get("/bytes/200000")
    assert resp.content_type == "application/octet-stream"
    assert resp.headers["Content-Length"] == "200000"
    assert await resp.read() == fixtures.pattern_bytes(200_000)
    assert (await client.get("/bytes/abc")).status == 400
    assert (await client.get("/bytes/0")).status == 200


@pytest.mark.asyncio
async def test_healthz(aiohttp_client: AiohttpClient) -> None:
    """GET /healthz answers ok with the configured fault."""
    client = await aiohttp_client(make_mock_app(fault="crlf", seed=9))
    resp = await client.get("/healthz")
    assert await resp.json() == {"status": "ok", "fault": "crlf", "seed": 9}


@pytest.mark.skipif(sys.platform == "win32", reason="SIGTERM semantics")
def test_run_mock_upstream_serves_until_sigterm() -> None:
    """The blocking entry prints its URL on one line, serves, and exits 0 on SIGTERM."""
    code = (
        "from sse_proxy.tools.mock_upstream import run_mock_upstream as r; "
        "raise SystemExit(r(port=0))"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    proc = subprocess.Popen(
        [sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=env, cwd=ROOT
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        url = line.split(" on ", 1)[1].split()[0]
        assert url.startswith("http://127.0.0.1:")
        assert "/v1/chat/completions" in line
        with urllib.request.urlopen(f"{url}/healthz", timeout=5) as resp:
            assert json.load(resp)["status"] == "ok"
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=10) == 0
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        if proc.stdout is not None:
            proc.stdout.close()


def _raw_stream(
    url: str, path: str, fault: str, body: bytes = b'{"stream": true}'
) -> tuple[bytes, bytes, BaseException | None]:
    """POST over a blocking socket: (response head, de-chunked body, the read's error).

    A blocking socket, because after a TCP reset it still returns the bytes that arrived
    before it (then raises), where a stream reader may drop them.
    """
    host, port = url.removeprefix("http://").rsplit(":", 1)
    request = (
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nX-Mock-Fault: {fault}\r\n"
        f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n"
        "Connection: close\r\n\r\n"
    ).encode() + body
    data, error = b"", None
    with socket.create_connection((host, int(port)), timeout=10) as sock:
        sock.sendall(request)
        try:
            while chunk := sock.recv(65536):
                data += chunk
        except ConnectionResetError as exc:
            error = exc
    head, _, rest = data.partition(b"\r\n\r\n")
    out = b""
    while rest:
        size_line, _, rest = rest.partition(b"\r\n")
        size = int(size_line, 16)
        if size == 0:
            out += b"<end>"  # the chunked body's last chunk: a clean end
            break
        out, rest = out + rest[:size], rest[size + 2 :]
    return head, out, error


@pytest.mark.asyncio
@pytest.mark.parametrize("dialect", fixtures.DIALECTS)
async def test_reset_fault_resets_the_connection_after_the_text(dialect: str) -> None:
    """``reset``: the stream up to its end, then a TCP reset instead of the body's end."""
    path = DIALECT_PATHS[dialect].split("?")[0]
    query = "?alt=sse" if dialect == "gemini" else ""
    asked = json.dumps(DIALECT_BODIES[dialect]).encode()  # (MCP answers a JSON-RPC request)
    async with mock_upstream(seed=4) as url:
        head, body, error = await asyncio.to_thread(_raw_stream, url, path + query, "reset", asked)
        assert head.startswith(b"HTTP/1.1 200")
        assert isinstance(error, ConnectionResetError), (body[-40:], error)
        assert body == fixtures.faulty_stream("reset", dialect)
        assert body != fixtures.clean_stream(dialect)
        _, clean, error = await asyncio.to_thread(_raw_stream, url, path + query, "none", asked)
        assert error is None
        assert clean == fixtures.clean_stream(dialect) + b"<end>"


@pytest.mark.asyncio
async def test_error_event_fault_sends_the_dialects_own_error(base_url: str) -> None:
    """``error_event``: every text delta, then the API's error event, then a clean end."""
    for dialect in ("openai", "anthropic", "responses"):
        _, body = await _post(
            base_url + DIALECT_PATHS[dialect], {"stream": True}, **{"X-Mock-Fault": "error_event"}
        )
        error = DIALECTS[dialect].error_frame
        assert error is not None
        assert body.endswith(error), dialect
        assert fixtures.clean_stream(dialect).startswith(body.removesuffix(error))


@pytest.mark.asyncio
async def test_older_fault_names_still_work(base_url: str) -> None:
    """``truncated`` was the mock's name of ``no_terminal``; it still is one, and the
    usage error says so."""
    _, old = await _post(
        f"{base_url}/v1/messages", {"stream": True}, **{"X-Mock-Fault": "truncated"}
    )
    _, new = await _post(
        f"{base_url}/v1/messages", {"stream": True}, **{"X-Mock-Fault": "no_terminal"}
    )
    assert old == new == fixtures.faulty_stream("no_terminal", "anthropic")
    assert fixtures.faulty_stream("truncated", "openai") == fixtures.faulty_stream(
        "no_terminal", "openai"
    )
    with pytest.raises(UsageError, match="truncated = no_terminal"):
        make_mock_app(fault="mid_stream")
    async with (
        mock_upstream(fault="truncated") as url,
        aiohttp.ClientSession() as session,
        session.get(f"{url}/healthz") as resp,
    ):
        assert (await resp.json())["fault"] == "no_terminal"


def test_cli_fault_help_lists_every_kind_and_the_older_name() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "sse_proxy", "mock-upstream", "--help"],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )
    text = " ".join(proc.stdout.split())
    for kind in fixtures.KINDS:
        assert kind in text
    assert "truncated = no_terminal" in text
