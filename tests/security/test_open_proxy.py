"""Not an open proxy: only the configured upstream is ever contacted, whatever the request says.

Every test runs a "decoy" TCP server next to the real upstream: it is the host an attacker
would like the proxy to reach (through an absolute-form target, CONNECT, the Host header
or a path trick), and it must see no connection at all.
"""

from __future__ import annotations

import pytest

from sse_proxy.tools.mock_upstream import mock_upstream
from tests.support.net import port_of, raw_exchange, running_app, running_proxy
from tests.support.upstreams import Seen, decoy_server, recording_app


def _get(target: str, host: str, extra: str = "") -> bytes:
    return (f"GET {target} HTTP/1.1\r\nHost: {host}\r\n{extra}Connection: close\r\n\r\n").encode()


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "target",
    [
        "http://127.0.0.1:{decoy}/x",
        "http://evil.example/",
        "https://127.0.0.1:{decoy}/x",
        "http://{upstream_host}/echo/x",  # even the upstream's own URL: the form is refused
        "127.0.0.1:{decoy}",  # authority-form with GET
        "*",
    ],
)
async def test_non_origin_form_targets_are_refused(target: str) -> None:
    """Absolute-, authority- and asterisk-form targets get 400 and reach nobody."""
    seen: list[Seen] = []
    async with (
        decoy_server() as decoy,
        running_app(recording_app(seen)) as upstream,
        running_proxy(upstream) as proxy,
    ):
        upstream_host = upstream.removeprefix("http://")
        wire = target.format(decoy=decoy.port, upstream_host=upstream_host)
        reply = await raw_exchange(port_of(proxy), _get(wire, f"127.0.0.1:{decoy.port}"))
        assert reply.status == 400, reply
        assert decoy.connections == 0
        assert seen == []


@pytest.mark.asyncio
@pytest.mark.parametrize("target", ["127.0.0.1:{decoy}", "evil.example:443", "/x"])
async def test_connect_is_refused(target: str) -> None:
    """CONNECT gets 405 (or 400 when unparseable) and opens no tunnel anywhere."""
    seen: list[Seen] = []
    async with (
        decoy_server() as decoy,
        running_app(recording_app(seen)) as upstream,
        running_proxy(upstream) as proxy,
    ):
        wire = target.format(decoy=decoy.port)
        request = f"CONNECT {wire} HTTP/1.1\r\nHost: {wire}\r\n\r\n".encode()
        reply = await raw_exchange(port_of(proxy), request)
        assert reply.status in (400, 405), reply
        assert reply.status == 405 or target == "/x"
        assert decoy.connections == 0
        assert seen == []


@pytest.mark.asyncio
async def test_host_header_never_selects_the_upstream() -> None:
    """A Host (or X-Forwarded-Host) naming the decoy still reaches the configured upstream."""
    async with (
        decoy_server() as decoy,
        mock_upstream() as upstream,
        running_proxy(upstream) as proxy,
    ):
        elsewhere = f"127.0.0.1:{decoy.port}"
        extra = f"X-Forwarded-Host: {elsewhere}\r\nForwarded: host={elsewhere}\r\n"
        reply = await raw_exchange(port_of(proxy), _get("/echo/who", elsewhere, extra))
        assert reply.status == 200, reply
        echo = reply.json()
        assert echo["path"] == "/echo/who"
        # The upstream sees its own name as Host, never the one the client sent.
        assert echo["headers"]["host"] == upstream.removeprefix("http://")
        assert decoy.connections == 0


@pytest.mark.asyncio
@pytest.mark.parametrize(
    "target",
    [
        "//127.0.0.1:{decoy}/x",
        "//evil.example/x",
        "///127.0.0.1:{decoy}/x",
        "/..%2f..%2f127.0.0.1:{decoy}",
        "/../../x",
        "/%2F%2F127.0.0.1:{decoy}/x",
        "/@127.0.0.1:{decoy}/x",
        "/x@127.0.0.1:{decoy}",
        "/:@127.0.0.1:{decoy}/",
        "/x?next=http://127.0.0.1:{decoy}/&u=//127.0.0.1:{decoy}",
        "/x#@127.0.0.1:{decoy}",
        "/%40127.0.0.1:{decoy}",
        "/.127.0.0.1:{decoy}",
        "/\\\\127.0.0.1:{decoy}/x",
        "/x\\@127.0.0.1:{decoy}",
    ],
)
async def test_path_tricks_never_change_the_upstream_host(target: str) -> None:
    """Paths that look like authorities reach the configured upstream (verbatim) or nobody."""
    seen: list[Seen] = []
    async with (
        decoy_server() as decoy,
        running_app(recording_app(seen)) as upstream,
        running_proxy(upstream) as proxy,
    ):
        wire = target.format(decoy=decoy.port)
        reply = await raw_exchange(port_of(proxy), _get(wire, f"127.0.0.1:{decoy.port}"))
        assert decoy.connections == 0, decoy.received
        assert reply.header("X-SSE-Proxy-Stream-Id") or reply.status == 400
        if reply.status == 400:
            assert seen == []
            return
        assert reply.status == 200, reply
        assert len(seen) == 1
        assert seen[0].host == upstream.removeprefix("http://")
        # The target is forwarded as the client wrote it (only a fragment is not sent).
        assert seen[0].raw_path == wire.split("#", 1)[0]


@pytest.mark.asyncio
async def test_upstream_with_a_base_path_keeps_its_host() -> None:
    """With ``--upstream http://host/base``, authority-looking paths stay under that host."""
    seen: list[Seen] = []
    async with (
        decoy_server() as decoy,
        running_app(recording_app(seen)) as upstream,
        running_proxy(upstream + "/base") as proxy,
    ):
        for wire in (f"//127.0.0.1:{decoy.port}/x", f"/@127.0.0.1:{decoy.port}"):
            reply = await raw_exchange(port_of(proxy), _get(wire, "127.0.0.1"))
            assert reply.status == 200, reply
        assert [s.raw_path for s in seen] == [
            f"/base//127.0.0.1:{decoy.port}/x",
            f"/base/@127.0.0.1:{decoy.port}",
        ]
        assert {s.host for s in seen} == {upstream.removeprefix("http://")}
        assert decoy.connections == 0


@pytest.mark.asyncio
async def test_an_asterisk_target_is_refused_not_routed() -> None:
    """``OPTIONS *`` names no path (no route can match it): refused as a target that is not
    a path, in the proxy's JSON shape, and nothing is forwarded."""
    seen: list[Seen] = []
    async with running_app(recording_app(seen)) as upstream, running_proxy(upstream) as proxy:
        port = port_of(proxy)
        reply = await raw_exchange(
            port, f"OPTIONS * HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode()
        )
    assert reply.status == 400, reply
    assert reply.json()["error"]["type"] == "absolute_form_refused"
    assert seen == []
