"""Running the command line as a user would: ``python -m sse_proxy ...`` or the installed
``sse-proxy`` script as real subprocesses, with the repository importable and no proxies
in the environment."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

__all__ = ["CLI", "ROOT", "SSE_PROXY", "ServeProcess", "cli_env", "http_get", "run_cli"]

ROOT = Path(__file__).resolve().parents[2]
"""The repository's root."""
SSE_PROXY = str(Path(sys.executable).with_name("sse-proxy"))
"""The installed console script."""
CLI = [sys.executable, "-m", "sse_proxy"]
"""``python -m sse_proxy``, as argv."""


def cli_env(**extra: str) -> dict[str, str]:
    """The environment for `sse-proxy` subprocesses: the repo importable, no proxies."""
    env = dict(os.environ)
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env["NO_PROXY"] = env["no_proxy"] = "127.0.0.1,localhost"
    env.update(extra)
    return env


def run_cli(
    *args: str, stdin: bytes | None = None, timeout: float = 60.0, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[bytes]:
    """``python -m sse_proxy ARGS`` to completion; its exit code, stdout and stderr."""
    return subprocess.run(
        [*CLI, *args],
        input=stdin,
        capture_output=True,
        timeout=timeout,
        check=False,
        env=env or cli_env(),
    )


def read_shared(fd: int) -> bytes:
    """The whole of a file a child process writes to, read without moving its offset.

    The child's stderr is this very open file (one offset, shared): a ``seek(0)`` here
    between two of its writes makes its next line overwrite the file's start.
    """
    parts, at = [], 0
    while block := os.pread(fd, 1 << 16, at):
        parts.append(block)
        at += len(block)
    return b"".join(parts)


class ServeProcess:
    """``sse-proxy serve`` as a real subprocess, its stderr (the JSON log) in a file.

    Use as a context manager; ``stop()`` sends SIGTERM and returns the whole log text.
    """

    def __init__(self, *args: str, env: dict[str, str] | None = None) -> None:
        self.args = [SSE_PROXY, "serve", *args]
        self.env = {**os.environ, **(env or {})}
        for name in list(self.env):
            if name.startswith("SSE_PROXY_") and name not in (env or {}):
                del self.env[name]
        self._log = tempfile.TemporaryFile(mode="w+b")  # noqa: SIM115 - closed in stop()
        self.proc: subprocess.Popen[bytes] | None = None
        self.text = ""

    def __enter__(self) -> ServeProcess:
        self.proc = subprocess.Popen(
            self.args,
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=self._log,
            env=self.env,
            cwd=ROOT,
        )
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def log_text(self) -> str:
        if self._log.closed:
            return self.text
        return read_shared(self._log.fileno()).decode("utf-8", "replace")

    def lines(self) -> list[dict[str, Any]]:
        """The JSON log lines so far (asserting that every whole line is JSON)."""
        out = []
        text = self.log_text()
        if not self._log.closed and not text.endswith("\n"):
            text = text[: text.rfind("\n") + 1]  # a line still being written: not yet
        for line in text.splitlines():
            if line.strip():
                try:
                    out.append(json.loads(line))
                except ValueError:
                    raise AssertionError(f"a log line that is not JSON: {line!r}") from None
        return out

    def wait_for(self, event: str, count: int = 1, timeout: float = 20.0) -> list[dict[str, Any]]:
        """Wait until ``event`` was logged ``count`` times; the process must stay alive."""
        assert self.proc is not None
        deadline = time.monotonic() + timeout
        while True:
            found = [e for e in self.lines() if e.get("event") == event]
            if len(found) >= count:
                return found
            code = self.proc.poll()
            if code is not None:
                raise AssertionError(f"serve exited {code} early:\n{self.log_text()[-3000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"{event} x{count} not logged:\n{self.log_text()[-3000:]}")
            time.sleep(0.05)

    def stop(self, timeout: float = 20.0) -> str:
        """SIGTERM, wait, and return the full log text (idempotent)."""
        if self.proc is not None and self.proc.returncode is None:
            if self.proc.poll() is None:
                self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait(5)
                raise
        if not self._log.closed:
            self.text = self.log_text()
            self._log.close()
        return self.text


def http_get(url: str, timeout: float = 5.0) -> tuple[int, bytes]:
    """A blocking GET (for code that runs next to a subprocess, outside an event loop)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as resp:
            return int(resp.status), resp.read()
    except urllib.error.HTTPError as exc:
        return int(exc.code), exc.read()
