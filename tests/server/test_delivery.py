"""Every cut reaches a local client as a read of its own: the proxy waits for it to read.

The client here is a plain socket that reads slowly (a pause before each ``recv``), the
kind that would get many writes in one read if the proxy wrote them back to back. Its
reads are mapped back to body offsets through the chunked encoding, and each cut the
planner marked must be a read boundary.
"""

from __future__ import annotations

import asyncio
import socket
import threading
import time
from typing import Any

from sse_proxy.server.keys import STREAM_TAPS
from sse_proxy.server.peer import PeerQueue
from sse_proxy.tools import fixtures
from sse_proxy.tools.lockstep import Lockstep
from sse_proxy.tools.stack import proxy_stack
from sse_proxy.tools.testclient.watch import CaseWatch


def test_the_kernel_tells_how_much_a_local_client_has_not_read() -> None:
    with socket.create_server(("127.0.0.1", 0)) as server:
        client = socket.create_connection(server.getsockname())
        ours, _ = server.accept()
        with client, ours:
            queue = PeerQueue.open(ours)
            assert queue is not None
            assert queue.kind in ("netlink", "proc")
            assert queue.unread() == 0
            ours.sendall(b"x" * 1000)
            deadline = time.monotonic() + 5
            while queue.unread() != 1000 and time.monotonic() < deadline:
                time.sleep(0.001)
            assert queue.unread() == 1000
            assert client.recv(300) == b"x" * 300
            assert queue.unread() == 700
            queue.close()


def _slow_reader(port: int, path: str, reads: list[bytes], pause: float) -> None:
    body = b'{"model": "m", "stream": true, "messages": []}'
    with socket.create_connection(("127.0.0.1", port)) as sock:
        sock.sendall(
            f"POST {path} HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\nConnection: close\r\n\r\n".encode()
            + body
        )
        while True:
            time.sleep(pause)
            data = sock.recv(1 << 20)
            if not data:
                return
            reads.append(data)


def _body_read_ends(reads: list[bytes]) -> tuple[bytes, set[int]]:
    """The dechunked body, and the body offsets at which a read ended."""
    raw = b"".join(reads)
    ends_raw: set[int] = set()
    at = 0
    for r in reads:
        at += len(r)
        ends_raw.add(at)
    pos = raw.index(b"\r\n\r\n") + 4
    body = bytearray()
    ends: set[int] = set()
    while True:
        if pos in ends_raw:  # a read ended just before this chunk: at this body offset
            ends.add(len(body))
        line_end = raw.index(b"\r\n", pos)
        size = int(raw[pos:line_end], 16)
        start = line_end + 2
        if size == 0:
            break
        body += raw[start : start + size]
        pos = start + size + 2
    return bytes(body), ends


async def _read_through_proxy(pause: float, **settings: Any) -> tuple[list[bytes], CaseWatch]:
    watch = CaseWatch()
    async with proxy_stack(mock_seed=3, lockstep=Lockstep(), **settings) as stack:
        assert stack._proxy is not None
        stack._proxy.app[STREAM_TAPS].append(watch.tap)
        port = int(stack.url.rsplit(":", 1)[1])
        reads: list[bytes] = []
        thread = threading.Thread(
            target=_slow_reader, args=(port, "/v1/chat/completions", reads, pause)
        )
        thread.start()
        await asyncio.to_thread(thread.join)
    return reads, watch


def test_each_character_cut_is_a_read_boundary_of_a_slow_client() -> None:
    reads, watch = asyncio.run(_read_through_proxy(0.002, mode="chaos", chaos="utf8", seed=3))
    body, ends = _body_read_ends(reads)
    assert body == fixtures.clean_stream("openai")
    got = watch.delivered()
    assert got is not None
    assert got.cuts >= 90
    assert got.read_apart == got.cuts
    at = 0
    for ch in body.decode():
        n = len(ch.encode())
        if n > 1:  # every multi-byte character has a read boundary inside it
            assert ends & set(range(at + 1, at + n)), (ch, at)
        at += n
    assert len(reads) > got.cuts  # reads apart, not one big read


def test_passthrough_and_frames_do_not_wait_or_count() -> None:
    for mode in ("passthrough", "frames"):
        reads, watch = asyncio.run(_read_through_proxy(0.0, mode=mode))
        assert _body_read_ends(reads)[0] == fixtures.clean_stream("openai")
        assert watch.delivered() is None, mode
