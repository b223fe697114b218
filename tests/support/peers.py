"""Real network parts for the network tests: a forward proxy and a private-CA TLS upstream.

The forward proxy is ``pproxy`` (PyPI) in its own process on loopback; it prints one line
per tunnelled connection (``http <client> -> <host:port>``), which is how a test knows the
upstream traffic really went through it. The TLS upstream is the project's mock upstream
served with a certificate from a ``trustme`` CA that no system trust store knows.
"""

from __future__ import annotations

import contextlib
import ssl
import subprocess
import sys
import threading
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import trustme
from aiohttp import web

from sse_proxy.tools.mock_upstream import make_mock_app
from tests.support.net import free_port

__all__ = ["ForwardProxy", "PrivateCA", "forward_proxy", "private_ca", "tls_mock_upstream"]


@dataclass
class ForwardProxy:
    """A running pproxy: its URL and every line it printed."""

    url: str
    lines: list[str] = field(default_factory=list)
    changed: threading.Condition = field(default_factory=threading.Condition)

    def tunnelled(self, host_port: str) -> int:
        """How many connections to ``host_port`` went through it so far."""
        with self.changed:
            return sum(1 for line in self.lines if line.rstrip().endswith(f"-> {host_port}"))

    def wait_tunnelled(self, host_port: str, within: float = 10.0) -> int:
        """Wait (on its output, not a sleep) until it reports a connection to ``host_port``."""
        with self.changed:
            self.changed.wait_for(lambda: self.tunnelled(host_port) > 0, timeout=within)
        return self.tunnelled(host_port)


# pproxy installs uvloop when it can import it, then asks for the current event loop,
# which uvloop >= 0.22 no longer creates on demand: run it on asyncio's own loop.
_PPROXY = (
    "import runpy, sys; sys.modules['uvloop'] = None; sys.argv[0] = 'pproxy'; "
    "runpy.run_module('pproxy', run_name='__main__', alter_sys=True)"
)


@contextlib.contextmanager
def forward_proxy(auth: str | None = None) -> Iterator[ForwardProxy]:
    """``pproxy -l http://127.0.0.1:PORT -v`` in its own process, stopped afterwards;
    ``auth`` ("user:password"): it asks every request for them (``--auth 0``)."""
    port = free_port()
    listen = f"http://127.0.0.1:{port}" + (f"#{auth}" if auth else "")
    extra = ["--auth", "0"] if auth else []
    proc = subprocess.Popen(
        [sys.executable, "-u", "-c", _PPROXY, "-l", listen, "-v", *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
    )
    fp = ForwardProxy(url=f"http://127.0.0.1:{port}")
    ready = threading.Event()

    def read() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            with fp.changed:
                fp.lines.append(line)
                fp.changed.notify_all()
            if line.startswith("Serving on"):
                ready.set()
        ready.set()

    reader = threading.Thread(target=read, daemon=True)
    reader.start()
    try:
        assert ready.wait(20), "pproxy did not start"
        assert proc.poll() is None, fp.lines
        yield fp
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        reader.join(timeout=10)
        if proc.stdout is not None:
            proc.stdout.close()


@dataclass
class PrivateCA:
    """A CA of our own, a server certificate for 127.0.0.1/localhost, a client certificate."""

    ca: trustme.CA
    ca_file: Path
    server_ctx: ssl.SSLContext
    client_cert_file: Path


def private_ca(tmp_path: Path, *, require_client_cert: bool = False) -> PrivateCA:
    ca = trustme.CA()
    server_cert = ca.issue_cert("127.0.0.1", "localhost")
    ctx = ssl.create_default_context(ssl.Purpose.CLIENT_AUTH)
    server_cert.configure_cert(ctx)
    if require_client_cert:
        ca.configure_trust(ctx)
        ctx.verify_mode = ssl.CERT_REQUIRED
    ca_file = tmp_path / "ca.pem"
    ca.cert_pem.write_to_path(str(ca_file))
    client = ca.issue_cert("sse-proxy-client")
    client_file = tmp_path / "client.pem"
    client.private_key_and_cert_chain_pem.write_to_path(str(client_file))
    return PrivateCA(ca=ca, ca_file=ca_file, server_ctx=ctx, client_cert_file=client_file)


@contextlib.asynccontextmanager
async def tls_mock_upstream(ctx: ssl.SSLContext) -> AsyncIterator[str]:
    """The mock upstream over HTTPS with ``ctx``; yields ``https://127.0.0.1:PORT``."""
    runner = web.AppRunner(make_mock_app(), access_log=None, shutdown_timeout=0.5)
    await runner.setup()
    try:
        site = web.TCPSite(runner, "127.0.0.1", 0, ssl_context=ctx)
        await site.start()
        yield f"https://127.0.0.1:{runner.addresses[0][1]}"
    finally:
        await runner.cleanup()
