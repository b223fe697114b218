"""A real loopback upstream that breaks its stream on purpose, for the `faults` group.

It speaks HTTP/1.1 on a plain asyncio socket server (aiohttp would not let us send a TCP
reset mid-body): it reads one request, answers ``200 text/event-stream`` with a chunked
body, writes the broken stream a frame at a time, then either ends the response properly
(a clean end of a broken stream) or resets the connection (``SO_LINGER`` 0, then close).
"""

from __future__ import annotations

import asyncio
import contextlib
import socket
import struct
from typing import Any

from sse_proxy.tools.testclient.fixture import FaultStream

__all__ = ["FaultServer", "start_fault_server"]

_MAX_HEAD = 64 * 1024


class FaultServer:
    """What :func:`start_fault_server` returns; stop it with :meth:`cleanup`.

    Shaped like an aiohttp ``AppRunner`` as far as :mod:`sse_proxy.tools.stack` needs it.
    """

    def __init__(self, server: asyncio.Server) -> None:
        self._server = server
        self._tasks: set[asyncio.Task[Any]] = set()

    async def cleanup(self) -> None:
        self._server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)
        await self._server.wait_closed()


async def _read_request(reader: asyncio.StreamReader) -> None:
    head = await reader.readuntil(b"\r\n\r\n")
    if len(head) > _MAX_HEAD:
        raise ValueError("request head too large")
    length = 0
    for line in head.split(b"\r\n")[1:]:
        name, _, value = line.partition(b":")
        if name.strip().lower() == b"content-length":
            length = int(value.strip() or b"0")
    if length:
        await reader.readexactly(length)


async def _serve(
    stream: FaultStream, headers: dict[str, str], reader: asyncio.StreamReader, writer: Any
) -> None:
    try:
        await _read_request(reader)
        head = "HTTP/1.1 200 OK\r\n" + "".join(f"{k}: {v}\r\n" for k, v in headers.items())
        head += "Transfer-Encoding: chunked\r\nConnection: close\r\n\r\n"
        writer.write(head.encode("latin-1"))
        for piece in _pieces(stream.body):
            writer.write(b"%x\r\n%s\r\n" % (len(piece), piece))
            await writer.drain()
        if stream.reset:
            sock = writer.get_extra_info("socket")
            if sock is not None:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()
            return
        writer.write(b"0\r\n\r\n")
        await writer.drain()
    except (OSError, ValueError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        pass
    finally:
        writer.close()
        with contextlib.suppress(OSError, asyncio.CancelledError):
            await writer.wait_closed()


def _pieces(body: bytes) -> list[bytes]:
    """The body a few hundred bytes at a time, the way a live upstream writes it."""
    return [body[i : i + 512] for i in range(0, len(body), 512)] or []


async def start_fault_server(
    stream: FaultStream, headers: dict[str, str]
) -> tuple[FaultServer, str]:
    """Serve ``stream`` to every request on an ephemeral loopback port; (server, URL)."""
    holder: list[FaultServer] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None and holder:
            holder[0]._tasks.add(task)
            task.add_done_callback(holder[0]._tasks.discard)
        await _serve(stream, headers, reader, writer)

    server = await asyncio.start_server(handle, "127.0.0.1", 0)
    fault_server = FaultServer(server)
    holder.append(fault_server)
    port = server.sockets[0].getsockname()[1]
    return fault_server, f"http://127.0.0.1:{port}"
