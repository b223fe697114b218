"""Where a client crashed: the installed package, its version and the line, from stderr.

Python tracebacks list the innermost frame last; Node stacks list it first. The innermost
frame outside the standard library decides: when it lies in site-packages (or
node_modules) the crash is the library's; when it is the user's own file, there is
nothing to attribute. A Python file is attributed to the distribution that installed
*that file*, as the installed files' records say (``RECORD``, read through
``importlib.metadata``), not to the first distribution that shares its top-level folder:
``google/genai/_api_client.py`` is google-genai's although google-auth installs under
``google/`` too.
"""

from __future__ import annotations

import functools
import importlib.metadata
import json
import re
from dataclasses import dataclass
from pathlib import Path

__all__ = ["CrashSite", "attribute_crash"]


@dataclass(frozen=True, slots=True)
class CrashSite:
    """Where a crash happened when it happened inside an installed package."""

    package: str
    version: str | None
    file: str
    line: int

    def __str__(self) -> str:
        version = f" {self.version}" if self.version else ""
        return f"{self.package}{version}, {self.file}:{self.line}"


_PY_FRAME = re.compile(r'File "(?P<path>[^"]+)", line (?P<line>\d+)')
_JS_FRAME = re.compile(r"(?:\(|at )(?:file://)?(?P<path>/[^():\s]+):(?P<line>\d+):\d+\)?")
_PY_SITE = re.compile(r"^(?P<site>.*/(?:site|dist)-packages)/(?P<rel>.+)$")
_PY_STDLIB = re.compile(r"/lib/python3\.\d+/(?!site-packages|dist-packages)")


def attribute_crash(stderr: str) -> CrashSite | None:
    """The installed package a crash happened in, from the traceback in ``stderr``."""
    if "Traceback (most recent call last)" in stderr:
        frames = [(m["path"], int(m["line"])) for m in _PY_FRAME.finditer(stderr)]
        frames = [(p, n) for p, n in frames if not _PY_STDLIB.search(p) and "<" not in p]
        if not frames:
            return None
        path, line = frames[-1]
        return _python_site(path, line)
    js = [(m["path"], int(m["line"])) for m in _JS_FRAME.finditer(stderr)]
    js = [(p, n) for p, n in js if not p.startswith("node:")]
    if js:
        path, line = js[0]
        return _node_site(path, line)
    return None


def _python_site(path: str, line: int) -> CrashSite | None:
    match = _PY_SITE.match(path)
    if match is None:
        return None
    rel = match["rel"]
    owner = _owners(match["site"]).get(rel)
    if owner is None:  # not in any record (an editable install, a copied file)
        top = rel.split("/", 1)[0].removesuffix(".py")
        return CrashSite(top, None, rel, line)
    name, version = owner
    return CrashSite(name, version, rel, line)


@functools.cache
def _owners(site: str) -> dict[str, tuple[str, str | None]]:
    """Every file the distributions in ``site`` installed -> (name, version)."""
    owners: dict[str, tuple[str, str | None]] = {}
    try:
        dists = list(importlib.metadata.distributions(path=[site]))
    except OSError:
        return owners
    for dist in dists:
        try:
            files = dist.files or []
            name = dist.metadata["Name"] or dist.name
            version = dist.version
        except (OSError, KeyError, ValueError):
            continue
        for file in files:
            owners.setdefault(str(file), (name, version))
    return owners


def _node_site(path: str, line: int) -> CrashSite | None:
    marker = "/node_modules/"
    at = path.rfind(marker)
    if at < 0:
        return None
    rel = path[at + len(marker) :]
    pieces = rel.split("/")
    pkg = "/".join(pieces[:2]) if pieces[0].startswith("@") else pieces[0]
    version = None
    try:
        meta = json.loads(Path(path[: at + len(marker)] + pkg, "package.json").read_text())
        version = str(meta.get("version")) if isinstance(meta, dict) else None
    except (OSError, ValueError):
        pass
    return CrashSite(pkg, version, rel, line)
