"""A burst of connections larger than aiohttp's listen backlog (128) is queued by the
kernel, not dropped: beyond the backlog a client's SYN is dropped and only retried a
second later (then three, then seven), which is how 2,000 streams started together took
29 s to begin. Checked with real sockets while the proxy's loop cannot accept."""

from __future__ import annotations

import asyncio
import errno
import select
import socket
import time
from pathlib import Path

import pytest

from sse_proxy.server.run import LISTEN_BACKLOG
from sse_proxy.tools.mock_upstream import mock_upstream
from tests.support.net import running_proxy

BURST = 300  # well over aiohttp's 128, well under ours (and 600 descriptors at most)
SOMAXCONN = Path("/proc/sys/net/core/somaxconn")


def _completed(socks: list[socket.socket], timeout: float) -> int:
    """How many of these non-blocking connects complete within ``timeout`` (waited on
    with select, not slept); a connect the kernel dropped stays pending for a second."""
    pending = {s.fileno(): s for s in socks}
    done = 0
    deadline = time.monotonic() + timeout
    while pending and (left := deadline - time.monotonic()) > 0:
        _, ready, _ = select.select([], list(pending), [], left)
        for fd in ready:
            sock = pending.pop(fd)
            assert sock.getsockopt(socket.SOL_SOCKET, socket.SO_ERROR) == 0
            done += 1
    return done


@pytest.mark.asyncio
@pytest.mark.skipif(
    not SOMAXCONN.exists() or int(SOMAXCONN.read_text()) < BURST + 10,
    reason="the kernel caps every listen backlog below the burst",
)
async def test_a_burst_of_connections_beyond_128_is_queued_while_the_loop_is_busy() -> None:
    assert LISTEN_BACKLOG > BURST
    async with mock_upstream() as upstream, running_proxy(upstream) as url:
        port = int(url.rsplit(":", 1)[1])
        socks: list[socket.socket] = []
        try:
            # The loop is held by this very code from here to the count: nothing accepts,
            # so every connection must wait in the kernel's queue.
            for _ in range(BURST):
                s = socket.socket()
                s.setblocking(False)
                socks.append(s)
                err = s.connect_ex(("127.0.0.1", port))
                assert err in (0, errno.EINPROGRESS), errno.errorcode.get(err, err)
            # A queued connection completes at once; a dropped SYN is retried after a
            # second and dropped again (the queue never drains while the loop is held).
            done = _completed(socks, timeout=5.0)
            assert done == BURST, f"{done} of {BURST} connections completed (queue full?)"
            # queued connections are served once the loop accepts them
            loop = asyncio.get_running_loop()
            last, host = socks[-1], url.split("//", 1)[1].encode()
            request = (
                b"POST /v1/chat/completions HTTP/1.1\r\nHost: " + host + b"\r\n"
                b"Content-Type: application/json\r\nContent-Length: 16\r\n"
                b'Connection: close\r\n\r\n{"stream": true}'
            )
            got = b""
            async with asyncio.timeout(20):
                await loop.sock_sendall(last, request)
                while chunk := await loop.sock_recv(last, 65536):
                    got += chunk
            assert got.startswith(b"HTTP/1.1 200 "), got[:200]
            assert got.endswith(b"\r\n0\r\n\r\n"), got[-200:]  # the chunked body's end
            assert b"[DONE]" in got, got[-200:]
        finally:
            for s in socks:
                s.close()
