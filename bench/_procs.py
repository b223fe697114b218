"""Subprocess helpers shared by the hand-run probes: wait for a port, stop gracefully."""

from __future__ import annotations

import asyncio
import signal
import subprocess
import time

__all__ = ["stop", "wait_listening"]


async def wait_listening(port: int, proc: subprocess.Popen[bytes], what: str = "proxy") -> None:
    """Return once ``port`` accepts on loopback; fail if ``proc`` died or 15 s ran out."""
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


def stop(proc: subprocess.Popen[bytes], timeout: float = 15.0) -> int:
    """SIGTERM (the graceful path under test), then SIGKILL past ``timeout``; the status."""
    if proc.poll() is None:
        proc.send_signal(signal.SIGTERM)
    try:
        return proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        proc.kill()
        return proc.wait()
