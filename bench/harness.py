"""What every hand-run benchmark and probe needs around the thing it measures: free ports,
processes started, waited for and stopped, and their CPU time and memory (psutil).

The benchmarks themselves are thin commands on this module (and, for the proxy benchmarks,
on :mod:`bench.rig`, the stream and the contenders); nothing here knows what is measured.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import os
import signal
import socket
import subprocess
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import psutil

__all__ = [
    "ROOT",
    "Service",
    "cpu_model",
    "cpu_seconds",
    "die_with_parent",
    "free_port",
    "io_calls",
    "loadavg",
    "machine_busy_seconds",
    "open_fds",
    "own_cpu",
    "pct_ms",
    "peak_rss_mib",
    "pin_to",
    "process_cpu",
    "rss_kib",
    "rss_mib",
    "stop",
    "wait_listening",
    "wait_port",
    "with_pythonpath",
]

ROOT = Path(__file__).resolve().parents[1]
"""The repository's root (the benchmarks run with it as their working directory)."""


# -- ports -------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago (for a process told its port)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def wait_port(port: int, proc: subprocess.Popen[Any], what: str, timeout: float = 20) -> None:
    """Return once ``port`` accepts on loopback; fail if ``proc`` exits or time runs out."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{what} exited with status {proc.returncode} before listening")
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), 0.5):
            return
        time.sleep(0.05)
    raise RuntimeError(f"{what} did not listen on port {port} within {timeout:.0f} s")


async def wait_listening(port: int, proc: subprocess.Popen[bytes], what: str = "proxy") -> None:
    """:func:`wait_port` for a caller inside an event loop (15 s)."""
    deadline = time.monotonic() + 15
    while True:
        try:
            _r, w = await asyncio.open_connection("127.0.0.1", port)
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start") from None
            await asyncio.sleep(0.05)
        else:
            w.close()
            await w.wait_closed()
            return


# -- processes ---------------------------------------------------------------------------

try:  # resolved here, not in the forked child: the child only makes one foreign call
    _PRCTL: Any = ctypes.CDLL("libc.so.6", use_errno=True).prctl
except (OSError, AttributeError):
    _PRCTL = None


def die_with_parent() -> None:  # pragma: no cover - runs in the child before exec
    """``preexec_fn``: the child gets SIGTERM if this process dies first (PR_SET_PDEATHSIG)."""
    if _PRCTL is not None:
        _PRCTL(1, signal.SIGTERM)


def stop(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> int:
    """SIGTERM (the graceful path under test), then SIGKILL past ``timeout``; the status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()


def with_pythonpath(first: Path) -> str:
    """``PYTHONPATH`` with ``first`` in front of what this process was given."""
    rest = os.environ.get("PYTHONPATH", "")
    return os.pathsep.join(p for p in (str(first), rest) if p)


class Service:
    """A process we started, listening on ``port`` (plus, for nginx, its workers), its
    output in ``log``; stopped exactly once."""

    def __init__(
        self,
        name: str,
        argv: list[str],
        port: int,
        *,
        log: Path,
        stop_signal: int = signal.SIGTERM,
        cwd: Path = ROOT,
        env: dict[str, str] | None = None,
        wait_s: float = 20,
    ) -> None:
        self.name = name
        self.port = port
        self.stop_signal = stop_signal
        self._log = log.open("wb")
        self.proc = subprocess.Popen(
            argv,
            cwd=cwd,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            preexec_fn=die_with_parent,  # noqa: PLW1509 - one prctl call, no locks
        )
        self.log_path = log
        self.pids = [self.proc.pid]
        try:
            wait_port(port, self.proc, name, wait_s)
        except BaseException:
            self.stop()
            raise

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def adopt_children(self) -> None:
        """Count the process's children (nginx's workers) as part of it."""
        with contextlib.suppress(psutil.Error):
            kids = psutil.Process(self.proc.pid).children()
            self.pids = [self.proc.pid, *(kid.pid for kid in kids)]

    def log_tail(self, lines: int = 15) -> str:
        with contextlib.suppress(OSError):
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        return ""

    def stop(self) -> None:
        if self.proc.poll() is None:
            with contextlib.suppress(ProcessLookupError):
                self.proc.send_signal(self.stop_signal)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(timeout=5)
        for pid in self.pids[1:]:  # nginx workers: normally gone with their master
            with contextlib.suppress(psutil.Error):
                kid = psutil.Process(pid)
                if kid.status() != psutil.STATUS_ZOMBIE:
                    kid.kill()
        self._log.close()


def pin_to(pids: Sequence[int], cpus: set[int]) -> None:
    """Every thread of ``pids`` on ``cpus`` only."""
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            for thread in psutil.Process(pid).threads():
                with contextlib.suppress(OSError):
                    os.sched_setaffinity(thread.id, cpus)


# -- CPU and memory ----------------------------------------------------------------------


def process_cpu(pid: int) -> float | None:
    """User + system CPU seconds ``pid`` has used so far (children not counted); None if
    it is gone."""
    try:
        times = psutil.Process(pid).cpu_times()
    except psutil.Error:
        return None
    return float(times.user + times.system)


def cpu_seconds(pids: Sequence[int]) -> float:
    """CPU time of ``pids`` (all their threads), to the nanosecond where Linux says it.

    psutil's CPU times come in 10 ms clock ticks, too coarse for a burst's window; the
    scheduler's own runtime of each thread (schedstat) is exact, and psutil's figure is
    the fallback where there is none."""
    total = 0.0
    for pid in pids:
        try:
            threads = psutil.Process(pid).threads()
            total += sum(_runtime_ns(pid, t.id) for t in threads) / 1e9
        except (psutil.Error, OSError, ValueError, IndexError):
            total += process_cpu(pid) or 0.0
    return total


def _runtime_ns(pid: int, tid: int) -> int:
    return int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])


def own_cpu(pids: Sequence[int]) -> float:
    """User + system CPU seconds of ``pids``, counted as :func:`machine_busy_seconds` counts
    (to subtract one from the other)."""
    return sum(process_cpu(pid) or 0.0 for pid in pids)


def machine_busy_seconds() -> float:
    """CPU seconds every process on the machine has used (all CPUs): the run's noise."""
    t = psutil.cpu_times()._asdict()
    # guest time is counted in user time already (as in /proc/stat); idle and iowait are not work
    skip = {"idle", "iowait", "guest", "guest_nice"}
    return float(sum(v for k, v in t.items() if k not in skip))


def rss_kib(pid: int) -> int:
    """Resident set size of ``pid`` in KiB (0 if it is gone)."""
    try:
        return int(psutil.Process(pid).memory_info().rss) // 1024
    except psutil.Error:
        return 0


def rss_mib(pids: Sequence[int]) -> float:
    return sum(rss_kib(pid) for pid in pids) / 1024


def peak_rss_mib(pids: Sequence[int]) -> float:
    """The largest resident set each of ``pids`` has had, summed (``VmHWM``: psutil has no
    peak on Linux)."""
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError, ValueError):
            for line in Path(f"/proc/{pid}/status").read_text().splitlines():
                if line.startswith("VmHWM:"):
                    total += int(line.split()[1])
    return total / 1024


def open_fds(pid: int) -> int:
    """Open file descriptors of ``pid``."""
    return int(psutil.Process(pid).num_fds())


def io_calls(pids: Sequence[int]) -> tuple[int, int]:
    """Read and write system calls of ``pids`` so far."""
    reads = writes = 0
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            io = psutil.Process(pid).io_counters()
            reads += int(io.read_count)
            writes += int(io.write_count)
    return reads, writes


def pct_ms(ns: Sequence[int], p: float) -> float:
    """The ``p``-th percentile (nearest rank) of durations in ns, in ms; NaN if none."""
    if not ns:
        return float("nan")
    ordered = sorted(ns)
    return ordered[min(len(ordered) - 1, round(p / 100 * (len(ordered) - 1)))] / 1e6


def cpu_model() -> str:
    """The CPU's model name, as the kernel reports it ("?" where unknown)."""
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    return "?"


def loadavg() -> str:
    """The 1, 5 and 15-minute load averages."""
    return " ".join(f"{x:.2f}" for x in os.getloadavg())
