"""Write deploy/docker/constraints.txt: the exact versions of sse-proxy's runtime
dependencies, and of theirs, as installed in the venv this runs in.

The container image installs with ``pip install -c deploy/docker/constraints.txt .``, so
an image built today and one built next month hold the same, tested, packages. Only the
image uses the file (pyproject.toml keeps ranges for people who install the package).
Markers are evaluated for the image's interpreter (CPython 3.12 on Linux).

    .venv/bin/python scripts/image-constraints.py        # rewrite the file
    .venv/bin/python scripts/image-constraints.py --check  # exit 1 if it would change
"""

from __future__ import annotations

import sys
from importlib.metadata import PackageNotFoundError, distribution
from pathlib import Path

from packaging.requirements import Requirement
from packaging.utils import canonicalize_name

OUT = Path(__file__).resolve().parents[1] / "deploy" / "docker" / "constraints.txt"
IMAGE = {
    "python_version": "3.12",
    "python_full_version": "3.12.8",
    "sys_platform": "linux",
    "platform_system": "Linux",
    "os_name": "posix",
    "platform_machine": "x86_64",
    "platform_python_implementation": "CPython",
    "implementation_name": "cpython",
    "extra": "",
}
HEADER = """\
# Exact versions for the container image only (Dockerfile: pip install -c ...).
# Generated from a working venv by scripts/image-constraints.py; regenerate with it after
# upgrading dependencies there (and run the tests). pyproject.toml keeps the ranges.
"""


def closure(root: str) -> dict[str, str]:
    """Name -> installed version of ``root``'s runtime requirements, transitively."""
    pins: dict[str, str] = {}
    todo = [root]
    while todo:
        dist = distribution(todo.pop())
        for text in dist.requires or ():
            req = Requirement(text)
            if req.marker is not None and not req.marker.evaluate(IMAGE):
                continue
            name = canonicalize_name(req.name)
            if name in pins:
                continue
            try:
                pins[name] = distribution(name).version
            except PackageNotFoundError:
                needed_by = dist.metadata["Name"]
                raise SystemExit(f"{name} (needed by {needed_by}) is not installed") from None
            todo.append(name)
    return pins


def render() -> str:
    pins = closure("sse-proxy")
    return HEADER + "".join(f"{name}=={version}\n" for name, version in sorted(pins.items()))


def main() -> int:
    text = render()
    if "--check" in sys.argv[1:]:
        current = OUT.read_text(encoding="utf-8") if OUT.exists() else ""
        return 0 if current == text else 1
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
