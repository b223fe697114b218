"""Running CMD once, so that whatever it does the harness survives it.

* CMD gets a session of its own; when the case ends, everything in that session (its
  process group, and the groups a shell with job control made) is killed, so nothing it
  started is left running (``sh -c 'sleep 300 & curl ...'``, ``npm test``, a test
  runner's workers).
* CMD's exit ends the case: the output it left is waited for :data:`GRACE` seconds at most
  (a child holding stdout open is not a hang), then the session is killed.
* stdout is kept up to a bound (the expected text's size plus a margin); past it CMD is
  stopped and the case reported as a flood. stderr keeps its last :data:`ERR_KEEP` bytes.
  The harness's own memory stays bounded whatever CMD prints.
* The timeout does not count the seconds the proxy held writes back (``credit``): the
  harness's pacing is never blamed on the client. A case may have another deadline
  (``until``: the ``stalls`` group's patience, counted from when the fault began), which
  replaces the timeout once it is known.

No asyncio subprocess transport is involved (its ``wait()`` waits for the pipes too, and
its transports complain after the loop closed): a plain ``Popen``, the pipes read with
``add_reader``, the exit seen through a pidfd (polled where there is none).
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Final

from sse_proxy.errors import UsageError

__all__ = ["ERR_KEEP", "GRACE", "Ran", "free_port", "output_limit", "run_command"]

GRACE: Final = 0.5
"""Seconds the output CMD left behind is waited for once CMD has exited."""
ERR_KEEP: Final = 64 << 10
"""Bytes of stderr kept (the last ones: a traceback's end is what tells)."""
_READ = 65536
_POLL = 0.02
_UNTIL_POLL = 0.05  # a deadline that may come sooner (a stall's patience) is looked at often


def output_limit(expected: str) -> int:
    """The most stdout kept: the expected text's size plus a margin."""
    size = len(expected.encode("utf-8"))
    return size + max(64 << 10, size)


@dataclass(slots=True)
class Ran:
    """What one run of CMD did."""

    code: int | None
    """The exit status (negative: the signal), None when it hung or flooded."""
    out: bytes
    err: bytes
    hung: bool = False
    flooded: bool = False
    """It printed more than the bound: stopped there, ``out`` cut at the bound."""
    seconds: float = 0.0
    started: float = 0.0
    """When it started (``time.monotonic``); ``seconds`` count from there."""


class _Pipe:
    __slots__ = ("buf", "done", "fd", "keep_tail", "limit", "over")

    def __init__(self, fd: int, limit: int, *, keep_tail: bool) -> None:
        self.fd = fd
        self.limit = limit
        self.keep_tail = keep_tail
        self.buf = bytearray()
        self.done = False
        self.over = False

    def drain(self) -> None:
        """Read what is there now (non-blocking); note the end of file."""
        while not self.done:
            try:
                chunk = os.read(self.fd, _READ)
            except BlockingIOError:
                return
            except OSError:
                chunk = b""
            if not chunk:
                self.done = True
                return
            self.buf += chunk
            if len(self.buf) > self.limit:
                if self.keep_tail:
                    del self.buf[: len(self.buf) - self.limit]
                else:
                    del self.buf[self.limit :]
                    self.over = True
                    return


def _session_members(sid: int) -> list[int]:
    """Every process in session ``sid`` (Linux: from /proc), ours excluded."""
    if not sys.platform.startswith("linux"):
        return []
    found = []
    me = os.getpid()
    with contextlib.suppress(OSError):
        for name in os.listdir("/proc"):
            if not name.isdigit() or int(name) == me:
                continue
            try:
                with open(f"/proc/{name}/stat", "rb") as f:
                    stat = f.read()
            except OSError:
                continue
            # pid (comm) state ppid pgrp session ...: comm may hold spaces and parens
            fields = stat[stat.rfind(b")") + 2 :].split()
            if len(fields) > 3 and int(fields[3]) == sid:
                found.append(int(name))
    return found


def kill_session(pid: int) -> None:
    """SIGKILL the process group ``pid`` leads and everything else in its session."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, signal.SIGKILL)
    for member in _session_members(pid):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.kill(member, signal.SIGKILL)


async def run_command(
    command: Sequence[str],
    env: dict[str, str],
    *,
    timeout: float,  # noqa: ASYNC109 - the deadline moves (credit), asyncio.timeout cannot
    out_limit: int,
    credit: Callable[[], float] = lambda: 0.0,
    until: Callable[[], float | None] | None = None,
) -> Ran:
    """Run CMD in a session of its own; see the module docstring for what ends it.
    ``until``: the deadline (``time.monotonic``) once it is known, instead of the timeout."""
    loop = asyncio.get_running_loop()
    started = time.monotonic()
    try:
        proc = subprocess.Popen(  # noqa: S603, ASYNC220 - the user's CMD; a fork is quick
            list(command),
            env={**os.environ, **env},
            stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
        )
    except FileNotFoundError:
        raise UsageError(f"command not found: {command[0]!r}") from None
    except PermissionError:
        raise UsageError(f"command not executable: {command[0]!r}") from None
    assert proc.stdout is not None
    assert proc.stderr is not None
    out = _Pipe(proc.stdout.fileno(), out_limit, keep_tail=False)
    err = _Pipe(proc.stderr.fileno(), ERR_KEEP, keep_tail=True)
    changed = asyncio.Event()
    pidfd = -1
    watched: list[int] = []
    try:
        for pipe in (out, err):
            os.set_blocking(pipe.fd, False)

            def readable(pipe: _Pipe = pipe) -> None:
                pipe.drain()
                if pipe.done or pipe.over:
                    loop.remove_reader(pipe.fd)
                    watched.remove(pipe.fd)
                changed.set()

            loop.add_reader(pipe.fd, readable)
            watched.append(pipe.fd)
        with contextlib.suppress(AttributeError, OSError):
            pidfd = os.pidfd_open(proc.pid)

            def exited() -> None:  # readable from the exit on: tell once
                loop.remove_reader(pidfd)
                watched.remove(pidfd)
                changed.set()

            loop.add_reader(pidfd, exited)
            watched.append(pidfd)
        poll = _POLL if pidfd < 0 else 1.0 if until is None else _UNTIL_POLL
        code, hung, flooded = await _wait(
            proc, out, err, changed, started, timeout, credit, poll, until
        )
    finally:
        for fd in watched:
            loop.remove_reader(fd)
        if pidfd >= 0:
            os.close(pidfd)
        kill_session(proc.pid)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=1.0)
        for pipe in (out, err):
            with contextlib.suppress(OSError):
                pipe.drain()
        proc.stdout.close()
        proc.stderr.close()
    return Ran(
        code=None if hung or flooded else code,
        out=bytes(out.buf),
        err=bytes(err.buf),
        hung=hung,
        flooded=flooded,
        seconds=time.monotonic() - started,
        started=started,
    )


async def _wait(
    proc: subprocess.Popen[bytes],
    out: _Pipe,
    err: _Pipe,
    changed: asyncio.Event,
    started: float,
    timeout: float,  # noqa: ASYNC109
    credit: Callable[[], float],
    poll: float,
    until: Callable[[], float | None] | None = None,
) -> tuple[int | None, bool, bool]:
    """Until CMD exits (then the grace for its output), floods, or runs out of time."""
    exited_at: float | None = None
    while True:
        if out.over:
            return None, False, True
        code = proc.poll()
        now = time.monotonic()
        if code is not None:
            if exited_at is None:
                exited_at = now
            if (out.done and err.done) or now - exited_at >= GRACE:
                return code, False, False
            left = exited_at + GRACE - now
        else:
            limit = None if until is None else until()
            if limit is None:
                limit = started + timeout + credit()
            left = limit - now
            if left <= 0:
                return None, True, False
        changed.clear()
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(changed.wait(), min(left, poll))


def free_port() -> int:
    """A TCP port on 127.0.0.1 free a moment ago, for a process that must be told its port."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])
