"""The gateway matrix: install the pinned gateways, run each under `sse-proxy test-gateway`,
regenerate docs/gateways.md and the bug notes in docs/gateways/ (minutes, by hand).

    .venv/bin/python -m conformance.gateways                  # install, run all, write
    .venv/bin/python -m conformance.gateways --only litellm   # some gateways (or rows)
    .venv/bin/python -m conformance.gateways --page           # the page from out/ only

LiteLLM goes into conformance/gateways/litellm/.venv (requirements.txt, every dependency
pinned by constraints.txt), Portkey's gateway
into conformance/gateways/portkey/node_modules (package.json and its lock, `npm ci`); both
git-ignored, never the project's environment. nginx comes from the machine
(scripts/system-deps.sh); sse-proxy itself is this checkout. nginx and sse-proxy are the
controls: they pass every case, or test-gateway is wrong.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
OUT = ROOT / "conformance" / "out" / "gateways"
PAGE = ROOT / "docs" / "gateways.md"
NOTES = ROOT / "docs" / "gateways"
LITELLM = HERE / "litellm"
PORTKEY = HERE / "portkey"

LITELLM_KEY = "sk-gwtest-0123456789abcdef0123456789abcdef"
"""The proxy's master key: 1.108.7 refuses to start without one (and rejects well-known
ones); the client sends it as its bearer token."""
LITELLM_ENV = {
    # offline: the model cost map and the other remote files from the package's own copies
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS": "True",
    "LITELLM_LOCAL_POLICY_TEMPLATES": "True",
    "LITELLM_LOCAL_BLOG_POSTS": "True",
    "LITELLM_LOCAL_AUTOROUTER_PRESETS": "True",
    "LITELLM_TELEMETRY_DISABLED": "True",
    "DISABLE_ADMIN_UI": "True",
    "NO_DOCS": "True",
    "LITELLM_LOG": "ERROR",
    "LITELLM_MASTER_KEY": LITELLM_KEY,
}
DUMMY_OPENAI = "sk-sse-proxy-test-not-a-real-key"
DUMMY_ANTHROPIC = "sk-ant-sse-proxy-test-not-a-real-key"
ANTHROPIC_MODEL = "claude-3-5-sonnet-20241022"


@dataclass(frozen=True)
class Row:
    """One run of test-gateway: a gateway, the dialect its client speaks, what it needs."""

    gateway: str
    dialect: str
    headers: tuple[str, ...] = ()
    model: str | None = None
    note: str = ""
    tools: bool = False
    """The tool-call fixture: the answer, then two tool calls (the shapes of their deltas)."""

    @property
    def name(self) -> str:
        return f"{self.gateway}-{self.dialect}" + (f"-{self.note}" if self.note else "")


@dataclass(frozen=True)
class Gateway:
    """A gateway: how it runs (``{upstream}`` and ``{port}`` filled in by test-gateway)."""

    name: str
    title: str
    command: tuple[str, ...]
    control: bool = False
    ready_path: str | None = None
    ready_timeout: float = 120.0
    env: dict[str, str] = field(default_factory=dict)
    rows: tuple[Row, ...] = ()
    home: str = ""


def _litellm_rows() -> tuple[Row, ...]:
    auth = f"Authorization: Bearer {LITELLM_KEY}"
    return (
        Row("litellm", "openai", (auth,)),
        Row("litellm", "openai", (auth,), note="tools", tools=True),
        Row("litellm", "responses", (auth,)),
        Row("litellm", "anthropic", (auth,)),
        # the Messages adapter: an Anthropic client, an OpenAI model behind it
        Row("litellm", "anthropic", (auth,), model="gpt-4o-mini", note="openai-model"),
    )


def _portkey_rows() -> tuple[Row, ...]:
    forward = "x-portkey-forward-headers: x-gateway-case"
    host = "x-portkey-custom-host: {upstream}/v1"
    openai = ("x-portkey-provider: openai", host, forward, f"Authorization: Bearer {DUMMY_OPENAI}")
    anthropic = (
        "x-portkey-provider: anthropic",
        host,
        forward,
        f"x-api-key: {DUMMY_ANTHROPIC}",
        f"Authorization: Bearer {DUMMY_ANTHROPIC}",
        "anthropic-version: 2023-06-01",
    )
    return (
        Row("portkey", "openai", openai),
        Row("portkey", "openai", openai, note="tools", tools=True),
        Row("portkey", "responses", openai),
        Row("portkey", "anthropic", anthropic),
        # its translation: an OpenAI Chat client, an Anthropic provider behind it
        Row("portkey", "openai", anthropic, model=ANTHROPIC_MODEL, note="anthropic-provider"),
    )


def _controls(name: str) -> tuple[Row, ...]:
    return (
        *(Row(name, d) for d in ("openai", "responses", "anthropic")),
        Row(name, "openai", note="tools", tools=True),
    )


GATEWAYS: tuple[Gateway, ...] = (
    Gateway(
        "sse-proxy",
        "sse-proxy serve",
        (
            sys.executable,
            "-m",
            "sse_proxy",
            "serve",
            "--upstream",
            "{upstream}",
            "--port",
            "{port}",
        ),
        control=True,
        rows=_controls("sse-proxy"),
        home="https://github.com/",
    ),
    Gateway(
        "nginx",
        "nginx, proxy_buffering off",
        (sys.executable, "-m", "tests.tools.gateways.nginx_gateway"),
        control=True,
        rows=_controls("nginx"),
        home="https://nginx.org/",
    ),
    Gateway(
        "litellm",
        "LiteLLM proxy",
        (
            "env",
            "LITELLM_OPENAI_BASE={upstream}/v1",
            "PYTHONPATH=",
            str(LITELLM / ".venv" / "bin" / "litellm"),
            "--config",
            str(LITELLM / "config.yaml"),
            "--host",
            "127.0.0.1",
            "--port",
            "{port}",
        ),
        ready_path="/health/readiness",
        ready_timeout=300.0,
        env=LITELLM_ENV,
        rows=_litellm_rows(),
        home="https://github.com/BerriAI/litellm",
    ),
    Gateway(
        "portkey",
        "Portkey AI gateway",
        (
            "node",
            str(PORTKEY / "node_modules" / "@portkey-ai" / "gateway" / "build" / "start-server.js"),
            "--port={port}",
            "--headless",
        ),
        ready_path="/",
        rows=_portkey_rows(),
        home="https://github.com/Portkey-AI/gateway",
    ),
)
BY_NAME = {g.name: g for g in GATEWAYS}
ROWS = {r.name: r for g in GATEWAYS for r in g.rows}


def install(names: set[str]) -> None:
    """The pinned gateways among ``names``, where they are missing."""
    if "litellm" in names:
        venv = LITELLM / ".venv"
        marker = venv / ".installed"
        wanted = (LITELLM / "requirements.txt").read_text() + (
            LITELLM / "constraints.txt"
        ).read_text()
        if not marker.is_file() or marker.read_text() != wanted:
            if not (venv / "bin" / "python").is_file():
                subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
            pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
            pins = ["-r", str(LITELLM / "requirements.txt"), "-c", str(LITELLM / "constraints.txt")]
            subprocess.run([*pip, *pins], check=True)
            marker.write_text(wanted)
    if "portkey" in names:
        lock = PORTKEY / "package-lock.json"
        stamp = PORTKEY / "node_modules" / ".sse-proxy-lock"
        if not stamp.is_file() or stamp.read_text() != lock.read_text():
            subprocess.run(
                ["npm", "ci", "--no-audit", "--no-fund", "--silent", "--ignore-scripts"],
                cwd=PORTKEY,
                check=True,
            )
            stamp.write_text(lock.read_text())
    if "nginx" in names and shutil.which("nginx") is None and not Path("/usr/sbin/nginx").exists():
        raise SystemExit("nginx is not installed: bash scripts/system-deps.sh")


def _run(cmd: list[str]) -> str:
    got = subprocess.run(cmd, capture_output=True, text=True, check=False)
    return (got.stdout + got.stderr).strip()


def versions() -> dict[str, str]:
    """The version of each gateway, as installed."""
    from sse_proxy import __version__

    out = {"sse-proxy": __version__}
    ngx = _run(["nginx", "-v"]) if shutil.which("nginx") else _run(["/usr/sbin/nginx", "-v"])
    out["nginx"] = ngx.rsplit("/", 1)[-1] if "/" in ngx else "?"
    py = LITELLM / ".venv" / "bin" / "python"
    if py.is_file():
        out["litellm"] = _run(
            [str(py), "-c", "import importlib.metadata as m; print(m.version('litellm'))"]
        )
    meta = PORTKEY / "node_modules" / "@portkey-ai" / "gateway" / "package.json"
    hono = PORTKEY / "node_modules" / "@hono" / "node-server" / "package.json"
    if meta.is_file():
        out["portkey"] = str(json.loads(meta.read_text()).get("version", "?"))
        if hono.is_file():
            out["portkey"] += (
                f" (@hono/node-server {json.loads(hono.read_text()).get('version', '?')})"
            )
    return out


def command_of(row: Row, report: Path, log: Path) -> list[str]:
    gateway = BY_NAME[row.gateway]
    cmd = [sys.executable, "-m", "sse_proxy", "test-gateway", "--dialect", row.dialect]
    cmd += ["--report", str(report), "--gateway-log", str(log), "--jobs", "2"]
    cmd += ["--ready-timeout", f"{gateway.ready_timeout:g}"]
    if gateway.ready_path:
        cmd += ["--ready-path", gateway.ready_path]
    for header in row.headers:
        cmd += ["--header", header]
    if row.model:
        cmd += ["--model", row.model]
    if row.tools:
        cmd.append("--tools")
    return [*cmd, "--", *gateway.command]


def run_row(row: Row) -> dict[str, Any]:
    """test-gateway on ``row``; its JSON report."""
    OUT.mkdir(parents=True, exist_ok=True)
    report, log = OUT / f"{row.name}.json", OUT / f"{row.name}.log"
    report.unlink(missing_ok=True)
    gateway = BY_NAME[row.gateway]
    env = {**os.environ, **gateway.env, "PYTHONPATH": str(ROOT)}
    ran = subprocess.run(
        command_of(row, report, log), cwd=ROOT, env=env, capture_output=True, text=True, check=False
    )
    (OUT / f"{row.name}.txt").write_text(ran.stdout + ran.stderr, encoding="utf-8")
    if not report.is_file():
        raise SystemExit(f"{row.name}: no report (exit {ran.returncode}): {ran.stderr[-600:]}")
    return dict(json.loads(report.read_text()))
