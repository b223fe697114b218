"""Install the pinned clients and regenerate docs/conformance.md (minutes, by hand).

    python3 conformance/run.py              # install what is missing, run all, write the page
    python3 conformance/run.py --only openai-python,browser-fetch-chromium   # some rows
    python3 conformance/run.py --check NAME ...   # run NAME and compare with the page
    python3 conformance/run.py --stalls     # only the time boundary: rewrite its section
    python3 conformance/run.py --mcp        # only the MCP clients: rewrite their section
    python3 conformance/run.py --resume     # only the connection boundary: rewrite its section

The Python clients go into conformance/.venv (requirements.txt; the MCP SDK's two lines into
.venv-mcp and .venv-mcp1, as one environment cannot hold two versions of a package), the
Node ones into conformance/node_modules (package.json and its lock file, `npm ci`); all
git-ignored, never the project's own environment. Each client runs under `sse-proxy
test-client` (every group, one seed) and its JSON report lands in conformance/out/; the
page is made from the reports. The MCP clients (``--dialect mcp``, a row per revision the
client speaks) have a section of their own, their stalls runs and their drops (the
``resume`` group, ``--resume``, as the client comes: ``<row>.resume.json``) in it. The ``stalls`` group
runs apart, twice per client (``--patience 6``): as the client comes, and with its own
timeout setting at 1.5 s (``CONFORMANCE_TIMEOUT=1.5``; a browser's: the
``fixed_script``), so the page says what each does by default and what its setting fixes.
The ``resume`` group runs apart too, with clients written to resume (``RESUMERS``: the
browsers' EventSource, the ``eventsource`` package, fetch-event-source, the openai SDKs'
Responses resume by hand and by their helpers, the google-genai SDKs' Interactions resume by
hand), once as each library comes and, where a caller must add a fix, once with it
(``CONFORMANCE_RESUME_FIX=1``); ``--resume --only`` takes their names.
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
VENVS: dict[str, str] = {
    ".venv": "requirements.txt",
    ".venv-mcp": "requirements-mcp.txt",
    ".venv-mcp1": "requirements-mcp1.txt",
}
"""Each Python venv in conformance/ and the pinned requirements it is made from."""


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
    fix: str = ""
    """The client's own timeout setting, as the stalls table names it (set from
    ``CONFORMANCE_TIMEOUT``, or the ``fixed_script``'s); "" when it has none."""
    fixed_script: str | None = None
    """A browser client's script with that setting (a page has no environment)."""
    venv: str = ".venv"
    """A Python client's venv in conformance/ (:data:`VENVS`)."""
    revision: str | None = None
    """An MCP client's protocol revision (the row's; the script is told it)."""
    pending: str = ""
    """Why the row cannot run yet ("": it runs); the page says so instead of a verdict."""
    note: str = ""
    """The stem of its bug note in docs/bugs/ when rows share one ("": the row's name)."""

    def python(self) -> Path:
        return HERE / self.venv / "bin" / "python"


def _py(script: str) -> tuple[str, ...]:
    return ("python", f"clients/{script}")


def _node(script: str) -> tuple[str, ...]:
    return ("node", f"clients/{script}")


CLIENTS: tuple[Client, ...] = (
    Client(
        "openai-python",
        "openai",
        "Python",
        "openai",
        "openai",
        _py("openai_python.py"),
        fix="OpenAI(timeout=1.5) (httpx, per read)",
    ),
    Client(
        "openai-node",
        "openai",
        "Node",
        "openai",
        "openai",
        _node("openai_node.mjs"),
        fix="new OpenAI({timeout: 1500})",
    ),
    Client(
        "anthropic-python",
        "anthropic",
        "Python",
        "anthropic",
        "anthropic",
        _py("anthropic_python.py"),
        fix="Anthropic(timeout=1.5) (httpx, per read)",
    ),
    Client(
        "anthropic-node",
        "@anthropic-ai/sdk (TypeScript)",
        "Node",
        "@anthropic-ai/sdk",
        "anthropic",
        _node("anthropic_node.mjs"),
        fix="new Anthropic({timeout: 1500})",
    ),
    Client(
        "google-genai-python",
        "google-genai",
        "Python",
        "google-genai",
        "gemini",
        _py("google_genai_python.py"),
        fix="HttpOptions(timeout=1500)",
    ),
    Client(
        "google-genai-node",
        "@google/genai",
        "Node",
        "@google/genai",
        "gemini",
        _node("google_genai_node.mjs"),
        fix="httpOptions: {timeout: 1500}",
    ),
    Client(
        "httpx-sse",
        "httpx-sse",
        "Python",
        "httpx-sse",
        "openai",
        _py("httpx_sse_python.py"),
        parser_only=True,
        fix="httpx.Client(timeout=1.5) (per read)",
    ),
    Client(
        "sseclient-py",
        "sseclient-py",
        "Python",
        "sseclient-py",
        "openai",
        _py("sseclient_python.py"),
        parser_only=True,
        fix="requests timeout=1.5 (connect, read)",
    ),
    Client(
        "aiohttp-sse-client",
        "aiohttp-sse-client",
        "Python",
        "aiohttp-sse-client",
        "openai",
        _py("aiohttp_sse_client_python.py"),
        parser_only=True,
        fix="ClientTimeout(sock_read=1.5)",
    ),
    Client(
        "langchain-openai",
        "langchain-openai (ChatOpenAI)",
        "Python",
        "langchain-openai",
        "openai",
        _py("langchain_openai_python.py"),
        fix="ChatOpenAI(timeout=1.5)",
    ),
    Client(
        "langchain-anthropic",
        "langchain-anthropic (ChatAnthropic)",
        "Python",
        "langchain-anthropic",
        "anthropic",
        _py("langchain_anthropic_python.py"),
        fix="ChatAnthropic(default_request_timeout=1.5)",
    ),
    Client(
        "eventsource-parser",
        "eventsource-parser",
        "Node",
        "eventsource-parser",
        "openai",
        _node("eventsource_parser_node.mjs"),
        parser_only=True,
        fix="fetch signal: AbortSignal.timeout(1500)",
    ),
    Client(
        "eventsource",
        "eventsource",
        "Node",
        "eventsource",
        "openai",
        _node("eventsource_node.mjs"),
        fix="none: a watchdog timer (1.5 s) that closes it",
    ),
    Client(
        "fetch-event-source",
        "@microsoft/fetch-event-source",
        "Node",
        "@microsoft/fetch-event-source",
        "openai",
        _node("fetch_event_source_node.mjs"),
        fix="signal: AbortSignal.timeout(1500)",
    ),
    Client(
        "vercel-ai",
        "ai + @ai-sdk/openai (streamText)",
        "Node",
        "ai",
        "openai",
        _node("vercel_ai_node.mjs"),
        fix="abortSignal: AbortSignal.timeout(1500)",
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
            fix=fix,
            fixed_script=f"clients/browser/{fixed}",
        )
        for browser in ("chromium", "firefox")
        for kind, title, dialect, script, fix, fixed in (
            (
                "eventsource",
                "EventSource (the browser's own)",
                "text",
                "event_source.mjs",
                "none: a watchdog timer (1.5 s) that closes it",
                "event_source_watchdog.mjs",
            ),
            (
                "fetch",
                "fetch + getReader + TextDecoder (stream: true)",
                "openai",
                "fetch_reader.mjs",
                "fetch signal: AbortSignal.timeout(1500)",
                "fetch_reader_timeout.mjs",
            ),
        )
    ),
)
MCP_CLIENTS: tuple[Client, ...] = (
    Client(
        "mcp-python-2025-11-25",
        "mcp (Client)",
        "Python",
        "mcp",
        "mcp",
        _py("mcp_python.py"),
        fix="call_tool(read_timeout_seconds=1.5)",
        venv=".venv-mcp",
        note="mcp-python",
        revision="2025-11-25",
    ),
    Client(
        "mcp-python-2026-07-28",
        "mcp (Client, mode pinned)",
        "Python",
        "mcp",
        "mcp",
        (*_py("mcp_python.py"), "2026-07-28"),
        fix="call_tool(read_timeout_seconds=1.5)",
        venv=".venv-mcp",
        note="mcp-python",
        revision="2026-07-28",
    ),
    Client(
        "mcp1-python-2025-11-25",
        "mcp 1.x (ClientSession)",
        "Python",
        "mcp",
        "mcp",
        _py("mcp1_python.py"),
        fix="call_tool(read_timeout_seconds=timedelta(seconds=1.5))",
        venv=".venv-mcp1",
        note="mcp1-python",
        revision="2025-11-25",
    ),
    Client(
        "mcp-sdk-node-2025-11-25",
        "@modelcontextprotocol/sdk",
        "Node",
        "@modelcontextprotocol/sdk",
        "mcp",
        _node("mcp_sdk_node.mjs"),
        fix="callTool(..., {timeout: 1500})",
        note="mcp-sdk-node",
        revision="2025-11-25",
    ),
    Client(
        "mcp-client-node-2025-11-25",
        "@modelcontextprotocol/client",
        "Node",
        "@modelcontextprotocol/client",
        "mcp",
        _node("mcp_client_node.mjs"),
        fix="callTool(..., {timeout: 1500})",
        note="mcp-client-node",
        revision="2025-11-25",
    ),
    Client(
        "mcp-client-node-2026-07-28",
        "@modelcontextprotocol/client (versionNegotiation pinned)",
        "Node",
        "@modelcontextprotocol/client",
        "mcp",
        (*_node("mcp_client_node.mjs"), "2026-07-28"),
        fix="callTool(..., {timeout: 1500})",
        note="mcp-client-node",
        revision="2026-07-28",
    ),
)
"""The MCP section's rows: the official SDKs, one row per revision each speaks."""
BY_NAME = {c.name: c for c in (*CLIENTS, *MCP_CLIENTS)}


@dataclass(frozen=True)
class Resumer:
    """One row of the connection boundary: a client written to resume a stream, as its
    library lets it (a client that would not resume in real use is not made to)."""

    name: str
    client: str
    """The matrix row of its library (title, runtime, version)."""
    how: str
    """How it resumes, as the section's table says."""
    dialect: str  # text: by Last-Event-ID; responses: by starting_after; gemini: event_id
    run: tuple[str, ...] = ()
    script: str | None = None  # a browser's (the row's browser)
    fix: str = ""
    """What a caller must add, run apart with ``CONFORMANCE_RESUME_FIX=1``; "" when none."""


RESUMERS: tuple[Resumer, ...] = (
    *(
        Resumer(
            f"browser-eventsource-{browser}",
            f"browser-eventsource-{browser}",
            "`new EventSource(url)`: by itself",
            "text",
            script="clients/browser/event_source_resume.mjs",
        )
        for browser in ("chromium", "firefox")
    ),
    Resumer(
        "eventsource",
        "eventsource",
        "`new EventSource(url)`: by itself (its reconnect timer is `unref()`'d: a script "
        "keeps Node alive until the end)",
        "text",
        _node("eventsource_resume_node.mjs"),
    ),
    Resumer(
        "fetch-event-source",
        "fetch-event-source",
        "`fetchEventSource` as its README shows (`onclose` and `onerror` retry)",
        "text",
        _node("fetch_event_source_resume_node.mjs"),
        fix="`onopen` stops at a 204",
    ),
    Resumer(
        "openai-python-retrieve",
        "openai-python",
        "by hand: `responses.retrieve(id, stream=True, starting_after=seq)`",
        "responses",
        _py("openai_responses_resume_python.py"),
    ),
    Resumer(
        "openai-python-helper",
        "openai-python",
        "its helper: `responses.stream(response_id=id, starting_after=seq)`",
        "responses",
        _py("openai_responses_helper_python.py"),
    ),
    Resumer(
        "openai-node-retrieve",
        "openai-node",
        "by hand: `responses.retrieve(id, {stream: true, starting_after: seq})`",
        "responses",
        _node("openai_responses_resume_node.mjs"),
    ),
    Resumer(
        "openai-node-helper",
        "openai-node",
        "its helper: `responses.stream({response_id: id, starting_after: seq})`",
        "responses",
        _node("openai_responses_helper_node.mjs"),
    ),
    Resumer(
        "google-genai-python-interactions",
        "google-genai-python",
        "by hand: `interactions.get(id, stream=True, last_event_id=event_id)`",
        "gemini",
        _py("google_genai_interactions_resume_python.py"),
    ),
    Resumer(
        "google-genai-node-interactions",
        "google-genai-node",
        "by hand: `interactions.get(id, {stream: true, last_event_id})`",
        "gemini",
        _node("google_genai_interactions_resume_node.mjs"),
    ),
)
RESUMER_BY_NAME = {r.name: r for r in RESUMERS}
PATIENCE = 6
"""``--patience`` of the stalls runs: short, so that the matrix finishes."""
FIX_SECONDS = 1.5
"""The clients' own timeout setting in the fixed stalls run (``CONFORMANCE_TIMEOUT``)."""


def install(rows: Sequence[Client] = (*CLIENTS, *MCP_CLIENTS)) -> None:
    """The pinned clients of ``rows``, where they are missing: their venvs and npm ci, in
    this folder."""
    for venv in sorted({c.venv for c in rows if c.runtime == "Python"}):
        python = HERE / venv / "bin" / "python"
        marker = HERE / venv / ".installed"
        wanted = (HERE / VENVS[venv]).read_text()
        if not marker.is_file() or marker.read_text() != wanted:
            if not python.is_file():
                subprocess.run([sys.executable, "-m", "venv", str(HERE / venv)], check=True)
            subprocess.run(
                [str(python), "-m", "pip", "install", "-q", "-r", str(HERE / VENVS[venv])],
                check=True,
            )
            marker.write_text(wanted)
    if not any(c.runtime == "Node" for c in rows):
        return
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
                str(client.python()),
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
    cmd += ["--skip", "stalls,faults" if client.parser_only else "stalls"]  # (stalls: apart)
    if client.browser is not None:
        assert client.script is not None
        return [*cmd, "--browser", client.browser, "--script", client.script]
    return [*cmd, "--", *words_of(client)]


def words_of(client: Client) -> list[str]:
    """The client's command, its venv's python for a Python one."""
    words = list(client.run)
    if words[0] == "python":
        words[0] = str(client.python())
    return words


def stalls_command_of(client: Client, report: Path, fixed: bool) -> list[str]:
    """The ``stalls`` group alone, short; ``fixed``: with the client's timeout setting."""
    cmd = [sys.executable, "-m", "sse_proxy", "test-client", "--dialect", client.dialect]
    cmd += ["--only", "stalls", "--patience", str(PATIENCE), "--jobs", "2"]
    cmd += ["--timeout", "60"]  # (a client's start-up, langchain's: a loaded machine's 20 s)
    cmd += ["--report", str(report)]
    if client.browser is not None:
        script = client.fixed_script if fixed else client.script
        assert script is not None
        return [*cmd, "--browser", client.browser, "--script", script]
    return [*cmd, "--", *words_of(client)]


def resume_command_of(resumer: Resumer, report: Path) -> list[str]:
    """The ``resume`` group alone, against ``resumer``."""
    cmd = [sys.executable, "-m", "sse_proxy", "test-client", "--dialect", resumer.dialect]
    cmd += ["--resume", "--only", "resume", "--seeds", "1", "--jobs", "2", "--keep-going"]
    cmd += ["--timeout", "60", "--report", str(report)]
    client = BY_NAME[resumer.client]
    if client.browser is not None:
        assert resumer.script is not None
        return [*cmd, "--browser", client.browser, "--script", resumer.script]
    words = list(resumer.run)
    if words[0] == "python":
        words[0] = str(VENV / "bin" / "python")
    return [*cmd, "--", *words]


def mcp_resume_command_of(client: Client, report: Path) -> list[str]:
    """The ``resume`` group alone against an MCP row: its drops, as the client comes."""
    cmd = [sys.executable, "-m", "sse_proxy", "test-client", "--dialect", "mcp", "--resume"]
    cmd += ["--only", "resume", "--seeds", "1", "--jobs", "2", "--keep-going"]
    return [*cmd, "--report", str(report), "--", *words_of(client)]


def run_mcp_resume(client: Client) -> dict[str, Any]:
    """The MCP row's resume run (``<name>.resume.json``); its JSON report."""
    name = f"{client.name}.resume.json"
    return run_client(client, name, mcp_resume_command_of(client, OUT / name))


def run_resume(resumer: Resumer, fixed: bool) -> dict[str, Any]:
    """The resume run of ``resumer`` (as it comes, or with its ``fix``); its JSON report."""
    name = f"{resumer.name}.resume{'-fixed' if fixed else ''}.json"
    extra = {"CONFORMANCE_RESUME_FIX": "1"} if fixed else {}
    command = resume_command_of(resumer, OUT / name)
    return run_client(BY_NAME[resumer.client], name, command, extra)


def run_stalls(client: Client, fixed: bool) -> dict[str, Any]:
    """The stalls run of ``client`` (as it comes, or ``fixed``); its JSON report."""
    name = f"{client.name}.stalls{'-fixed' if fixed else ''}.json"
    extra = {"CONFORMANCE_TIMEOUT": str(FIX_SECONDS)} if fixed else {}
    return run_client(client, name, stalls_command_of(client, OUT / name, fixed), extra)


def run_client(
    client: Client,
    name: str | None = None,
    command: list[str] | None = None,
    extra: dict[str, str] | None = None,
) -> dict[str, Any]:
    """Run the whole harness against ``client`` (or ``command``, its report ``name``);
    its JSON report."""
    OUT.mkdir(exist_ok=True)
    report = OUT / (name or f"{client.name}.json")
    report.unlink(missing_ok=True)
    bin_ = client.python().parent
    env = {**os.environ, "PATH": f"{bin_}{os.pathsep}{os.environ.get('PATH', '')}"}
    env.update(extra or {})
    ran = subprocess.run(
        command or command_of(client, report),
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


def run_all_resume(resumer: Resumer) -> None:
    """``resumer``'s resume runs: as it comes, and with its fix when it has one."""
    run_resume(resumer, fixed=False)
    if resumer.fix:
        run_resume(resumer, fixed=True)


def resume_section_from_out() -> str:
    """The connection boundary's section, from the resume reports in out/ ("" if none)."""
    from conformance.page import resume_section

    def load(suffix: str) -> dict[str, Any]:
        files = {r.name: OUT / f"{r.name}.resume{suffix}.json" for r in RESUMERS}
        return {n: json.loads(f.read_text()) for n, f in files.items() if f.is_file()}

    reports, fixed = load(""), load("-fixed")
    if not reports:
        return ""
    versions = {r.client: version_of(BY_NAME[r.client]) for r in RESUMERS if r.name in reports}
    return resume_section(RESUMERS, BY_NAME, reports, fixed, versions, BUGS)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--only", help="comma-separated row names (default: all)")
    parser.add_argument("--no-install", action="store_true", help="use what is installed")
    parser.add_argument("--page", action="store_true", help="only write the page from out/")
    parser.add_argument(
        "--stalls",
        action="store_true",
        help="run only the stalls group (twice a client) and rewrite the page's section",
    )
    parser.add_argument(
        "--mcp",
        action="store_true",
        help="run only the MCP clients (every group, stalls twice) and rewrite their section",
    )
    parser.add_argument(
        "--resume",
        action="store_true",
        help="run only the resume group (the RESUMERS; --only: theirs) and rewrite its section",
    )
    parser.add_argument(
        "--check",
        nargs="*",
        metavar="NAME",
        help="run these rows and exit 1 when a verdict differs from the published page",
    )
    args = parser.parse_args(argv)
    if args.check is not None:
        names = args.check or [c.name for c in BY_NAME.values() if not c.pending]
    elif args.only and args.resume:  # the resumers' names: their clients' rows
        wanted = args.only.split(",")
        missing = [n for n in wanted if n not in RESUMER_BY_NAME]
        if missing:
            parser.error(
                f"no such resume row: {', '.join(missing)} (rows: {', '.join(RESUMER_BY_NAME)})"
            )
        names = list(dict.fromkeys(RESUMER_BY_NAME[n].client for n in wanted))
    elif args.only:
        names = args.only.split(",")
    else:
        rows = MCP_CLIENTS if args.mcp else CLIENTS if args.stalls else BY_NAME.values()
        names = [c.name for c in rows if not c.pending]
    unknown = [n for n in names if n not in BY_NAME]
    if unknown:
        parser.error(f"no such row: {', '.join(unknown)} (rows: {', '.join(BY_NAME)})")
    if not args.no_install and not args.page:
        install([BY_NAME[n] for n in names])
    if args.check is not None:
        from conformance.page import mcp_resume_verdicts, published, published_mcp_resume

        changed = []
        for name in names:
            got = verdicts(run_client(BY_NAME[name]))
            want = published(PAGE.read_text(), name)
            if got != want:
                changed.append(f"{name}: published {want}, now {got}")
            dropped = published_mcp_resume(PAGE.read_text(), name)
            if dropped:  # an MCP row's drops
                now = mcp_resume_verdicts(run_mcp_resume(BY_NAME[name]))
                if now != dropped:
                    changed.append(f"{name} (drops): published {dropped}, now {now}")
        print("\n".join(changed) or "every verdict as published")
        return 1 if changed else 0
    if args.resume:
        for name in args.only.split(",") if args.only else list(RESUMER_BY_NAME):
            print(f"conformance: {name} (resume)", file=sys.stderr, flush=True)
            run_all_resume(RESUMER_BY_NAME[name])
        from conformance.page import update_resume

        page = PAGE.read_text("utf-8")
        PAGE.write_text(update_resume(page, resume_section_from_out()), encoding="utf-8")
        print(f"wrote {PAGE.relative_to(ROOT)}", file=sys.stderr)
        return 0
    if not args.page and not args.stalls and not args.only and not args.mcp:
        for resumer in RESUMERS:
            print(f"conformance: {resumer.name} (resume)", file=sys.stderr, flush=True)
            run_all_resume(resumer)
    for name in [] if args.page else names:
        print(f"conformance: {name}", file=sys.stderr, flush=True)
        if not args.stalls:
            run_client(BY_NAME[name])
            if BY_NAME[name] in MCP_CLIENTS:
                run_mcp_resume(BY_NAME[name])
        for with_fix in (False, True):
            run_stalls(BY_NAME[name], with_fix)
    from conformance.page import (
        mcp_section,
        published,
        stalls_section,
        update_mcp,
        update_stalls,
        verdicts_of,
        write_page,
    )

    def load(suffix: str) -> dict[str, Any]:
        files = {c.name: OUT / f"{c.name}{suffix}.json" for c in BY_NAME.values()}
        return {n: json.loads(f.read_text()) for n, f in files.items() if f.is_file()}

    reports, stalls, fixed = load(""), load(".stalls"), load(".stalls-fixed")
    mcp_names = {c.name for c in MCP_CLIENTS}
    resumes = {n: r for n, r in load(".resume").items() if n in mcp_names}
    shown = {*reports, *stalls}
    versions = {c.name: version_of(c) for c in BY_NAME.values() if c.name in shown}
    mcp = mcp_section(
        MCP_CLIENTS, reports, stalls, fixed, versions, BUGS, PATIENCE, FIX_SECONDS, resumes
    )
    if args.mcp or (args.only and set(names) <= mcp_names):  # (only their section changed)
        PAGE.write_text(update_mcp(PAGE.read_text("utf-8"), mcp), encoding="utf-8")
        print(f"wrote the MCP section of {PAGE.relative_to(ROOT)}", file=sys.stderr)
        return 0
    llm = {n: r for n, r in stalls.items() if n not in mcp_names}
    if args.stalls:  # the other groups as published
        groups = {n: published(PAGE.read_text("utf-8"), n) for n in llm}
    else:
        groups = {n: verdicts_of(r) for n, r in reports.items()}
    section = stalls_section(CLIENTS, llm, fixed, versions, BUGS, PATIENCE, FIX_SECONDS, groups)
    if args.stalls:
        PAGE.write_text(update_stalls(PAGE.read_text("utf-8"), section), encoding="utf-8")
    else:
        write_page(
            PAGE,
            CLIENTS,
            reports,
            versions,
            datetime.date.today().isoformat(),
            BUGS,
            section,
            mcp,
            resume_section_from_out(),
        )
    print(f"wrote {PAGE.relative_to(ROOT)}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))
    raise SystemExit(main())
