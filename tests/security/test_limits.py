"""Header hygiene both ways, request header and body limits, and the chaos override gate."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from aiohttp import web

from sse_proxy.tools.mock_upstream import mock_upstream
from tests.support.net import port_of, raw_exchange, running_app, running_proxy
from tests.support.upstreams import Seen, recording_app

HOP_BY_HOP = ("connection", "keep-alive", "te", "trailer", "transfer-encoding", "upgrade")


async def _health(session: aiohttp.ClientSession, proxy: str) -> int:
    async with session.get(proxy + "/_sse-proxy/health") as resp:
        return resp.status


# ----------------------------------------------------------------- header hygiene


@pytest.mark.asyncio
async def test_request_hop_by_hop_and_own_headers_are_not_forwarded() -> None:
    """Hop-by-hop, Connection-named, Proxy-* and X-SSE-Proxy-* headers stop at the proxy."""
    async with mock_upstream() as upstream, running_proxy(upstream) as proxy:
        request = (
            b"POST /echo/h HTTP/1.1\r\n"
            b"Host: localhost\r\n"
            b"Connection: keep-alive, X-Drop-Me\r\n"
            b"Keep-Alive: timeout=5\r\n"
            b"TE: trailers\r\n"
            b"Trailer: X-Checksum\r\n"
            b"Proxy-Authorization: Basic cHJveHk6c2VjcmV0\r\n"
            b"Proxy-Connection: keep-alive\r\n"
            b"X-Drop-Me: 1\r\n"
            b"X-SSE-Proxy-Stream-Id: forged\r\n"
            b"X-SSE-Proxy-Anything: 1\r\n"
            b"Authorization: Bearer sk-kept\r\n"
            b"X-Kept: yes\r\n"
            b"Transfer-Encoding: chunked\r\n"
            b"\r\n"
            b"5\r\nhello\r\n0\r\n\r\n"
        )
        reply = await raw_exchange(port_of(proxy), request)
        assert reply.status == 200, reply
        echo = reply.json()
        got = set(echo["headers"])
        for name in (*HOP_BY_HOP, "proxy-authorization", "proxy-connection", "x-drop-me"):
            if name == "transfer-encoding":  # the proxy's own framing of the streamed body
                assert echo["headers"].get(name, "chunked") == "chunked"
                continue
            assert name not in got, (name, echo["headers"])
        assert not [h for h in got if h.startswith("x-sse-proxy-")]
        assert echo["headers"]["authorization"] == "Bearer sk-kept"
        assert echo["headers"]["x-kept"] == "yes"
        assert echo["headers"]["host"] == upstream.removeprefix("http://")
        assert echo["body_len"] == 5


def _hostile_headers_app(sse: bool) -> web.Application:
    """An upstream whose responses carry hop-by-hop and forged X-SSE-Proxy-* headers."""

    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        resp = web.StreamResponse(
            headers={
                "Content-Type": "text/event-stream" if sse else "application/json",
                "Connection": "keep-alive, X-Drop-Me",
                "Keep-Alive": "timeout=5, max=100",
                "Proxy-Authenticate": 'Basic realm="upstream"',
                "Proxy-Connection": "keep-alive",
                "Trailer": "X-Checksum",
                "Upgrade": "h2c",
                "X-Drop-Me": "1",
                "X-SSE-Proxy-Stream-Id": "forged",
                "X-SSE-Proxy-Chaos-Seed": "666",
                "X-Kept": "yes",
            }
        )
        resp.enable_chunked_encoding()
        await resp.prepare(request)
        await resp.write(b"data: hi\n\n" if sse else b'{"ok": true}')
        await resp.write_eof()
        return resp

    app = web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    return app


@pytest.mark.asyncio
@pytest.mark.parametrize("sse", [True, False], ids=["sse", "plain"])
async def test_response_hop_by_hop_and_forged_headers_are_not_passed_back(sse: bool) -> None:
    """The client never sees upstream hop-by-hop headers, nor X-SSE-Proxy-* it did not make."""
    async with (
        running_app(_hostile_headers_app(sse)) as upstream,
        running_proxy(upstream) as proxy,
    ):
        request = b"GET /v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n"
        reply = await raw_exchange(port_of(proxy), request)
        assert reply.status == 200, reply
        names = {k.lower() for k, _ in reply.headers}
        for name in ("keep-alive", "proxy-authenticate", "proxy-connection", "trailer"):
            assert name not in names, reply.headers
        assert "upgrade" not in names
        assert "x-drop-me" not in names
        # Connection is only what the proxy itself says about its own hop.
        assert reply.header_all("Connection") in ([], ["close"])
        # The stream id is the proxy's own, once; the forged seed is gone.
        ids = reply.header_all("X-SSE-Proxy-Stream-Id")
        assert len(ids) == 1
        assert ids[0] != "forged"
        assert reply.header("X-SSE-Proxy-Chaos-Seed") is None
        assert reply.header("X-Kept") == "yes"
        assert reply.body == (b"data: hi\n\n" if sse else b'{"ok": true}')


# ----------------------------------------------------------------- header limits


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "shape", ["one_huge_field", "huge_request_line", "many_fields", "huge_field_name"]
)
async def test_oversized_request_headers_are_refused_without_contacting_upstream(
    shape: str,
) -> None:
    """Headers over ``max_request_header_bytes`` get 400/431; the proxy keeps serving."""
    limit = 16 << 10
    seen: list[Seen] = []
    async with (
        running_app(recording_app(seen)) as upstream,
        running_proxy(upstream, max_request_header_bytes=limit) as proxy,
        aiohttp.ClientSession() as session,
    ):
        target, fields = "/v1/x", "X-Ok: 1\r\n"
        if shape == "one_huge_field":
            fields = "X-Big: " + "a" * (limit + 10) + "\r\n"
        elif shape == "huge_request_line":
            target = "/v1/x?q=" + "a" * (limit + 10)
        elif shape == "many_fields":  # each line is fine, together they are not
            fields = "".join(f"X-F{i}: {'b' * 2000}\r\n" for i in range(12))
        else:
            fields = "X-" + "N" * (limit + 10) + ": 1\r\n"
        request = f"GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\n{fields}Connection: close\r\n\r\n"
        reply = await raw_exchange(port_of(proxy), request.encode())
        assert reply.status in (400, 431), reply
        assert seen == []
        assert await _health(session, proxy) == 200
        # Just under the limit still goes through.
        field = "X-F: " + "c" * (limit // 2)
        ok = f"GET /v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\n{field}\r\nConnection: close\r\n\r\n"
        assert (await raw_exchange(port_of(proxy), ok.encode())).status == 200
        assert len(seen) == 1


# ------------------------------------------------------------------- body limits


@pytest.mark.asyncio
async def test_content_length_over_limit_is_413_before_any_upstream_contact() -> None:
    """A declared length over the limit is refused at once, without reading the body."""
    seen: list[Seen] = []
    async with (
        running_app(recording_app(seen)) as upstream,
        running_proxy(upstream, max_request_body_bytes=1000) as proxy,
    ):
        # The body is never sent: a 413 that arrives anyway proves nothing waited for it.
        request = b"POST /v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 10000000\r\n\r\n"
        reply = await raw_exchange(port_of(proxy), request, limit_s=3.0)
        assert reply.status == 413, reply
        assert reply.json()["error"]["type"] == "request_too_large"
        assert seen == []
        # At the limit exactly is fine.
        body = b"z" * 1000
        request = (
            b"POST /v1/x HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 1000\r\n"
            b"Connection: close\r\n\r\n"
        )
        reply = await raw_exchange(port_of(proxy), request + body)
        assert reply.status == 200, reply
        assert [len(s.body) for s in seen] == [1000]


@pytest.mark.asyncio
async def test_chunked_body_over_limit_is_413_and_the_upload_upstream_is_aborted() -> None:
    """A chunked body that outgrows the limit ends in 413; upstream sees a cut-off upload."""
    seen: list[Seen] = []
    async with (
        running_app(recording_app(seen)) as upstream,
        running_proxy(upstream, max_request_body_bytes=1000) as proxy,
        aiohttp.ClientSession() as session,
    ):

        async def body() -> AsyncIterator[bytes]:
            for _ in range(10):
                yield b"x" * 500
                await asyncio.sleep(0.01)

        async with session.post(proxy + "/v1/upload", data=body()) as resp:
            assert resp.status == 413
            assert (await resp.json())["error"]["type"] == "request_too_large"
        for _ in range(150):  # the upstream notices the cut-off upload a moment later
            if seen:
                break
            await asyncio.sleep(0.02)
        assert len(seen) == 1
        assert not seen[0].body_complete
        assert len(seen[0].body) <= 1000
        assert await _health(session, proxy) == 200


# ----------------------------------------------------------------------- chaos


@pytest.mark.asyncio
async def test_chaos_header_is_refused_unless_allowed() -> None:
    """X-SSE-Proxy-Chaos gets 403 by default and never reaches upstream either way."""
    seen: list[Seen] = []
    header = {"X-SSE-Proxy-Chaos": "strategy=bytewise; seed=7"}
    async with (
        running_app(recording_app(seen)) as upstream,
        running_proxy(upstream) as strict,
        running_proxy(upstream, allow_chaos_header=True) as lenient,
        aiohttp.ClientSession() as session,
    ):
        async with session.post(strict + "/v1/x", json={}, headers=header) as resp:
            assert resp.status == 403
            assert (await resp.json())["error"]["type"] == "chaos_spec"
        assert seen == []
        async with session.post(lenient + "/v1/x", json={}, headers=header) as resp:
            assert resp.status == 200
        assert len(seen) == 1
        assert not [k for k, _ in seen[0].headers if k.lower().startswith("x-sse-proxy-")]


@pytest.mark.asyncio
async def test_allowed_chaos_header_applies_its_seed_to_an_sse_stream() -> None:
    """With --allow-chaos-header the per-request spec is used (its seed comes back)."""
    async with (
        mock_upstream() as upstream,
        running_proxy(upstream, allow_chaos_header=True) as proxy,
        aiohttp.ClientSession() as session,
    ):
        headers = {"X-SSE-Proxy-Chaos": "strategy=random; seed=42"}
        url = proxy + "/v1/chat/completions"
        async with session.post(url, json={"stream": True}, headers=headers) as resp:
            assert resp.status == 200
            assert resp.headers["X-SSE-Proxy-Chaos-Seed"] == "42"
            assert b"[DONE]" in await resp.read()
