"""`serve --workers N`: N processes on one port (SO_REUSEPORT), and a parent that keeps them.

The parent serves nothing. It binds each worker's listening sockets itself (refusing a port
another process listens on, as one process would: :mod:`.sockets`) and hands them over at
start. It starts the workers (multiprocessing, spawn), and when one
exits outside a shutdown it logs ``worker.exited`` (pid, exit code or signal) and starts
a replacement after a back-off (0.5 s, doubling, at most 30 s). More than
``worker_max_restarts`` exits within ``worker_restart_window`` seconds means something
is wrong with the pod rather than with a worker: the parent logs ``workers.failing``,
stops the rest and exits 1, so the orchestrator restarts the pod. SIGTERM or SIGINT to the
parent is forwarded to every worker; each drains as a single process does.

Every worker sees how many workers are live and how many exits the parent handled (shared
counters the parent keeps): health says so, and so do ``sse_proxy_workers_live``,
``sse_proxy_workers_configured`` and ``sse_proxy_worker_restarts``.

Workers die with their parent: on Linux the kernel sends each one SIGTERM when the parent
exits, however it exits (``kill -9`` included), and every worker also checks its parent
every second; either way it drains and exits, as on SIGTERM. An orphan would keep serving
the port, and with another instance started on it, take part of its traffic.
"""

from __future__ import annotations

import contextlib
import ctypes
import multiprocessing
import multiprocessing.connection
import os
import shutil
import signal
import sys
import tempfile
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from sse_proxy.errors import UsageError
from sse_proxy.obs.logs import get_logger
from sse_proxy.server.sockets import WorkerSockets
from sse_proxy.settings import Config, StartupNote

__all__ = ["WorkerCounts", "WorkerTarget", "die_with_parent", "supervise"]

WorkerTarget = Callable[[Config, Sequence[StartupNote], Any, int, WorkerSockets], None]
"""A worker's main: its settings, the start-up notes, the shared counts that
:meth:`~WorkerCounts.shared` reads, its parent's pid and its listening sockets."""

Listen = Callable[[], WorkerSockets]
"""Binds one worker's listening sockets (a :class:`UsageError` when it cannot)."""

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int) -> None:
    """In a worker, first thing: SIGTERM when ``parent`` exits (Linux's parent-death
    signal), and an exit now if it is gone already (before the signal was asked for)."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(OSError, AttributeError):
            libc = ctypes.CDLL(None, use_errno=True)
            libc.prctl(_PR_SET_PDEATHSIG, int(signal.SIGTERM), 0, 0, 0)
    if os.getppid() != parent:
        raise SystemExit(0)


@dataclass(frozen=True, slots=True)
class WorkerCounts:
    """How many workers should run, how many do, and how many exits the parent has handled
    since it started (read at each health check and scrape)."""

    configured: int
    live: Callable[[], int]
    restarts: Callable[[], int] = lambda: 0

    @classmethod
    def single(cls) -> WorkerCounts:
        return cls(1, lambda: 1)

    @classmethod
    def shared(cls, configured: int, shared: Any) -> WorkerCounts:
        """Counts the supervisor keeps in shared memory: [live, restarts]."""
        return cls(configured, lambda: int(shared[0]), lambda: int(shared[1]))

    def fields(self) -> dict[str, int]:
        return {"live": self.live(), "configured": self.configured, "restarts": self.restarts()}


BACKOFF_FIRST_S = 0.5
BACKOFF_MAX_S = 30.0


def _describe_exit(code: int | None) -> dict[str, Any]:
    if code is not None and code < 0:
        try:
            name = signal.Signals(-code).name
        except ValueError:
            name = str(-code)
        return {"exit_code": None, "signal": name}
    return {"exit_code": code, "signal": None}


class _Supervisor:
    def __init__(
        self,
        cfg: Config,
        notes: Sequence[StartupNote],
        metrics_dir: str,
        target: WorkerTarget,
        listen: Listen,
    ) -> None:
        self.cfg = cfg
        self.target = target
        self.listen = listen
        self.notes = tuple(notes)
        self.metrics_dir = metrics_dir
        self.ctx = multiprocessing.get_context("spawn")
        self.shared = self.ctx.Array("i", 2, lock=False)  # live workers, exits handled
        self.procs: list[Any] = []
        self.pending: list[float] = []  # when each replacement is due (monotonic)
        self.exits: deque[float] = deque()
        self.stopping = False
        self.gave_up = False
        self.final_codes: list[int] = []
        self.log = get_logger(pid=os.getpid(), role="supervisor")

    def start_one(self, *, replacing: bool) -> None:
        try:
            sockets = self.listen()
        except UsageError as exc:
            if not replacing:
                raise  # the start is refused: one line, exit 2
            self.log.error("worker.not_started", error=str(exc))
            self.exited(None, 1)
            return
        try:
            proc = self.ctx.Process(
                target=self.target,
                args=(self.cfg, self.notes, self.shared, os.getpid(), sockets),
                daemon=False,
            )
            proc.start()
        finally:
            sockets.close()  # the worker has its own copies now (or none: it did not start)
        self.procs.append(proc)
        self.shared[0] = len(self.procs)
        if replacing:
            self.log.info("worker.started", worker_pid=proc.pid, replacement=True)

    def stop_all(self) -> None:
        self.stopping = True
        self.pending.clear()
        for proc in self.procs:
            if proc.pid is not None:
                with contextlib.suppress(ProcessLookupError):
                    os.kill(proc.pid, signal.SIGTERM)

    def reap(self, proc: Any) -> None:
        proc.join()
        self.procs.remove(proc)
        self.shared[0] = len(self.procs)
        if self.metrics_dir:
            from prometheus_client import multiprocess

            # its live gauges (active streams) leave the sums with it
            multiprocess.mark_process_dead(proc.pid, self.metrics_dir)  # type: ignore[no-untyped-call]
        code = proc.exitcode
        if self.stopping:
            # a worker stopped before it could install its handlers dies of the SIGTERM
            self.final_codes.append(0 if code == -signal.SIGTERM else (1 if code < 0 else code))
            return
        self.exited(proc.pid, code)

    def exited(self, pid: int | None, code: int | None) -> None:
        """A worker gone (or one that could not start): logged, replaced after a back-off,
        or, past the limit, the end of them all."""
        self.shared[1] += 1
        now = time.monotonic()
        window = self.cfg.worker_restart_window
        self.exits.append(now)
        while self.exits and now - self.exits[0] > window:
            self.exits.popleft()
        recent = len(self.exits)
        limit = self.cfg.worker_max_restarts
        if recent > limit:
            self.log.error(
                "worker.exited", worker_pid=pid, **_describe_exit(code), restart_in_s=None
            )
            self.log.error(
                "workers.failing",
                exits=recent,
                window_s=window,
                limit=limit,
                notice="too many worker exits: stopping, exit status 1 (the orchestrator "
                "restarts the pod)",
            )
            self.gave_up = True
            self.stop_all()
            return
        delay = min(BACKOFF_FIRST_S * 2 ** (recent - 1), BACKOFF_MAX_S)
        self.log.error(
            "worker.exited",
            worker_pid=pid,
            **_describe_exit(code),
            restart_in_s=delay,
            exits_in_window=recent,
            limit=limit,
        )
        self.pending.append(now + delay)

    def run(self) -> int:
        wake_r, wake_w = os.pipe()
        os.set_blocking(wake_w, False)
        os.set_blocking(wake_r, False)
        signalled: list[int] = []

        def on_signal(signum: int, _frame: object) -> None:
            signalled.append(signum)

        previous = signal.set_wakeup_fd(wake_w)
        handlers = {s: signal.signal(s, on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
        try:
            for _ in range(self.cfg.workers):
                self.start_one(replacing=False)
            while self.procs or (self.pending and not self.stopping):
                timeout = None
                if self.pending and not self.stopping:
                    timeout = max(0.0, min(self.pending) - time.monotonic())
                waitables: list[Any] = [p.sentinel for p in self.procs]
                multiprocessing.connection.wait([*waitables, wake_r], timeout)
                with contextlib.suppress(BlockingIOError):
                    os.read(wake_r, 512)
                if signalled and not self.stopping:
                    self.log.info("workers.stopping", signal=signal.Signals(signalled[0]).name)
                    self.stop_all()
                for proc in [p for p in self.procs if p.exitcode is not None]:
                    self.reap(proc)
                now = time.monotonic()
                for due in [t for t in self.pending if t <= now]:
                    self.pending.remove(due)
                    if not self.stopping:
                        self.start_one(replacing=True)
        finally:
            signal.set_wakeup_fd(previous)
            for sig, handler in handlers.items():
                signal.signal(sig, handler)
            os.close(wake_r)
            os.close(wake_w)
        if self.gave_up:
            return 1
        return max(self.final_codes, default=0)


def supervise(
    cfg: Config, notes: Sequence[StartupNote], target: WorkerTarget, listen: Listen
) -> int:
    """Run ``cfg.workers`` processes of ``target`` (a module-level function: spawn pickles
    it by name), each on the sockets ``listen`` binds for it, until SIGTERM/SIGINT, or
    until they keep dying."""
    own_dir = None
    if not os.environ.get("PROMETHEUS_MULTIPROC_DIR"):
        own_dir = tempfile.mkdtemp(prefix="sse-proxy-metrics-")
        os.environ["PROMETHEUS_MULTIPROC_DIR"] = own_dir
    try:
        return _Supervisor(cfg, notes, os.environ["PROMETHEUS_MULTIPROC_DIR"], target, listen).run()
    finally:
        if own_dir is not None:
            shutil.rmtree(own_dir, ignore_errors=True)
