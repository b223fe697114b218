"""Requests forwarded exactly (method, raw path and query, body, headers) and what is refused."""

from __future__ import annotations

import asyncio
import hashlib
import json
from collections.abc import AsyncIterator
from typing import Any

import aiohttp
import pytest
from aiohttp import web
from multidict import CIMultiDict
from yarl import URL

from sse_proxy.server.request_body import WHOLE_BODY_BYTES
from sse_proxy.tools import fixtures
from tests.support.logs import LogEntries
from tests.support.net import STREAM_ID, raw_exchange
from tests.support.stack import StartApp, StartProxy


async def _echo(
    session: aiohttp.ClientSession, method: str, url: str | URL, **kw: Any
) -> dict[str, Any]:
    async with session.request(method, url, **kw) as resp:
        assert resp.status == 200, await resp.text()
        assert resp.headers[STREAM_ID]
        body: dict[str, Any] = json.loads(await resp.read())
        return body


@pytest.mark.asyncio
@pytest.mark.parametrize("method", ["GET", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"])
async def test_method_and_path_forwarded(
    proxy_url: str, session: aiohttp.ClientSession, method: str
) -> None:
    """Every method reaches upstream unchanged, on the same path."""
    echo = await _echo(session, method, f"{proxy_url}/echo/a/b.json")
    assert echo["method"] == method
    assert echo["path"] == "/echo/a/b.json"


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "target",
    [
        "/echo/x?a=1&b=2",
        "/echo/x?q=%E2%82%AC+%20&q=&&weird=%zz&=bare&semi;colon=1",
        "/echo/a%2Fb/%7Euser/caf%C3%A9/%25?x=%2B%26%3D",
        "/echo/x?",
        "/echo//double//slash/x",
    ],
)
async def test_raw_path_and_query_forwarded_exactly(
    proxy_url: str, session: aiohttp.ClientSession, target: str
) -> None:
    """Path and query reach upstream exactly as sent: no decoding, re-encoding or reordering."""
    url = URL(proxy_url + target, encoded=True)
    echo = await _echo(session, "GET", url)
    sent_path, _, sent_query = URL(target, encoded=True).raw_path_qs.partition("?")
    assert echo["path"] == sent_path
    assert echo["query"] == sent_query


@pytest.mark.asyncio
async def test_dot_segments_are_resolved_before_forwarding(
    proxy_url: str, session: aiohttp.ClientSession
) -> None:
    """Dot segments are removed per RFC 3986; empty segments and the query stay."""
    url = URL(proxy_url + "/echo//double//slash/./dot/../x?a=../b", encoded=True)
    echo = await _echo(session, "GET", url)
    assert (echo["path"], echo["query"]) == ("/echo//double//slash/x", "a=../b")


@pytest.mark.asyncio
async def test_raw_target_bytes_forwarded_on_the_wire(
    start_app: StartApp, start: StartProxy
) -> None:
    """A request line with odd escapes reaches upstream as the same bytes (raw socket)."""
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.raw_path)
        return web.Response(text="ok")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    url = await start(await start_app(app))
    target = "/v1/x%2fy%00z/%C3%A9?k=%ff%FE&a=b+c&a=d&empty=&&%3F=%3D"
    reply = await raw_exchange(
        url, f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n".encode()
    )
    assert reply.status == 200
    assert seen == [target]


@pytest.mark.asyncio
async def test_large_streamed_post_body_forwarded_exactly(
    proxy_url: str, session: aiohttp.ClientSession
) -> None:
    """A 6 MB chunked upload (no Content-Length) reaches upstream byte for byte."""
    data = fixtures.pattern_bytes(6 * 1024 * 1024 + 13)

    async def pieces() -> AsyncIterator[bytes]:
        step = 100_003
        for i in range(0, len(data), step):
            yield data[i : i + step]

    echo = await _echo(session, "POST", f"{proxy_url}/echo/upload", data=pieces())
    assert echo["body_len"] == len(data)
    assert echo["body_sha256"] == hashlib.sha256(data).hexdigest()


@pytest.mark.asyncio
@pytest.mark.parametrize("repeat", [1000, 40_000], ids=["read-whole", "streamed"])
async def test_post_body_with_length_forwarded_exactly(
    proxy_url: str, session: aiohttp.ClientSession, repeat: int
) -> None:
    """A fixed-length body keeps its bytes, its Content-Length and its Content-Type, and is
    not re-framed as chunked: read whole when small, streamed past WHOLE_BODY_BYTES."""
    data = b"\x00\xff" + "日本語".encode() + b"\r\n" * repeat
    assert (len(data) <= WHOLE_BODY_BYTES) == (repeat == 1000)
    echo = await _echo(
        session,
        "PUT",
        f"{proxy_url}/echo/put",
        data=data,
        headers={"Content-Type": "application/x-odd; charset=latin-1"},
    )
    assert echo["body_len"] == len(data)
    assert echo["body_sha256"] == hashlib.sha256(data).hexdigest()
    assert echo["headers"]["content-length"] == str(len(data))
    assert "transfer-encoding" not in echo["headers"]
    assert echo["headers"]["content-type"] == "application/x-odd; charset=latin-1"


@pytest.mark.asyncio
async def test_a_small_body_that_comes_after_its_head_is_waited_for_whole(proxy_url: str) -> None:
    """A body with a length that was not there with the head (it came in two later
    writes) is read to its end, not taken as far as it had arrived."""
    port = int(proxy_url.rsplit(":", 1)[1])
    body = json.dumps({"model": "late", "pad": "é" * 3000}).encode()
    reader, writer = await asyncio.open_connection("127.0.0.1", port)
    try:
        writer.write(
            b"POST /echo/late HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n"
            b"Content-Type: application/json\r\nContent-Length: %d\r\n\r\n" % len(body)
        )
        await writer.drain()
        for piece in (body[:1000], body[1000:]):
            await asyncio.sleep(0.05)  # not a timing check: the pieces arrive apart
            writer.write(piece)
            await writer.drain()
        reply = await asyncio.wait_for(reader.read(), 10)
    finally:
        writer.close()
    head, _, payload = reply.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 200"), head
    echo = json.loads(payload)
    assert echo["body_len"] == len(body)
    assert echo["body_sha256"] == hashlib.sha256(body).hexdigest()


@pytest.mark.asyncio
async def test_request_headers_filtered_and_host_set(
    mock_url: str, proxy_url: str, session: aiohttp.ClientSession
) -> None:
    """Hop-by-hop, Connection-named and X-SSE-Proxy-* headers are dropped; the rest pass."""
    headers = [
        ("Connection", "keep-alive, X-Drop-Me, x-also-drop"),
        ("X-Drop-Me", "1"),
        ("X-Also-Drop", "2"),
        ("Keep-Alive", "timeout=5"),
        ("TE", "trailers"),
        ("Trailer", "X-Checksum"),
        ("Proxy-Authorization", "Basic c2VjcmV0"),
        ("Proxy-Connection", "keep-alive"),
        ("X-SSE-Proxy-Debug", "1"),
        ("x-sse-proxy-stream-id", "spoofed"),
        ("Authorization", "Bearer sk-test-123"),
        ("X-Api-Key", "key-456"),
        ("User-Agent", "my-agent/1.0"),
        ("Accept-Encoding", "br;q=1, identity"),
        ("Accept", "text/event-stream"),
        ("X-Dup", "one"),
        ("X-Dup", "two"),
        ("Cookie", "a=1; b=2"),
    ]
    echo = await _echo(
        session,
        "GET",
        f"{proxy_url}/echo/h",
        headers=CIMultiDict(headers),
        skip_auto_headers=("User-Agent", "Accept-Encoding"),
    )
    got = echo["headers"]
    for gone in (
        "x-drop-me",
        "x-also-drop",
        "keep-alive",
        "te",
        "trailer",
        "proxy-authorization",
        "proxy-connection",
        "x-sse-proxy-debug",
        "x-sse-proxy-stream-id",
    ):
        assert gone not in got, gone
    assert got.get("connection", "keep-alive").lower() in ("keep-alive", "close")
    assert got["host"] == URL(mock_url).raw_authority
    assert got["authorization"] == "Bearer sk-test-123"
    assert got["x-api-key"] == "key-456"
    assert got["user-agent"] == "my-agent/1.0"
    assert got["accept-encoding"] == "br;q=1, identity"
    assert got["accept"] == "text/event-stream"
    assert got["cookie"] == "a=1; b=2"
    assert [v for k, v in echo["header_list"] if k.lower() == "x-dup"] == ["one", "two"]


@pytest.mark.asyncio
async def test_client_auto_headers_not_added(
    proxy_url: str, session: aiohttp.ClientSession
) -> None:
    """The proxy adds no User-Agent, Accept-Encoding or Content-Type of its own."""
    reply_headers = await _echo(
        session,
        "POST",
        f"{proxy_url}/echo/bare",
        data=b"x",
        skip_auto_headers=("User-Agent", "Accept-Encoding", "Content-Type", "Accept"),
    )
    got = reply_headers["headers"]
    assert "user-agent" not in got
    assert "accept-encoding" not in got
    assert "content-type" not in got


@pytest.mark.asyncio
async def test_response_headers_filtered(
    start_app: StartApp, start: StartProxy, session: aiohttp.ClientSession
) -> None:
    """Hop-by-hop response headers are dropped; end-to-end ones (every Set-Cookie) kept."""

    async def handler(request: web.Request) -> web.Response:
        resp = web.Response(body=b"hello", status=201, reason="Made It")
        resp.headers.add("Connection", "keep-alive, X-Hop")
        resp.headers.add("X-Hop", "drop")
        resp.headers.add("Keep-Alive", "timeout=5")
        resp.headers.add("Proxy-Authenticate", "Basic")
        resp.headers.add("Trailer", "X-Checksum")
        resp.headers.add("X-End-To-End", "keep")
        resp.headers.add("Set-Cookie", "a=1; Path=/")
        resp.headers.add("Set-Cookie", "b=2; Path=/")
        resp.headers.add("ETag", '"v1"')
        return resp

    app = web.Application()
    app.router.add_get("/h", handler)
    url = await start(await start_app(app))
    async with session.get(f"{url}/h") as resp:
        assert await resp.read() == b"hello"
        assert resp.status == 201
        assert resp.reason == "Made It"
        headers = resp.headers
    for gone in ("X-Hop", "Keep-Alive", "Proxy-Authenticate", "Trailer"):
        assert gone not in headers, gone
    assert "x-hop" not in headers.get("Connection", "").lower()
    assert headers["X-End-To-End"] == "keep"
    assert headers["ETag"] == '"v1"'
    assert headers.getall("Set-Cookie") == ["a=1; Path=/", "b=2; Path=/"]
    assert headers["Content-Length"] == "5"


@pytest.mark.asyncio
async def test_upstream_status_and_error_body_pass_through(
    proxy_url: str, session: aiohttp.ClientSession
) -> None:
    """An upstream 400 with a JSON body comes back as is, not as a proxy error."""
    async with session.get(f"{proxy_url}/bytes/not-a-number") as resp:
        body = json.loads(await resp.read())
        assert resp.status == 400
    assert body["error"]["type"] == "invalid_request_error"
    async with session.get(f"{proxy_url}/no/such/route") as resp:
        assert resp.status == 404
        assert b"404" in await resp.read()


@pytest.mark.asyncio
async def test_redirects_are_not_followed(
    start_app: StartApp, start: StartProxy, session: aiohttp.ClientSession
) -> None:
    """An upstream redirect is handed to the client, not followed by the proxy."""

    async def handler(request: web.Request) -> web.Response:
        raise web.HTTPFound("/elsewhere")

    app = web.Application()
    app.router.add_get("/r", handler)
    url = await start(await start_app(app))
    async with session.get(f"{url}/r", allow_redirects=False) as resp:
        assert resp.status == 302
        assert resp.headers["Location"] == "/elsewhere"


@pytest.mark.asyncio
async def test_head_request(
    start_app: StartApp, start: StartProxy, session: aiohttp.ClientSession
) -> None:
    """HEAD is forwarded and answered with upstream's headers and no body."""
    methods: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        methods.append(request.method)
        return web.Response(body=b"x" * 1000, content_type="application/octet-stream")

    app = web.Application()
    app.router.add_get("/h", handler)
    url = await start(await start_app(app))
    async with session.head(f"{url}/h") as resp:
        assert resp.status == 200
        assert resp.headers["Content-Length"] == "1000"
        assert await resp.read() == b""
    async with session.get(f"{url}/h") as resp:  # the connection is still in sync
        assert await resp.read() == b"x" * 1000
    assert methods == ["HEAD", "GET"]


@pytest.mark.asyncio
async def test_chaos_header_refused_unless_allowed(
    proxy_url: str, session: aiohttp.ClientSession, logs: LogEntries
) -> None:
    """X-SSE-Proxy-Chaos gets 403 with a JSON error when the server does not allow it."""
    async with session.post(
        f"{proxy_url}/v1/chat/completions",
        json={"stream": True},
        headers={"X-SSE-Proxy-Chaos": "strategy=bytewise; seed=1"},
    ) as resp:
        body = json.loads(await resp.read())
        assert resp.status == 403
        assert body["error"]["type"] == "chaos_spec"
        assert body["error"]["stream_id"] == resp.headers[STREAM_ID]
        assert "allow" in body["error"]["message"]
    assert not [e for e in logs if e["event"] == "stream.summary"]


@pytest.mark.asyncio
async def test_chaos_header_honoured_when_allowed(
    mock_url: str, start: StartProxy, session: aiohttp.ClientSession
) -> None:
    """With allow_chaos_header a valid spec is applied (seed echoed), bytes still identical."""
    url = await start(mock_url, allow_chaos_header=True)
    async with session.post(
        f"{url}/v1/chat/completions",
        json={"stream": True},
        headers={"X-SSE-Proxy-Chaos": "strategy=bytewise; seed=42"},
    ) as resp:
        assert await resp.read() == fixtures.clean_stream("openai")
        assert resp.headers["X-SSE-Proxy-Chaos-Seed"] == "42"
    async with session.get(
        f"{url}/echo/c", headers={"X-SSE-Proxy-Chaos": "strategy=bytewise; seed=42"}
    ) as resp:
        echo = json.loads(await resp.read())
    assert "x-sse-proxy-chaos" not in echo["headers"]
    async with session.post(
        f"{url}/v1/chat/completions",
        json={"stream": True},
        headers={"X-SSE-Proxy-Chaos": "strategy=no-such-strategy"},
    ) as resp:
        assert resp.status == 400


@pytest.mark.asyncio
async def test_connect_and_absolute_form_refused_and_not_forwarded(
    start_app: StartApp, start: StartProxy
) -> None:
    """CONNECT gets 405 and an absolute-form target 400; neither reaches upstream."""
    seen: list[str] = []

    async def handler(request: web.Request) -> web.Response:
        seen.append(request.raw_path)
        return web.Response(text="forwarded")

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    url = await start(await start_app(app))
    connect = await raw_exchange(
        url,
        b"CONNECT example.com:443 HTTP/1.1\r\nHost: example.com:443\r\nConnection: close\r\n\r\n",
    )
    assert connect.status == 405
    assert json.loads(connect.body)["error"]["type"] == "method_not_allowed"
    absolute = await raw_exchange(
        url,
        b"GET http://example.com/v1/x HTTP/1.1\r\nHost: example.com\r\nConnection: close\r\n\r\n",
    )
    assert absolute.status == 400
    assert json.loads(absolute.body)["error"]["type"] == "absolute_form_refused"
    assert absolute.header(STREAM_ID)
    assert seen == []


@pytest.mark.asyncio
async def test_chaos_mode_server_takes_the_chaos_header_as_an_override(
    mock_url: str, session: aiohttp.ClientSession
) -> None:
    """A server started in chaos mode lets a request pick its own strategy and seed."""
    from sse_proxy.server.run import start_proxy, stop_proxy
    from sse_proxy.settings import Config

    runner, url = await start_proxy(
        Config(upstream=mock_url, port=0, mode="chaos", chaos="random", seed=1)
    )
    try:
        async with session.post(
            f"{url}/v1/chat/completions",
            json={"stream": True},
            headers={"X-SSE-Proxy-Chaos": "strategy=bytewise; seed=42"},
        ) as resp:
            body = await resp.read()
            assert resp.status == 200
            assert resp.headers["X-SSE-Proxy-Chaos-Seed"] == "42"
        assert body.endswith(b"data: [DONE]\n\n")
        async with session.post(
            f"{url}/v1/chat/completions",
            json={"stream": True},
            headers={"X-SSE-Proxy-Chaos": "strategy=nonsense"},
        ) as resp:
            assert resp.status == 400
    finally:
        await stop_proxy(runner)
