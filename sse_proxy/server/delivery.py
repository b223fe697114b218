"""Cuts the client reads apart: before a write that starts at a cut, the client has read
everything written before it.

The planner marks the writes that carry a cut (``Write.cut``, :mod:`sse_proxy.rechunk`).
Writing them back to back is not enough: a client that reads its socket as a byte stream
(Node's ``fetch``, undici) gets whatever one read holds, and on loopback that is most of
the stream. So before each such write the relay waits here until the client has taken
every byte so far: our transport's buffer and the kernel's send queue empty, and the
client's receive queue empty (:class:`~sse_proxy.server.peer.PeerQueue`), polled for at
most :data:`CUT_CAP` seconds from the client's last progress (the first cut of a stream
longer: :data:`FIRST_CAP`). A cut whose wait ran out is counted as not read apart; after
:data:`MISS_BUDGET` seconds of such waits a stream stops waiting (a client that does not
read must not cost a minute). A client that is not on this machine cannot be asked: the
cut-bearing writes are paced instead (:data:`PACE` seconds before each), and the count of
cuts read apart is unknown.

A client whose own code can say what it has taken (a browser page, whose body stream
still merges what its network process read: ``test-client --browser``) is asked too: a tool
sets :attr:`Delivery.reported`, and a cut then also waits until that code has taken every
body byte written before it.

Only the writes marked ``cut`` wait, so passthrough and frames never come here, and
``bytewise`` waits at its thousand cuts that matter, not at each of its thirty thousand
writes.

A fault in time (``Write.pause``: a stall, a drip's wait, a linger before the body ends) is
performed here too, by :func:`hold`, which the mock upstream shares. Its seconds are the
test, so they are not counted in ``waited`` (a harness does not credit them to the client).
A drop (``Pause.action`` ``drop``) is each shell's own cut, given to :func:`hold`: the proxy
cuts its client off, the mock resets its connection; then :class:`Dropped` ends the stream.
"""

from __future__ import annotations

import asyncio
import functools
import socket
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Final, TypeAlias

from sse_proxy.core.dialects.registry import DIALECTS
from sse_proxy.rechunk.planner import Write
from sse_proxy.rechunk.timefaults import DROP, Pause, StreamKind
from sse_proxy.server.peer import PeerQueue, unsent

__all__ = [
    "CUT_CAP",
    "CUT_MAX",
    "FIRST_CAP",
    "MISS_BUDGET",
    "PACE",
    "Delivery",
    "Dropped",
    "Reported",
    "hold",
    "stream_kind",
]

CUT_CAP: Final = 0.25
"""Seconds one cut waits for the client to read what went before it, from its last
progress (a client that is reading, but behind, gets more, up to :data:`CUT_MAX`). A
client that reads returns at once; the cap is for one the scheduler left waiting on a
loaded machine (at 0.15 s, Node now and then missed it beside a browser's run), and a
client that never reads costs :data:`MISS_BUDGET` a stream whatever it is."""
CUT_MAX: Final = 0.5
FIRST_CAP: Final = 2.0
"""The first cut's wait: a client that just got its response may still be starting up
(imports, its SDK's objects) before it reads the body at all."""
MISS_BUDGET: Final = 2.0
"""Seconds of waits that ran out after which a stream stops waiting."""
PACE: Final = 0.005
"""Seconds before each cut-bearing write to a client the kernel cannot be asked about."""
_STEPS: Final = (0.0, 0.0, 0.0005, 0.001)  # then 0.001 s a poll: the event loop's tick

Reported: TypeAlias = Callable[[], int | None]
"""Body bytes the client's own code says it has taken so far; None: it says nothing."""


class Dropped(Exception):
    """A drop cut the stream's connection: nothing more is written to it."""


Cut: TypeAlias = Callable[[], Awaitable[None]]
"""How a shell cuts its connection for a drop."""


@functools.cache
def stream_kind(dialect: str) -> StreamKind | None:
    """What a fault in time needs of a dialect (None until the stream's is known)."""
    described = DIALECTS.get(dialect)
    if described is None:
        return None
    return StreamKind(dialect, described.terminal_frame, described.ping_frame, described.rpc)


async def hold(
    pause: Pause, write: Callable[[bytes], Awaitable[None]], cut: Cut | None = None
) -> int:
    """Perform ``pause``: wait its seconds, writing its keep-alive every ``every`` seconds
    meanwhile (none at its very end: what follows does). Returns the bytes written. A drop
    is ``cut`` (the shell's), then :class:`Dropped`."""
    if pause.action == DROP:
        if cut is not None:
            await cut()
        raise Dropped
    if not pause.keepalive or pause.every <= 0:
        await asyncio.sleep(pause.seconds)
        return 0
    loop = asyncio.get_running_loop()
    end = loop.time() + pause.seconds
    sent = 0
    while (left := end - loop.time()) > pause.every:
        await asyncio.sleep(pause.every)
        await write(pause.keepalive)
        sent += len(pause.keepalive)
    await asyncio.sleep(max(left, 0.0))
    return sent


class _Drain:
    """The state of one wait: its deadline moves while the client makes progress."""

    __slots__ = ("cap", "deadline", "last", "limit")

    def __init__(self, now: float, first: bool, cap: float = CUT_CAP) -> None:
        self.cap = cap
        self.deadline = now + (FIRST_CAP if first else cap)
        self.limit = now + (FIRST_CAP if first else max(CUT_MAX, cap))
        self.last: int | None = None

    def progress(self, unread: int, now: float) -> None:
        if self.last is not None and unread < self.last:
            self.deadline = min(max(self.deadline, now + self.cap), self.limit)
        self.last = unread


class Delivery:
    """One stream's cut-bearing writes and what became of them.

    ``cuts``: writes that carried a cut; ``read_apart``: those the client read apart (None
    when it could not be asked: a remote client, paced); ``waited``: seconds the proxy
    held writes back (jitter, waits, pacing), which a harness does not count against the
    client.
    """

    __slots__ = (
        "_probe",
        "_sock",
        "_started",
        "_transport",
        "cut",
        "cut_cap",
        "cuts",
        "fault_began",
        "missed_for",
        "read_apart",
        "reported",
        "sent",
        "waited",
    )

    def __init__(self, transport: asyncio.Transport | None) -> None:
        self._transport = transport
        sock = None if transport is None else transport.get_extra_info("socket")
        self._sock: socket.socket | None = sock
        self._probe: PeerQueue | None = None
        self._started = False
        self.cuts = 0
        self.sent = 0
        """Body bytes written so far."""
        self.reported: Reported | None = None
        """Set by a tool whose client reports its reads (:data:`Reported`)."""
        self.cut_cap = CUT_CAP
        """A tool may give a slower client more (a browser: its network process, the page
        and the report are three hops where a command has one)."""
        self.read_apart: int | None = 0
        self.waited = 0.0
        self.missed_for = 0.0
        self.fault_began: float | None = None
        """When a fault in time began on this stream (``time.monotonic``), None: not yet."""
        self.cut: Cut | None = None
        """How a drop cuts the client off (set by the relay)."""

    @property
    def measured(self) -> bool:
        """Whether the client's reads were seen (a local client), not just paced."""
        return self.read_apart is not None

    def fields(self) -> dict[str, Any]:
        """For ``stream.summary``: ``cuts``, ``cuts_read_apart`` (null: paced)."""
        return {"cuts": self.cuts, "cuts_read_apart": self.read_apart}

    async def send(
        self,
        writes: Sequence[Write],
        write: Callable[[bytes], Awaitable[None]],
        wrote: Callable[[bytes], None] | None,
    ) -> None:
        """Make ``writes``: the fault's pause, the jitter and the wait before each one that
        carries a cut."""
        for w in writes:
            if w.pause is not None:
                await self.hold(w.pause, write, wrote)
            if w.delay:
                await asyncio.sleep(w.delay)
                self.waited += w.delay
            if w.cut:
                await self._settle()
            await write(w.data)
            self.sent += len(w.data)
            if wrote is not None:
                wrote(w.data)

    async def hold(
        self,
        pause: Pause,
        write: Callable[[bytes], Awaitable[None]],
        wrote: Callable[[bytes], None] | None = None,
    ) -> None:
        """A fault's pause (before a write, or before the body ends): not ``waited``."""
        if pause.began and self.fault_began is None:
            self.fault_began = time.monotonic()

        async def keepalive(data: bytes) -> None:
            await write(data)
            self.sent += len(data)
            if wrote is not None:
                wrote(data)

        await hold(pause, keepalive, self.cut)

    def close(self) -> None:
        if self._probe is not None:
            self._probe.close()
            self._probe = None

    def _open(self) -> None:
        self._started = True
        if self._sock is not None:
            self._probe = PeerQueue.open(self._sock)
        if self._probe is None:
            self.read_apart = None

    def _drained(self, wait: _Drain, now: float) -> bool | None:
        """True: the client has read everything; None: it is gone (stop waiting)."""
        transport, probe, sock = self._transport, self._probe, self._sock
        if transport is None or probe is None or sock is None or transport.is_closing():
            return None
        if transport.get_write_buffer_size() or unsent(sock):
            return False
        unread = probe.unread()
        if unread is None:
            return None
        taken = None if self.reported is None else self.reported()
        if taken is not None:  # what the client's code has not taken counts as unread too
            unread += max(self.sent - taken, 0)
        wait.progress(unread, now)
        return unread == 0

    async def _settle(self) -> None:
        self.cuts += 1
        if not self._started:
            self._open()
        started = time.monotonic()
        if self._probe is None:
            await asyncio.sleep(PACE)
            self.waited += time.monotonic() - started
            return
        if self.missed_for >= MISS_BUDGET:
            return  # this client does not read: stop waiting, count the rest as missed
        step = 0
        wait = _Drain(started, first=self.cuts == 1, cap=self.cut_cap)
        while not (drained := self._drained(wait, time.monotonic())):
            now = time.monotonic()
            if drained is None:  # the connection is going: the write will tell
                self.waited += now - started
                return
            if now >= wait.deadline:
                self.missed_for += now - started
                self.waited += now - started
                return
            await asyncio.sleep(_STEPS[step] if step < len(_STEPS) else 0.001)
            step += 1
        assert self.read_apart is not None
        self.read_apart += 1
        self.waited += time.monotonic() - started
