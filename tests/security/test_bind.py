"""Binds 127.0.0.1 unless told otherwise; binding beyond loopback logs a clear notice."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from tests.support.cli import ServeProcess, http_get
from tests.support.net import free_port

# The socket's own view of where it listens: /proc/net/tcp lists every listening socket.
_LISTEN = "0A"


def _listeners(port: int) -> set[str]:
    """The local addresses (dotted IPv4) that listen on ``port``, from /proc/net/tcp."""
    found = set()
    for line in Path("/proc/net/tcp").read_text().splitlines()[1:]:
        fields = line.split()
        local, state = fields[1], fields[3]
        addr_hex, port_hex = local.split(":")
        if state == _LISTEN and int(port_hex, 16) == port:
            found.add(socket.inet_ntoa(bytes.fromhex(addr_hex)[::-1]))
    return found


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc/net/tcp")
def test_default_bind_is_loopback_only() -> None:
    """With no --host the socket listens on 127.0.0.1 only, and no exposure notice is logged."""
    port = free_port()
    with ServeProcess("--upstream", "http://127.0.0.1:9", "--port", str(port)) as serve:
        started = serve.wait_for("proxy.started")[0]
        assert started["listen"] == f"http://127.0.0.1:{port}"
        assert _listeners(port) == {"127.0.0.1"}
        status, _ = http_get(f"http://127.0.0.1:{port}/_sse-proxy/health")
        assert status == 200
    text = serve.stop()
    assert "proxy.exposed" not in text
    assert serve.proc is not None
    assert serve.proc.returncode == 0


@pytest.mark.skipif(not Path("/proc/net/tcp").exists(), reason="needs Linux /proc/net/tcp")
def test_binding_all_interfaces_logs_an_exposed_warning() -> None:
    """--host 0.0.0.0 listens on every interface and says so in a warning line."""
    port = free_port()
    with ServeProcess(
        "--upstream", "http://127.0.0.1:9", "--port", str(port), "--host", "0.0.0.0"
    ) as serve:
        exposed = serve.wait_for("proxy.exposed")[0]
        assert _listeners(port) == {"0.0.0.0"}
        assert exposed["level"] == "warning"
        assert exposed["host"] == "0.0.0.0"
        assert "beyond loopback" in exposed["notice"]
    serve.stop()


def test_env_host_is_honoured_and_other_loopback_addresses_are_not_exposure() -> None:
    """SSE_PROXY_HOST=127.0.0.2 binds there; a loopback address is no exposure."""
    port = free_port()
    env = {"SSE_PROXY_HOST": "127.0.0.2", "SSE_PROXY_PORT": str(port)}
    with ServeProcess("--upstream", "http://127.0.0.1:9", env=env) as serve:
        started = serve.wait_for("proxy.started")[0]
        assert started["listen"] == f"http://127.0.0.2:{port}"
        if Path("/proc/net/tcp").exists():
            assert _listeners(port) == {"127.0.0.2"}
    assert "proxy.exposed" not in serve.stop()
