"""The README and docs/ say what the code does: commands CI runs, flags the CLI accepts,
links that lead somewhere, the mock upstream's real endpoints and faults, no machine paths.

Every Markdown file of the repository (the READMEs of bench/, fuzz/ and deploy/, the bug
reports under docs/bugs/ too) is held to the file-level rules: its links resolve, the
repository files and modules it names exist, it names no machine path, and every
``sse-proxy CMD --flag`` it shows is a flag of CMD."""

from __future__ import annotations

import argparse
import re
import subprocess
from pathlib import Path

import pytest

from sse_proxy.cli import build_parser
from sse_proxy.tools import fixtures
from sse_proxy.tools.mock_upstream import ENDPOINTS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
DOCS = [README, *PAGES]


def _markdown_files() -> list[Path]:
    """Every Markdown file the repository tracks (installed node_modules left out)."""
    listed = subprocess.run(
        ["git", "ls-files", "*.md"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout.split()
    return [ROOT / name for name in listed if "node_modules/" not in name]


ALL_MARKDOWN = _markdown_files()
PACKAGE_DIRS = frozenset(p.name for p in (ROOT / "sse_proxy").iterdir() if p.is_dir())
"""The package's subpackages: a doc may name ``server/run.py`` for ``sse_proxy/server/run.py``."""
DEMO_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/sse-proxy demo"
OTHER_TOOLS_FLAGS = frozenset(
    {
        "--build-arg",  # docker build
        "--check",  # ruff format --check
        "--stalls",  # conformance/run.py
        "--differential",  # python -m fuzz.fuzz_core
        "--minutes",
        "--peers",  # python -m bench.bench_proxy
        "--beside",  # python -m bench.bench_observers
        "--streams",  # python -m bench.investigations.instructions
        "--inclusive",  # callgrind_annotate
        "--pin",
        "--quick",  # python -m bench.bench_scale
        "--modes",
        "--contenders",
        "--previous",  # kubectl logs
        "--repeat",
        "--spread-ms",  # python -m bench.investigations.burst_pair
        "--pace-ms",
        "--gap-ms",
        "--events",
        "--bursts",
        "--sse-log-level",
        "--window-cpu",
        "--window-opcodes",
        "--window",  # python -m bench.investigations.instructions
        "--simulate",
        "--rm",  # docker run
        "--stop-timeout",
        "--test",  # node --test, in docs/javascript.md
        "--test-name-pattern",
        "--save-dev",  # npm install
        "--allow-net",  # deno run
        "--allow-env",
        "--headless",  # Portkey's gateway, in docs/test-gateway.md and docs/gateways.md
    }
)
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
_REPO_PATH = re.compile(
    r"(?<![\w./-])((?:sse_proxy|tests|bench|fuzz|scripts|config|deploy|docs|conformance)"
    r"/[\w./-]*\w\.[a-z]+)\b"
)
_TICKED_PATH = re.compile(r"`([A-Za-z_][\w.-]*/[\w./-]*\.[A-Za-z]{1,5})(?::\d+)?`")
_MODULE = re.compile(r"python3? -m ((?:bench|fuzz|conformance)(?:\.\w+)*)")
_COMMAND = re.compile(r"sse-proxy\s+([a-z][a-z-]*|--[a-z-]+)([^|;&#`]*)")


def _text(path: Path) -> str:
    return path.read_text(encoding="utf-8")


def _code_blocks(text: str) -> list[str]:
    return [m.group(0).split("\n", 1)[1].rsplit("```", 1)[0] for m in _FENCE.finditer(text)]


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces to dashes."""
    return re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")


def _anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out: set[str] = set()
    for line in _FENCE.sub("", _text(path)).splitlines():
        if m := re.match(r"#{1,6} (.+)", line):
            slug = _slug(m.group(1))
            n = seen.get(slug, 0)
            seen[slug] = n + 1
            out.add(slug if n == 0 else f"{slug}-{n}")
    return out


def _options() -> dict[str, set[str]]:
    """Option strings by subcommand ("" for the global ones), from the real parser."""
    parser = build_parser()
    subs = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    out = {"": {s for a in parser._actions for s in a.option_strings}}
    for name, sub in subs.choices.items():
        out[name] = {s for a in sub._actions for s in a.option_strings}
    return out


def _logical_lines(text: str) -> list[str]:
    """Lines with shell continuations (a trailing backslash) joined."""
    return text.replace("\\\n", " ").splitlines()


@pytest.mark.parametrize("path", ALL_MARKDOWN, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_relative_links_lead_to_files_and_headings(path: Path) -> None:
    broken = []
    for target in _LINK.findall(_FENCE.sub("", _text(path))):
        if re.match(r"[a-z]+:", target):
            continue  # http(s), mailto: not checked offline
        file_part, _, anchor = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        if not dest.exists():
            broken.append(f"{target}: no such file")
        elif anchor and dest.suffix == ".md" and anchor not in _anchors(dest):
            broken.append(f"{target}: no heading #{anchor} in {dest.name}")
    assert not broken, broken


@pytest.mark.parametrize("path", ALL_MARKDOWN, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_files_named_in_the_docs_exist(path: Path) -> None:
    """A file of the repository the docs name (`tests/...py`, `sse_proxy/...py`, ...) is there;
    so is one named in backticks from the package (`server/run.py`, never by its old name
    `proxy/`), and a module run with `python -m bench.X`."""
    text = _text(path)
    missing = {p for p in _REPO_PATH.findall(text) if not (ROOT / p).exists()}
    for ticked in _TICKED_PATH.findall(text):
        first = ticked.split("/", 1)[0]
        if first in PACKAGE_DIRS and not (ROOT / "sse_proxy" / ticked).exists():
            missing.add(ticked)
        elif first == "proxy":
            missing.add(ticked)  # the package's old name
    for module in _MODULE.findall(text):
        where = ROOT.joinpath(*module.split("."))
        if not (where.with_suffix(".py").exists() or (where / "__main__.py").exists()):
            missing.add(f"python -m {module}")
    assert not missing, sorted(missing)


def test_every_markdown_file_is_checked() -> None:
    names = {p.relative_to(ROOT).as_posix() for p in ALL_MARKDOWN}
    assert {"README.md", "bench/README.md", "fuzz/README.md", "deploy/README.md"} <= names
    assert any(n.startswith("docs/bugs/") for n in names)
    assert not any("node_modules/" in n for n in names)


def test_readme_test_command_is_what_ci_runs() -> None:
    """The contributor's command, under its own heading, is .ci/run's command exactly."""
    ci = [ln for ln in _text(ROOT / ".ci" / "run").splitlines() if ln.strip()][-1]
    assert "pytest" in ci
    readme = _text(README)
    section = readme[readme.index("\n## Contributing\n") :]
    assert _code_blocks(section)[0].strip() == ci
    assert readme.count(ci) == 1


def test_readme_opens_with_the_demo_command() -> None:
    first = _code_blocks(_text(README))[0].strip()
    assert first == DEMO_COMMAND


def test_readme_is_a_front_page() -> None:
    lines = _text(README).splitlines()
    assert len(lines) <= 220, len(lines)


@pytest.mark.parametrize("path", PAGES, ids=lambda p: p.name)
def test_each_page_says_which_question_it_answers(path: Path) -> None:
    lines = [ln for ln in _text(path).splitlines() if ln.strip()]
    assert lines[0].startswith("# "), lines[0]
    assert lines[1].startswith("This page answers"), lines[1]


@pytest.mark.parametrize(
    "path",
    [*ALL_MARKDOWN, *sorted((ROOT / "docs").glob("*.sh"))],
    ids=lambda p: p.relative_to(ROOT).as_posix(),
)
def test_docs_name_no_machine_paths(path: Path) -> None:
    found = re.findall(r"(?<![\w.~])/(?:work|tmp|root|home)/\S*", _text(path))
    assert not found, found


def test_documented_flags_exist() -> None:
    """Every `sse-proxy CMD --flag` shown, in any Markdown file, is a flag of CMD; any other
    --flag named in the README and docs/ is one of sse-proxy's (or of the few other tools
    they run; the bench and fuzz READMEs document their commands' own flags)."""
    options = _options()
    known = set().union(*options.values()) | OTHER_TOOLS_FLAGS
    wrong: list[str] = []
    for path in ALL_MARKDOWN:
        text = _text(path)
        for line in _logical_lines(text):
            for m in _COMMAND.finditer(line):
                command, tail = m.group(1), m.group(2)
                if command.startswith("--"):
                    command, tail = "", f"{command} {tail}"
                if command not in options:
                    continue  # prose: "sse-proxy is ...", "sse-proxy installs ..."
                tail = tail.split(" -- ", 1)[0]  # test-client's CMD starts here
                wrong += [
                    f"{path.relative_to(ROOT)}: sse-proxy {command} {flag}"
                    for flag in _FLAG.findall(tail)
                    if flag not in options[command]
                ]
        if path in DOCS:
            wrong += [f"{path.name}: {f}" for f in _FLAG.findall(text) if f not in known]
    assert not wrong, sorted(set(wrong))


def _mock_section() -> str:
    return _text(ROOT / "docs" / "mock-upstream.md")


def test_the_mock_upstream_page_lists_its_faults() -> None:
    section = _mock_section()
    table = section[section.index("| `--fault` |") :].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `([a-z_0-9]+)` \|", table, re.M)
    assert rows == list(fixtures.KINDS)  # the faults in the bytes, and the reset


def test_the_mock_upstream_page_lists_its_endpoints() -> None:
    section = _mock_section()
    for endpoint in ENDPOINTS:
        path = endpoint.split()[1]
        assert f"{path}`" in section, endpoint


def test_test_client_docs_list_every_variant_with_its_severity() -> None:
    """The variants table of docs/test-client.md: one row per shape and token variant, in
    the chaos names' order, each with what a request must ask for before providers send it
    and the severity the report gives it."""
    from sse_proxy.tools.fixtures.variants import VARIANTS

    text = _text(ROOT / "docs" / "test-client.md")
    rows = re.findall(
        r"^\| `([a-z_0-9]+)` \| [^|]+ \| .+ \| (`[^`]+`|\(always\)) \| (real|spec) \|$", text, re.M
    )
    want = [
        (name, f"`{v.requires}`" if v.requires else "(always)", v.severity)
        for name, v in VARIANTS.items()
    ]
    assert rows == want


def test_monitoring_docs_list_every_alert() -> None:
    from sse_proxy.core import alerts

    text = _text(ROOT / "docs" / "monitoring.md")
    classes = [getattr(alerts, n) for n in alerts.__all__]
    names = [c.name for c in classes if isinstance(c, type) and issubclass(c, alerts.Alert)]
    names = [n for n in names if n != alerts.Alert.name]
    assert "sse.tool_call_invalid" in names
    assert all(f"`{n}`" in text for n in names), names


def _layout() -> dict[str, str]:
    """docs/internals.md's layout block, by its left-hand entry (``sse_proxy/server/``...)."""
    text = _text(ROOT / "docs" / "internals.md")
    section = text[text.index("\n## The layout\n") :]
    block = _code_blocks(section)[0]
    entries: dict[str, str] = {}
    key = ""
    for line in block.splitlines():
        rest = line
        if line and not line.startswith(" "):
            key, _, rest = line.partition(" ")
        entries[key] = entries.get(key, "") + " " + rest
    return entries


def test_the_layout_names_every_module() -> None:
    """Every module of the package is named, by its file name, in its package's entry of
    docs/internals.md's layout (a subpackage's modules in its parent's entry)."""
    entries = _layout()
    package = ROOT / "sse_proxy"
    missing = []
    for path in sorted(package.rglob("*.py")):
        rel = path.relative_to(package)
        if path.name == "__init__.py":
            continue
        key = f"sse_proxy/{rel.parts[0]}/" if len(rel.parts) > 1 else "sse_proxy/*.py"
        if not re.search(rf"(?<![\w.]){re.escape(path.name)}\b", entries.get(key, "")):
            missing.append(rel.as_posix())
    assert not missing, missing
