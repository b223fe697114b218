"""`sse-proxy demo` as a new user runs it: a real process, real loopback sockets, exit 0."""

from __future__ import annotations

import subprocess
import sys

import pytest

from sse_proxy.tools import fixtures


@pytest.mark.parametrize("mode", ["passthrough", "frames", "chaos"])
def test_demo_runs_shows_exact_text_and_every_fault_and_exits_0(mode: str) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "sse_proxy", "demo", "--mode", mode],
        capture_output=True,
        timeout=120,
        check=False,
    )
    out = proc.stdout.decode()
    assert proc.returncode == 0, out + proc.stderr.decode()
    assert out.count("exact ✓") == len(fixtures.DIALECTS)
    assert "Google Gemini" in out
    assert "MCP Streamable HTTP  POST /mcp" in out
    assert "The quick brown fox 🦊" in out
    for fault in fixtures.FAULTS:
        assert f"{fault}" in out
    assert "every fault detected" in out
    # the failing stream found from the app's request id in logs, metrics and the trace
    logs = next(line for line in out.splitlines() if line.startswith("  logs:"))
    assert "verdict=broken" in logs
    assert "trace_id=0af7651916cd43dd8448eb211c80319c" in logs
    metrics = next(line for line in out.splitlines() if line.startswith("  metrics:"))
    assert 'request_id="demo-app-req-42"' in metrics
    assert 'verdict="broken"' in metrics
    trace = next(line for line in out.splitlines() if line.startswith("  trace:"))
    assert "trace_id=0af7651916cd43dd8448eb211c80319c" in trace
    assert "sse.truncated" in trace
    assert "Traceback" not in proc.stderr.decode()
    # values as the JSON logs have them, never Python reprs
    assert 'counts={"lf":0,"crlf":' in out
    assert "mixed=false" in out
    assert 'preview="data: {' in out
    for repr_only in ("{'", "['", "=True", "=False", "=None", "='", "span '"):
        assert repr_only not in out, repr_only
