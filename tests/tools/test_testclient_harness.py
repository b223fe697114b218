"""`test-client` survives its commands: children left behind, floods, exits; real processes."""

from __future__ import annotations

import json
import shlex
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

from tests.support.cli import CLI, ROOT, cli_env
from tests.support.recordings import CLIENTS

REFERENCE = f"{shlex.quote(sys.executable)} -m {CLIENTS}.reference"
# Runs test-client as a child and prints its peak memory (KiB) on the last line.
MEASURED = (
    "import resource, subprocess, sys; "
    "code = subprocess.run(sys.argv[1:]).returncode; "
    "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(code)"
)


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            state = f.read().rsplit(b")", 1)[1].split()[0]
    except OSError:
        return False
    return state != b"Z"


def _run(
    tmp_path: Path, command: str, *args: str
) -> tuple[subprocess.CompletedProcess[str], dict[str, Any]]:
    report = tmp_path / "report.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-c",
            MEASURED,
            *CLI,
            "test-client",
            "--report",
            str(report),
            *args,
            "--",
            "sh",
            "-c",
            command,
        ],
        cwd=ROOT,
        env=cli_env(),
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return proc, json.loads(report.read_text())


def test_children_left_holding_stdout_neither_hang_the_case_nor_survive_it(
    tmp_path: Path,
) -> None:
    """``sh -c 'sleep 300 & client'``: the client's exit ends the case (a pass, in well
    under the timeout), the sleep is killed with the case, and nothing is printed on the
    way out but the report."""
    pids = tmp_path / "pids"
    command = f"sleep 300 & echo $! >> {pids}; (sleep 300 &) ; {REFERENCE}"
    started = time.monotonic()
    proc, report = _run(tmp_path, command, "--only", "baseline,utf8", "--seeds", "1")
    took = time.monotonic() - started
    assert proc.returncode == 0, proc.stdout
    assert [c["outcome"] for c in report["cases"]] == ["pass", "pass"]
    assert took < 150, took  # a harness waiting on the children would take their 300 s
    left = [int(p) for p in pids.read_text().split()]
    assert len(left) == 2
    assert not [p for p in left if _alive(p)], "a child of the command is still running"
    assert "Traceback" not in proc.stderr
    assert "Event loop is closed" not in proc.stderr


def test_a_flood_is_stopped_reported_and_costs_the_harness_no_memory(tmp_path: Path) -> None:
    """300 MB on stdout: cut at the bound, CMD stopped, the case reported as an output
    flood; test-client's own peak memory stays far below what it was sent."""
    proc, report = _run(
        tmp_path, "head -c 300000000 /dev/zero", "--only", "baseline", "--seeds", "1"
    )
    assert proc.returncode == 1
    (case,) = report["cases"]
    assert case["outcome"] == "wrong"
    assert case["diagnosis"]["family"] == "output flood"
    peak_kib = int(proc.stdout.strip().splitlines()[-1])
    assert peak_kib < 200 * 1024, f"test-client peaked at {peak_kib} KiB"
    assert "Traceback" not in proc.stderr
    assert "output flood" in proc.stdout


def test_a_stderr_flood_keeps_its_tail_only(tmp_path: Path) -> None:
    """A client that writes 20 MB to stderr and then the answer passes; the kept stderr
    is bounded."""
    command = "head -c 20000000 /dev/zero | tr '\\0' x >&2; echo traceback-tail >&2; " + REFERENCE
    proc, report = _run(tmp_path, command, "--only", "baseline", "--seeds", "1")
    assert proc.returncode == 0, proc.stdout
    kept = report["cases"][0]
    assert kept["outcome"] == "pass"
    peak_kib = int(proc.stdout.strip().splitlines()[-1])
    assert peak_kib < 200 * 1024, f"test-client peaked at {peak_kib} KiB"
