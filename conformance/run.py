"""Install the pinned clients and regenerate docs/conformance.md (minutes, by hand).

    python3 conformance/run.py              # install what is missing, run all, write the page
    python3 conformance/run.py --only openai-python,browser-fetch-chromium   # some rows
    python3 conformance/run.py --check NAME ...   # run NAME and compare with the page

The Python clients go into conformance/.venv (requirements.txt), the Node ones into
conformance/node_modules (package.json and its lock file, `npm ci`); both git-ignored, never
the project's own environment. Each client runs under `sse-proxy test-client` (every group,
one seed) and its JSON report lands in conformance/out/; the page is made from the reports.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent
OUT = HERE / "out"
PAGE = ROOT / "docs" / "conformance.md"
BUGS = ROOT / "docs" / "bugs"
VENV = HERE / ".venv"


@dataclass(frozen=True)
class Client:
    """One row of the matrix: a client, how it runs, and the dialect it streams."""

    name: str
    title: str
    runtime: str
    package: str | None  # whose version the row shows (PyPI or npm name)
    dialect: str
    run: tuple[str, ...] = ()  # a command, run in conformance/ (python: the venv's)
    browser: str | None = None
    script: str | None = None
    parser_only: bool = False
    """A parser, not a client: ending on a broken stream is its caller's job, so the
    ``faults`` group is not run (``--skip faults``)."""


def _py(script: str) -> tuple[str, ...]:
    return ("python", f"clients/{script}")


def _node(script: str) -> tuple[str, ...]:
    return ("node", f"clients/{script}")


CLIENTS: tuple[Client, ...] = (
    Client("openai-python", "openai", "Python", "openai", "openai", _py("openai_python.py")),
    Client("openai-node", "openai", "Node", "openai", "openai", _node("openai_node.mjs")),
    Client(
        "anthropic-python",
        "anthropic",
        "Python",
        "anthropic",
        "anthropic",
        _py("anthropic_python.py"),
    ),
    Client(
        "anthropic-node",
        "@anthropic-ai/sdk (TypeScript)",
        "Node",
        "@anthropic-ai/sdk",
        "anthropic",
        _node("anthropic_node.mjs"),
    ),
    Client(
        "google-genai-python",
        "google-genai",
        "Python",
        "google-genai",
        "gemini",
        _py("google_genai_python.py"),
    ),
    Client(
        "google-genai-node",
        "@google/genai",
        "Node",
        "@google/genai",
        "gemini",
        _node("google_genai_node.mjs"),
    ),
    Client(
        "httpx-sse",
        "httpx-sse",
        "Python",
        "httpx-sse",
        "openai",
        _py("httpx_sse_python.py"),
        parser_only=True,
    ),
    Client(
        "sseclient-py",
        "sseclient-py",
        "Python",
        "sseclient-py",
        "openai",
        _py("sseclient_python.py"),
        parser_only=True,
    ),
    Client(
        "aiohttp-sse-client",
        "aiohttp-sse-client",
        "Python",
        "aiohttp-sse-client",
        "openai",
        _py("aiohttp_sse_client_python.py"),
        parser_only=True,
    ),
    Client(
        "langchain-openai",
        "langchain-openai (ChatOpenAI)",
        "Python",
        "langchain-openai",
        "openai",
        _py("langchain_openai_python.py"),
    ),
    Client(
        "langchain-anthropic",
        "langchain-anthropic (ChatAnthropic)",
        "Python",
        "langchain-anthropic",
        "anthropic",
        _py("langchain_anthropic_python.py"),
    ),
    Client(
        "eventsource-parser",
        "eventsource-parser",
        "Node",
        "eventsource-parser",
        "openai",
        _node("eventsource_parser_node.mjs"),
        parser_only=True,
    ),
    Client(
        "eventsource",
        "eventsource",
        "Node",
        "eventsource",
        "openai",
        _node("eventsource_node.mjs"),
    ),
    Client(
        "fetch-event-source",
        "@microsoft/fetch-event-source",
        "Node",
        "@microsoft/fetch-event-source",
        "openai",
        _node("fetch_event_source_node.mjs"),
    ),
    Client(
        "vercel-ai",
        "ai + @ai-sdk/openai (streamText)",
        "Node",
        "ai",
        "openai",
        _node("vercel_ai_node.mjs"),
    ),
    *(
        Client(
            f"browser-{kind}-{browser}",
            title,
            browser.capitalize(),
            browser,
            dialect,
            browser=browser,
            script=f"clients/browser/{script}",
            parser_only=kind == "fetch",
        )
        for browser in ("chromium", "firefox")
        for kind, title, dialect, script in (
            ("eventsource", "EventSource (the browser's own)", "text", "event_source.mjs"),
            (
                "fetch",
                "fetch + getReader + TextDecoder (stream: true)",
                "openai",
                "fetch_reader.mjs",
            ),
        )
    ),
)
BY_NAME = {c.name: c for c in CLIENTS}


def install() -> None:
    """The pinned clients, where they are missing: a venv and npm ci, in this folder."""
    python = VENV / "bin" / "python"
    marker = VENV / ".installed"
    wanted = (HERE / "requirements.txt").read_text()
    if not marker.is_file() or marker.read_text() != wanted:
        if not python.is_file():
            subprocess.run([sys.executable, "-m", "venv", str(VENV)], check=True)
        subprocess.run(
            [str(python), "-m", "pip", "install", "-q", "-r", str(HERE / "requirements.txt")],
            check=True,
        )
        marker.write_text(wanted)
    lock = HERE / "package-lock.json"
    stamp = HERE / "node_modules" / ".sse-proxy-lock"  # as scripts/js-deps.sh leaves it
    if not stamp.is_file() or stamp.read_text() != lock.read_text():
        subprocess.run(["npm", "ci", "--no-audit", "--no-fund", "--silent"], cwd=HERE, check=True)
        stamp.write_text(lock.read_text())


def version_of(client: Client) -> str:
    """The installed version of the row's package (or the browser's)."""
    if client.browser is not None:
        exe = {"chromium": "chromium", "firefox": "firefox-esr"}[client.browser]
        found = subprocess.run(
            [exe, "--version"], capture_output=True, text=True, check=False
        ).stdout
        return next((w for w in found.split() if w[:1].isdigit()), "?")
    assert client.package is not None
    if client.runtime == "Python":
        got = subprocess.run(
            [
                str(VENV / "bin" / "python"),
                "-c",
                f"import importlib.metadata as m; print(m.version({client.package!r}))",
            ],
            capture_output=True,
            text=True,
            check=False,
        )
        return got.stdout.strip() or "?"
    meta = HERE / "node_modules" / client.package / "package.json"
    return str(json.loads(meta.read_text()).get("version", "?"))


def command_of(client: Client, report: Path) -> list[str]:
    cmd = [sys.executable, "-m", "sse_proxy", "test-client", "--dialect", client.dialect]
    cmd += ["--seeds", "1", "--jobs", "2", "--keep-going", "--report", str(report)]
    if client.parser_only:
        cmd += ["--skip", "faults"]
    if client.browser is not None:
        assert client.script is not None
        return [*cmd, "--browser", client.browser, "--script", client.script]
    words = list(client.run)
    if words[0] == "python":
        words[0] = str(VENV / "bin" / "python")
    return [*cmd, "--", *words]


def run_client(client: Client) -> dict[str, Any]:
    """Run the whole harness against ``client``; its JSON report."""
    OUT.mkdir(exist_ok=True)
    report = OUT / f"{client.name}.json"
    report.unlink(missing_ok=True)
    env = {**os.environ, "PATH": f"{VENV / 'bin'}{os.pathsep}{os.environ.get('PATH', '')}"}
    ran = subprocess.run(
        command_of(client, report),
        cwd=HERE,
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    if not report.is_file():
        raise SystemExit(f"{client.name}: no report (exit {ran.returncode}): {ran.stderr[-400:]}")
    return dict(json.loads(report.read_text()))


def verdicts(report: dict[str, Any]) -> dict[str, str]:
    """Each group's outcome in one word: pass, or the failures' outcomes."""
    out: dict[str, str] = {}
    for group, counts in report["summary"].items():
        bad = [o for o in ("wrong", "crash", "hang", "silent", "undelivered") if counts.get(o)]
        out[group] = "pass" if not bad else "+".join(bad)
    return out


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", help="comma-separated row names (default: all)")
    parser.add_argument("--no-install", action="store_true", help="use what is installed")
    parser.add_argument("--page", action="store_true", help="only write the page from out/")
    parser.add_argument(
        "--check",
        nargs="*",
        metavar="NAME",
        help="run these rows and exit 1 when a verdict differs from the published page",
    )
    args = parser.parse_args(argv)
    if not args.no_install:
        install()
    if args.check is not None:
        from conformance.page import published

        names = args.check or list(BY_NAME)
        changed = []
        for name in names:
            got = verdicts(run_client(BY_NAME[name]))
            want = published(PAGE.read_text(), name)
            if got != want:
                changed.append(f"{name}: published {want}, now {got}")
        print("\n".join(changed) or "every verdict as published")
        return 1 if changed else 0
    names = args.only.split(",") if args.only else list(BY_NAME)
    for name in [] if args.page else names:
        print(f"conformance: {name}", file=sys.stderr, flush=True)
        run_client(BY_NAME[name])
    from conformance.page import write_page

    reports = {
        c.name: json.loads((OUT / f"{c.name}.json").read_text())
        for c in CLIENTS
        if (OUT / f"{c.name}.json").is_file()
    }
    write_page(
        PAGE,
        CLIENTS,
        reports,
        {c.name: version_of(c) for c in CLIENTS if c.name in reports},
        datetime.date.today().isoformat(),
        BUGS,
    )
    print(f"wrote {PAGE.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
