"""The gateway under test: CMD started with the upstream's URL and a free port, waited for
until it listens (and, with a readiness path, answers 200 there), stopped at the end.

Its output (stdout and stderr together) goes to a file, so a chatty gateway never blocks
on a full pipe; when it dies or never gets ready, the error quotes its last lines.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import socket
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import IO, Final

import aiohttp

from sse_proxy.errors import ProxyError

__all__ = ["GatewayError", "GatewayProcess", "fill", "free_port"]

_TAIL_LINES: Final = 15
_POLL: Final = 0.1
_STOP_GRACE: Final = 5.0


class GatewayError(ProxyError):
    """The gateway did not start, or stopped answering (the message quotes its output)."""


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def fill(text: str, values: Mapping[str, str]) -> str:
    """``{upstream}`` and ``{port}`` replaced; every other brace left as it is (a JSON
    config on the command line keeps its own)."""
    for name, value in values.items():
        text = text.replace("{" + name + "}", value)
    return text


class GatewayProcess:
    """CMD, running; ``log`` holds what it printed."""

    def __init__(self, command: Sequence[str], env: Mapping[str, str], log: str | None) -> None:
        self.command = tuple(command)
        self.env = dict(env)
        self._own_log = log is None
        self.log = log or tempfile.mkstemp(prefix="sse-proxy-gateway-", suffix=".log")[1]
        self.proc: asyncio.subprocess.Process | None = None
        self._out: IO[bytes] | None = None

    def tail(self, lines: int = _TAIL_LINES) -> str:
        """The last lines the gateway printed (stdout and stderr)."""
        try:
            text = Path(self.log).read_bytes()[-64 * 1024 :].decode("utf-8", "replace")
        except OSError:
            return ""
        clean = [line.rstrip() for line in text.splitlines() if line.strip()]
        return "\n".join(clean[-lines:])

    def _open_log(self) -> IO[bytes]:
        return open(self.log, "ab")

    async def start(self) -> None:
        self._out = self._open_log()
        try:
            self.proc = await asyncio.create_subprocess_exec(
                *self.command,
                env={**os.environ, **self.env},
                stdin=asyncio.subprocess.DEVNULL,
                stdout=self._out,
                stderr=self._out,
                start_new_session=True,  # its own process group: stopped with its children
            )
        except OSError as exc:
            self._out.close()
            raise GatewayError(
                f"cannot start the gateway {self.command[0]!r}: {exc.strerror or exc}"
            ) from None

    def _died(self, what: str) -> GatewayError:
        code = self.proc.returncode if self.proc is not None else None
        tail = self.tail()
        shown = "\n".join(f"  | {line}" for line in tail.splitlines()) or "  | (nothing)"
        return GatewayError(
            f"the gateway command exited with status {code} {what}; its last output lines:\n{shown}"
        )

    async def wait_ready(self, port: int, ready_path: str | None, within: float) -> float:
        """Seconds until the gateway listened on ``port`` (and answered 200 on
        ``ready_path``); a :class:`GatewayError` quoting its output if it died or timed out."""
        started = time.monotonic()
        deadline = started + within
        last = ""
        while True:
            if self.proc is not None and self.proc.returncode is not None:
                raise self._died(f"before it listened on port {port}")
            if await _listens(port):
                break
            if time.monotonic() > deadline:
                raise self._timeout(f"did not listen on port {port} within {within:g} s")
            await asyncio.sleep(_POLL)
        if ready_path:
            url = f"http://127.0.0.1:{port}/{ready_path.lstrip('/')}"
            async with aiohttp.ClientSession() as session:
                while True:
                    if self.proc is not None and self.proc.returncode is not None:
                        raise self._died(f"before {url} answered 200")
                    try:
                        async with session.get(url, timeout=aiohttp.ClientTimeout(total=5)) as resp:
                            if resp.status == 200:
                                break
                            last = f" (last answer: HTTP {resp.status})"
                    except (aiohttp.ClientError, TimeoutError) as exc:
                        last = f" (last answer: {type(exc).__name__})"
                    if time.monotonic() > deadline:
                        raise self._timeout(f"{url} did not answer 200 within {within:g} s{last}")
                    await asyncio.sleep(_POLL * 3)
        return time.monotonic() - started

    def _timeout(self, what: str) -> GatewayError:
        tail = self.tail()
        shown = "\n".join(f"  | {line}" for line in tail.splitlines()) or "  | (nothing)"
        return GatewayError(f"the gateway {what}; its last output lines:\n{shown}")

    def check_alive(self) -> None:
        if self.proc is not None and self.proc.returncode is not None:
            raise self._died("while the cases ran")

    async def stop(self) -> None:
        """SIGTERM to its process group, SIGKILL after a grace period."""
        proc = self.proc
        try:
            if proc is not None and proc.returncode is None:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGTERM)
                try:
                    await asyncio.wait_for(proc.wait(), _STOP_GRACE)
                except TimeoutError:
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(proc.pid, signal.SIGKILL)
                    await proc.wait()
            if proc is not None:  # children it left behind in its group
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.killpg(proc.pid, signal.SIGKILL)
        finally:
            if self._out is not None:
                self._out.close()
            if self._own_log:
                with contextlib.suppress(OSError):
                    os.unlink(self.log)


async def _listens(port: int) -> bool:
    try:
        _, writer = await asyncio.wait_for(asyncio.open_connection("127.0.0.1", port), 1.0)
    except (OSError, TimeoutError):
        return False
    writer.close()
    with contextlib.suppress(OSError):
        await writer.wait_closed()
    return True
