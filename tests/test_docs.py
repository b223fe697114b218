"""The README and docs/ say what the code does: commands CI runs, flags the CLI accepts,
links that lead somewhere, the mock upstream's real endpoints and faults, no machine paths."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

import pytest

from sse_proxy.cli import build_parser
from sse_proxy.tools import fixtures
from sse_proxy.tools.mock_upstream import ENDPOINTS

ROOT = Path(__file__).resolve().parent.parent
README = ROOT / "README.md"
PAGES = sorted((ROOT / "docs").glob("*.md"))
DOCS = [README, *PAGES]
DEMO_COMMAND = "python3 -m venv .venv && .venv/bin/pip install -q -e . && .venv/bin/sse-proxy demo"
OTHER_TOOLS_FLAGS = frozenset(
    {
        "--build-arg",  # docker build
        "--check",  # ruff format --check
        "--stalls",  # conformance/run.py
        "--differential",  # python -m fuzz.fuzz_core
        "--minutes",
        "--peers",  # python -m bench.bench_proxy
        "--pin",
        "--quick",  # python -m bench.bench_scale
        "--modes",
        "--contenders",
        "--previous",  # kubectl logs
        "--repeat",
        "--spread-ms",  # python -m bench.burst_pair
        "--pace-ms",
        "--gap-ms",
        "--events",
        "--bursts",
        "--sse-log-level",
        "--window-cpu",
        "--window-opcodes",
        "--window",  # python -m bench.instructions
        "--simulate",
        "--rm",  # docker run
        "--stop-timeout",
        "--test",  # node --test, in docs/javascript.md
        "--test-name-pattern",
        "--save-dev",  # npm install
        "--allow-net",  # deno run
        "--allow-env",
    }
)
_FENCE = re.compile(r"^```.*?^```", re.M | re.S)
_LINK = re.compile(r"!?\[[^\]]*\]\(([^)\s]+)\)")
_FLAG = re.compile(r"(?<![\w-])--[a-z][a-z0-9-]*")
_REPO_PATH = re.compile(
    r"(?<![\w./-])((?:sse_proxy|tests|bench|fuzz|scripts|config|deploy|docs)/[\w./-]*\w\.[a-z]+)\b"
)
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


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
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


@pytest.mark.parametrize("path", DOCS, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_files_named_in_the_docs_exist(path: Path) -> None:
    """A file of the repository the docs name (`tests/...py`, `sse_proxy/...py`, ...) is there."""
    named = _REPO_PATH.findall(_text(path))
    missing = sorted({p for p in named if not (ROOT / p).exists()})
    assert not missing, missing


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
    [*DOCS, *sorted((ROOT / "docs").glob("*.sh"))],
    ids=lambda p: p.relative_to(ROOT).as_posix(),
)
def test_docs_name_no_machine_paths(path: Path) -> None:
    found = re.findall(r"(?<![\w.~])/(?:work|tmp|root|home)/\S*", _text(path))
    assert not found, found


def test_documented_flags_exist() -> None:
    """Every `sse-proxy CMD --flag` shown is a flag of CMD; any other --flag named in the
    docs is one of sse-proxy's (or of the few other tools the docs run)."""
    options = _options()
    known = set().union(*options.values()) | OTHER_TOOLS_FLAGS
    wrong: list[str] = []
    for path in DOCS:
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
                    f"{path.name}: sse-proxy {command} {flag}"
                    for flag in _FLAG.findall(tail)
                    if flag not in options[command]
                ]
        wrong += [f"{path.name}: {f}" for f in _FLAG.findall(text) if f not in known]
    assert not wrong, sorted(set(wrong))


def _mock_section() -> str:
    readme = _text(README)
    start = readme.index("\n## The mock upstream on its own\n")
    return readme[start : readme.index("\n## ", start + 1)]


def test_readme_lists_the_mock_upstreams_faults() -> None:
    section = _mock_section()
    table = section[section.index("| `--fault` |") :].split("\n\n", 1)[0]
    rows = re.findall(r"^\| `([a-z_0-9]+)` \|", table, re.M)
    assert rows == list(fixtures.KINDS)  # the faults in the bytes, and the reset


def test_readme_lists_the_mock_upstreams_endpoints() -> None:
    section = _mock_section()
    for endpoint in ENDPOINTS:
        path = endpoint.split()[1]
        assert f"{path}`" in section, endpoint


def test_test_client_docs_list_every_variant_with_its_severity() -> None:
    """The variants table of docs/test-client.md: one row per shape and token variant, in
    the chaos names' order, each with the severity the report gives it."""
    from sse_proxy.tools.fixtures.variants import VARIANTS

    text = _text(ROOT / "docs" / "test-client.md")
    rows = re.findall(r"^\| `([a-z_0-9]+)` \| [^|]+ \| .+ \| (real|spec) \|$", text, re.M)
    assert rows == [(name, v.severity) for name, v in VARIANTS.items()]


def test_monitoring_docs_list_every_alert() -> None:
    from sse_proxy.core import alerts

    text = _text(ROOT / "docs" / "monitoring.md")
    classes = [getattr(alerts, n) for n in alerts.__all__]
    names = [c.name for c in classes if isinstance(c, type) and issubclass(c, alerts.Alert)]
    names = [n for n in names if n != alerts.Alert.name]
    assert "sse.tool_call_invalid" in names
    assert all(f"`{n}`" in text for n in names), names
