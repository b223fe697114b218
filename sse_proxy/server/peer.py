"""How many bytes a client on this machine has not read yet: asked of the kernel.

On loopback a sender's unacknowledged bytes (``SIOCOUTQ``) drop to zero as soon as the
bytes sit in the receiver's socket buffer, not when the program reads them. What tells
that the client has *read* a write is its own socket's receive queue. Linux reports it for
any local TCP socket: by NETLINK_SOCK_DIAG (``inet_diag``: one exact lookup by 4-tuple,
no table scan), or, more slowly, in ``/proc/net/tcp`` (the ``rx_queue``
column). The client's socket is the one whose local address is the client's and whose
remote address is ours; a client elsewhere has none here, and :meth:`PeerQueue.open`
returns None.
"""

from __future__ import annotations

import contextlib
import ipaddress
import socket
import struct
import sys
from typing import Final

if sys.platform != "win32":
    import fcntl
    import termios

__all__ = ["PeerQueue", "unsent"]

_NETLINK_SOCK_DIAG: Final = 4
_SOCK_DIAG_BY_FAMILY: Final = 20
_NLM_F_REQUEST: Final = 1
_NLMSG_ERROR: Final = 2
_HEADER = struct.Struct("=IHHII")
_RQUEUE_AT: Final = _HEADER.size + 4 + 48 + 4  # inet_diag_msg: 4 bytes, the id, expires
_ALL_STATES: Final = 0xFFFFFFFF
_NO_COOKIE: Final = 0xFFFFFFFF


def unsent(sock: socket.socket) -> int | None:
    """Bytes of ours the kernel still holds for this socket (not sent, or not acked);
    None where it cannot tell."""
    if sys.platform == "win32":
        return None
    try:
        out = fcntl.ioctl(sock.fileno(), termios.TIOCOUTQ, b"\0\0\0\0")
    except (OSError, ValueError):
        return None
    return int(struct.unpack("i", out)[0])


def _endpoints(sock: socket.socket) -> tuple[int, str, int, str, int] | None:
    """(family, client ip, client port, our ip, our port) as the client's socket has them."""
    try:
        ours = sock.getsockname()
        peer = sock.getpeername()
    except OSError:
        return None
    if sock.family not in (socket.AF_INET, socket.AF_INET6):
        return None
    ip_ours, ip_peer = ipaddress.ip_address(ours[0]), ipaddress.ip_address(peer[0])
    family = sock.family
    if isinstance(ip_peer, ipaddress.IPv6Address) and ip_peer.ipv4_mapped is not None:
        # a dual-stack listener: the client's own socket is IPv4
        ip_peer = ip_peer.ipv4_mapped
        mapped = ip_ours.ipv4_mapped if isinstance(ip_ours, ipaddress.IPv6Address) else ip_ours
        if mapped is None:
            return None
        ip_ours = mapped
        family = socket.AF_INET
    return family, str(ip_peer), int(peer[1]), str(ip_ours), int(ours[1])


class _Netlink:
    """One exact ``inet_diag`` lookup per call, on a socket of its own."""

    __slots__ = ("request", "sock")

    def __init__(self, ends: tuple[int, str, int, str, int]) -> None:
        family, client_ip, client_port, our_ip, our_port = ends
        body = struct.pack("=BBBBI", family, socket.IPPROTO_TCP, 0, 0, _ALL_STATES)
        body += struct.pack("!HH", client_port, our_port)
        body += socket.inet_pton(family, client_ip).ljust(16, b"\0")
        body += socket.inet_pton(family, our_ip).ljust(16, b"\0")
        body += struct.pack("=III", 0, _NO_COOKIE, _NO_COOKIE)
        self.request = _HEADER.pack(_HEADER.size + len(body), _SOCK_DIAG_BY_FAMILY, 1, 1, 0)
        self.request += body
        self.sock = socket.socket(socket.AF_NETLINK, socket.SOCK_DGRAM, _NETLINK_SOCK_DIAG)
        self.sock.setblocking(False)

    def unread(self) -> int | None:
        """The client's unread bytes; None: no such socket (any more), or no answer."""
        try:
            self.sock.send(self.request)
            reply = self.sock.recv(4096)
        except OSError:
            return None
        if len(reply) < _HEADER.size:
            return None
        kind = _HEADER.unpack_from(reply)[1]
        if kind == _NLMSG_ERROR or len(reply) < _RQUEUE_AT + 4:
            return None
        return int(struct.unpack_from("=I", reply, _RQUEUE_AT)[0])

    def close(self) -> None:
        self.sock.close()


class _ProcNet:
    """The same number read from ``/proc/net/tcp`` or ``tcp6``: a scan of the table."""

    __slots__ = ("key", "path")

    def __init__(self, ends: tuple[int, str, int, str, int]) -> None:
        family, client_ip, client_port, our_ip, our_port = ends
        self.path = "/proc/net/tcp" if family == socket.AF_INET else "/proc/net/tcp6"

        def hexed(ip: str, port: int) -> str:
            raw = socket.inet_pton(family, ip)
            words = struct.unpack(f"={len(raw) // 4}I", raw)
            return "".join(f"{w:08X}" for w in words) + f":{port:04X}"

        self.key = (hexed(client_ip, client_port), hexed(our_ip, our_port))

    def unread(self) -> int | None:
        try:
            with open(self.path, encoding="ascii") as table:
                next(table, None)
                for line in table:
                    cols = line.split()
                    if len(cols) > 4 and (cols[1], cols[2]) == self.key:
                        return int(cols[4].partition(":")[2], 16)
        except (OSError, ValueError):
            return None
        return None

    def close(self) -> None:
        pass


class PeerQueue:
    """The receive queue of a local client's socket: ``unread()`` bytes, or None."""

    __slots__ = ("_source", "kind")

    def __init__(self, source: _Netlink | _ProcNet, kind: str) -> None:
        self._source = source
        self.kind = kind
        """``netlink`` or ``proc``: how the kernel is asked."""

    @classmethod
    def open(cls, sock: socket.socket) -> PeerQueue | None:
        """For the connection ``sock`` (ours): the client's socket, if it is on this
        machine and the kernel says so; else None."""
        if not sys.platform.startswith("linux"):
            return None
        ends = _endpoints(sock)
        if ends is None:
            return None
        with contextlib.suppress(OSError):
            netlink = _Netlink(ends)
            if netlink.unread() is not None:
                return cls(netlink, "netlink")
            netlink.close()
        proc = _ProcNet(ends)
        if proc.unread() is not None:
            return cls(proc, "proc")
        return None

    def unread(self) -> int | None:
        return self._source.unread()

    def close(self) -> None:
        self._source.close()
