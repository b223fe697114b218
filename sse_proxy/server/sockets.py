"""Listening sockets bound before a server runs: ``serve --workers`` binds its workers'.

One process listens on a port as any server does; another instance started on that port
is refused (``address already in use``). Workers share their port through SO_REUSEPORT,
which lets every process of the same user join: alone, a second ``serve --workers`` would
start beside the first and split its traffic. So the parent first binds the port without
SO_REUSEPORT, as one process would (refused while anyone listens there), releases it and
at once binds the first worker's sockets, and each replacement's: the port is held by this
instance from its first microseconds, and a worker is handed sockets already listening.
"""

from __future__ import annotations

import socket
from dataclasses import dataclass

from sse_proxy.errors import UsageError

__all__ = ["LISTEN_BACKLOG", "WorkerSockets", "bind_listening", "refuse_if_taken"]

LISTEN_BACKLOG = 2048
"""Connections the kernel completes and queues before the proxy accepts them (capped by
``net.core.somaxconn``). aiohttp's 128 is fewer than a burst of stream starts: beyond it
a client's SYN is dropped and retried a second later, then three, then seven, so a large
burst takes tens of seconds to begin. 2,048 is uvicorn's and gunicorn's; a queued
connection costs the kernel a socket, nothing here."""


@dataclass(frozen=True, slots=True)
class WorkerSockets:
    """One worker's listening sockets: the traffic port's, and the admin port's (if any)."""

    traffic: tuple[socket.socket, ...]
    admin: tuple[socket.socket, ...] = ()

    def close(self) -> None:
        for sock in (*self.traffic, *self.admin):
            sock.close()


def bind_listening(
    host: str, port: int, *, reuse_port: bool, listen: bool = True, what: str = ""
) -> tuple[socket.socket, ...]:
    """A socket for each address ``host`` names (every interface for ``""``), bound to
    ``port`` as asyncio's ``create_server`` binds them, listening unless ``listen`` is
    false; a :class:`UsageError` (``what`` first) when one cannot be bound."""
    try:
        infos = socket.getaddrinfo(
            host or None, port, type=socket.SOCK_STREAM, flags=socket.AI_PASSIVE
        )
    except (OSError, UnicodeError) as exc:
        raise UsageError(f"{what}cannot listen on {host}:{port}: {_reason(exc)}") from None
    bound: list[socket.socket] = []
    try:
        for family, kind, proto, _, address in dict.fromkeys(infos):
            sock = socket.socket(family, kind, proto)
            bound.append(sock)
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
            if reuse_port:
                sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
            if family == socket.AF_INET6:
                sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
            sock.bind(address)
            if listen:
                sock.listen(LISTEN_BACKLOG)
    except OSError as exc:
        for sock in bound:
            sock.close()
        raise UsageError(f"{what}cannot listen on {host}:{port}: {_reason(exc)}") from None
    return tuple(bound)


def refuse_if_taken(host: str, port: int, what: str = "") -> None:
    """A :class:`UsageError` when a process listens on ``host:port`` (one process, or
    another instance's workers): bound without SO_REUSEPORT, then released."""
    for sock in bind_listening(host, port, reuse_port=False, listen=False, what=what):
        sock.close()


def _reason(exc: BaseException) -> str:
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return text[:1].lower() + text[1:]
