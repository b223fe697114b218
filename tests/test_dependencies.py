"""What pyproject.toml declares is what the package needs: every third-party module the
package imports is a declared dependency (or, for an optional import, in the extra that
brings it), and the declared floors of aiohttp, yarl and multidict run the proxy: they are
installed in a scratch directory and a stream is routed through ``sse-proxy serve`` on
them, against the mock upstream."""

from __future__ import annotations

import ast
import json
import os
import re
import socket
import subprocess
import sys
import time
import tomllib
import urllib.request
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from tests.support.cli import ROOT, ServeProcess, cli_env
from tests.support.net import free_port

PACKAGE = ROOT / "sse_proxy"
PYPROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]

OPTIONAL = {
    "opentelemetry": "otel",  # tracing, imported when --otlp-endpoint is given
    "pytest": "test",  # the pytest plugin, loaded only by pytest itself
}
"""Modules the package imports only where an extra is installed: the extra that brings each."""
FLOORED = ("aiohttp", "yarl", "multidict")
"""The dependencies whose declared floor the routing test installs."""


def _name(requirement: str) -> str:
    """A requirement's distribution name, normalised (PEP 503)."""
    m = re.match(r"[A-Za-z0-9][A-Za-z0-9._-]*", requirement)
    assert m is not None, requirement
    return re.sub(r"[-_.]+", "-", m.group(0)).lower()


def _declared(requirements: list[str]) -> set[str]:
    return {_name(r) for r in requirements}


def imported_modules(root: Path = PACKAGE) -> dict[str, set[str]]:
    """Top-level name of every module imported anywhere under ``root`` (lazy and type-only
    imports too) that is neither the standard library's nor the package's -> the files."""
    found: dict[str, set[str]] = {}
    for path in sorted(root.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
                names = [node.module]
            else:
                continue
            for name in names:
                top = name.split(".")[0]
                if top in sys.stdlib_module_names or top in {root.name, "__future__"}:
                    continue
                found.setdefault(top, set()).add(path.relative_to(root.parent).as_posix())
    return found


def test_every_imported_module_is_a_declared_dependency() -> None:
    providers = packages_distributions()
    required = _declared(PYPROJECT["dependencies"])
    extras = {name: _declared(reqs) for name, reqs in PYPROJECT["optional-dependencies"].items()}
    missing = []
    imported = imported_modules()
    assert {"aiohttp", "yarl", "multidict", "opentelemetry"} <= set(imported)  # (it reads)
    for module, files in sorted(imported.items()):
        dists = {_name(d) for d in providers.get(module, [])}
        assert dists, f"{module} (imported by {sorted(files)}) is not installed"
        declared = extras[OPTIONAL[module]] if module in OPTIONAL else required
        if not dists & declared:
            where = f"the {OPTIONAL[module]} extra" if module in OPTIONAL else "dependencies"
            missing.append(
                f"{module} ({sorted(dists)}), imported by {sorted(files)}: not in {where}"
            )
    assert not missing, missing


def test_an_undeclared_import_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "sse_proxy"
    pkg.mkdir()
    (pkg / "a.py").write_text("import json\nimport yarl.x\nfrom . import b\n")
    (pkg / "b.py").write_text("def f():\n    from multidict import istr\n")
    assert imported_modules(pkg) == {"yarl": {"sse_proxy/a.py"}, "multidict": {"sse_proxy/b.py"}}


def floors() -> dict[str, str]:
    """The declared floor (``>=``) of each of :data:`FLOORED`."""
    out = {}
    for requirement in PYPROJECT["dependencies"]:
        m = re.match(r"([A-Za-z0-9_.-]+)\s*>=\s*([0-9][0-9.]*)", requirement)
        if m and _name(m.group(1)) in FLOORED:
            out[_name(m.group(1))] = m.group(2)
    assert sorted(out) == sorted(FLOORED), out
    return out


def _post(url: str, body: dict[str, object]) -> tuple[str, bytes]:
    request = urllib.request.Request(
        url, data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=30) as resp:
        return str(resp.headers["Content-Type"]), resp.read()


def _wait_for_port(port: int, proc: subprocess.Popen[bytes]) -> None:
    """Until something accepts on ``port`` (``proc`` must stay alive meanwhile)."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"exited {proc.returncode}"
        with socket.socket() as sock:
            if sock.connect_ex(("127.0.0.1", port)) == 0:
                return
        time.sleep(0.05)
    raise AssertionError(f"nothing listens on {port}")


@pytest.mark.slow
@pytest.mark.timeout(300)
def test_the_declared_floors_route_a_stream(tmp_path: Path) -> None:
    """aiohttp, yarl and multidict at exactly their declared floors (from PyPI, into a
    scratch directory put first on the path; the venv's other packages as they are):
    ``sse-proxy serve`` and the mock upstream start on them and a stream comes through
    whole, the same bytes as the mock upstream sends directly."""
    pinned = [f"{name}=={version}" for name, version in floors().items()]
    target = tmp_path / "floor"
    pip = [sys.executable, "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    done = subprocess.run(
        [*pip, "--no-deps", "--only-binary=:all:", "--target", str(target), *pinned],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    env = cli_env(PYTHONPATH=os.pathsep.join((str(target), str(ROOT))))
    seen = subprocess.run(
        [
            sys.executable,
            "-c",
            "import aiohttp, yarl, multidict\n"
            "print(aiohttp.__version__, yarl.__version__, multidict.__version__)",
        ],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=True,
    )
    assert seen.stdout.split() == list(floors().values())

    upstream_port, proxy_port = free_port(), free_port()
    mock = subprocess.Popen(
        [sys.executable, "-m", "sse_proxy", "mock-upstream", "--port", str(upstream_port)],
        stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env=env,
    )
    try:
        _wait_for_port(upstream_port, mock)
        upstream = f"http://127.0.0.1:{upstream_port}"
        args = ("--upstream", upstream, "--port", str(proxy_port))
        with ServeProcess(*args, env={"PYTHONPATH": env["PYTHONPATH"]}) as serve:
            serve.wait_for("proxy.started", timeout=60)
            body = {
                "model": "gpt-4o",
                "stream": True,
                "messages": [{"role": "user", "content": "hi"}],
            }
            kind, proxied = _post(f"http://127.0.0.1:{proxy_port}/v1/chat/completions", body)
            _, direct = _post(f"{upstream}/v1/chat/completions", body)
            [summary] = serve.wait_for("stream.summary")
    finally:
        mock.terminate()
        mock.wait(20)
    assert kind.startswith("text/event-stream")
    assert proxied.endswith(b"data: [DONE]\n\n")
    assert proxied == direct
    assert summary["verdict"] == "ok", summary
