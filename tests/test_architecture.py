"""The package's import graph: no circle, and no arrow pointing up.

Read from the source (``ast``), not from ``sys.modules``: every ``import`` counts, those
inside functions too (a lazy import hides a circle, it does not remove it), and those
under ``if TYPE_CHECKING:`` as well (a type-only import is still a dependency a reader
must follow, and two modules that name each other's types are one module). The layers,
bottom up: the sans-IO core and the planners (with ``errors`` and ``names``, the
vocabulary every layer shares); the observability shared by server and tools (``obs``);
the inspector; the server shell; the tools and the CLI. The sans-IO rule itself (no
asyncio, aiohttp, structlog or logging in the core) is checked by
``tests/core/test_reassembler.py`` in a fresh interpreter.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

import sse_proxy

PACKAGE = Path(sse_proxy.__file__).parent
Graph = dict[str, set[str]]

# What each layer may import from the package (a module always may import its own layer).
ALLOWED: dict[str, tuple[str, ...]] = {
    "sse_proxy.core": ("sse_proxy.errors", "sse_proxy.names"),
    "sse_proxy.rechunk": ("sse_proxy.errors", "sse_proxy.names"),
}
# What a layer must never import: everything above it.
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "sse_proxy.obs": ("sse_proxy.server", "sse_proxy.inspect", "sse_proxy.tools", "sse_proxy.cli"),
    "sse_proxy.inspect": ("sse_proxy.server", "sse_proxy.tools", "sse_proxy.cli"),
    "sse_proxy.server": ("sse_proxy.tools", "sse_proxy.cli"),
}


def _module_name(path: Path, root: Path) -> str:
    parts = path.relative_to(root.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imports(tree: ast.AST) -> Iterator[ast.Import | ast.ImportFrom]:
    """Every import statement, wherever it stands (``if TYPE_CHECKING:`` bodies too)."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node


def _targets(node: ast.Import | ast.ImportFrom, here: str, modules: set[str]) -> set[str]:
    """The package's modules an import statement loads (a name imported from a package
    counts as its submodule when there is one)."""
    if isinstance(node, ast.Import):
        names = [alias.name for alias in node.names]
    else:
        base = node.module or ""
        if node.level:
            anchor = here.split(".")[: -node.level] if node.level else []
            base = ".".join([*anchor, *([base] if base else [])])
        names = [base] + [f"{base}.{alias.name}" for alias in node.names]
    found = set()
    for name in names:
        # the longest known module the name starts with: sse_proxy.server.app.make_app
        # -> sse_proxy.server.app
        parts = name.split(".")
        for n in range(len(parts), 0, -1):
            candidate = ".".join(parts[:n])
            if candidate in modules:
                found.add(candidate)
                break
    found.discard(here)
    return found


def import_graph(root: Path = PACKAGE) -> Graph:
    """Module name -> the package's modules it imports."""
    paths = {_module_name(p, root): p for p in root.rglob("*.py")}
    modules = set(paths)
    graph: Graph = {}
    for name, path in paths.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
        here = name if path.name != "__init__.py" else name + ".__init__"
        graph[name] = set()
        for node in _imports(tree):
            graph[name] |= _targets(node, here, modules)
        graph[name].discard(name)
    return graph


def circles(graph: Mapping[str, set[str]]) -> list[list[str]]:
    """The strongly connected components with more than one module (Tarjan), sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in sorted(graph.get(v, ())):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return sorted(found)


def _within(module: str, package: str) -> bool:
    return module == package or module.startswith(package + ".")


def upward(graph: Mapping[str, set[str]]) -> list[tuple[str, str]]:
    """The imports that break a layer rule (ALLOWED for the bottom, FORBIDDEN above)."""
    bad = []
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            for layer, allowed in ALLOWED.items():
                inside = _within(module, layer) and not _within(target, layer)
                if inside and not any(_within(target, a) for a in allowed):
                    bad.append((module, target))
            for layer, forbidden in FORBIDDEN.items():
                if _within(module, layer) and any(_within(target, f) for f in forbidden):
                    bad.append((module, target))
    return bad


@pytest.fixture(scope="module")
def graph() -> Graph:
    return import_graph()


def test_the_graph_is_read(graph: Graph) -> None:
    """The reader sees the arrows it must: a lazy import, a package, a name from a module."""
    assert "sse_proxy.server.relay" in graph["sse_proxy.server.upstream"]
    assert "sse_proxy.server.run" in graph["sse_proxy.cli_serve"]  # imported inside a function
    assert "sse_proxy.core" in graph["sse_proxy.server.relay"]
    assert "sse_proxy.server.keys" in graph["sse_proxy.server.upstream"]
    assert len(graph) > 60


def test_no_import_circle(graph: Graph) -> None:
    assert circles(graph) == []


def test_a_circle_is_found(graph: Graph) -> None:
    """The check can fail: a circle the package once had (inspector -> server app) comes
    back when its arrow is put back, and the cycle names every module on it."""
    with_arrow = {k: set(v) for k, v in graph.items()}
    with_arrow["sse_proxy.inspect.web"].add("sse_proxy.server.app")
    (found,) = circles(with_arrow)
    assert {"sse_proxy.inspect.web", "sse_proxy.server.app", "sse_proxy.server.admin"} <= set(found)


def test_no_upward_import(graph: Graph) -> None:
    """The core and the planners import nothing of the shell; the inspector not the server;
    the observability neither the server nor the inspector; the server no tool."""
    assert upward(graph) == []


@pytest.mark.parametrize(
    ("module", "target"),
    [
        ("sse_proxy.core.framing", "sse_proxy.obs.logs"),
        ("sse_proxy.rechunk.planner", "sse_proxy.server.headers"),
        ("sse_proxy.rechunk.strategies", "sse_proxy.core.utf8"),
        ("sse_proxy.core.dialects.registry", "sse_proxy.config"),
        ("sse_proxy.inspect.web", "sse_proxy.server.keys"),
        ("sse_proxy.obs.sink", "sse_proxy.server.taps"),
        ("sse_proxy.server.relay", "sse_proxy.tools.fixtures"),
    ],
)
def test_an_upward_import_is_found(graph: Graph, module: str, target: str) -> None:
    assert module in graph
    assert target in graph
    with_arrow = {k: set(v) for k, v in graph.items()}
    with_arrow[module].add(target)
    assert upward(with_arrow) == [(module, target)]


def test_type_checking_imports_count(tmp_path: Path) -> None:
    """A type-only import is an arrow like any other: the two modules below form a circle."""
    pkg = tmp_path / "sse_proxy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from sse_proxy import b\n"
        "else:\n    import json\n\ndef f():\n    from sse_proxy.c import g\n"
    )
    (pkg / "b.py").write_text("from sse_proxy import a\n")
    (pkg / "c.py").write_text("g = 1\n")
    assert import_graph(pkg) == {
        "sse_proxy": set(),
        "sse_proxy.a": {"sse_proxy", "sse_proxy.b", "sse_proxy.c"},
        "sse_proxy.b": {"sse_proxy", "sse_proxy.a"},  # the package runs first
        "sse_proxy.c": set(),
    }
    assert circles(import_graph(pkg)) == [["sse_proxy.a", "sse_proxy.b"]]


# aiohttp's modules whose names any module may import; its other modules (the router's,
# the connection handler's, the body reader's, the writer's) are internals, and so is any
# underscored name: only sse_proxy/server/aiohttp_internals.py imports those.
AIOHTTP_PUBLIC = frozenset({"aiohttp", "aiohttp.web", "aiohttp.hdrs", "aiohttp.abc"})
AIOHTTP_ERRORS = "aiohttp.http_exceptions"  # the parser's exceptions, for their answers
INTERNALS = "sse_proxy.server.aiohttp_internals"


def aiohttp_internals_used(root: Path = PACKAGE) -> dict[str, list[str]]:
    """Module name -> the aiohttp internals it imports (modules or underscored names)."""
    found: dict[str, list[str]] = {}
    for path in sorted(root.rglob("*.py")):
        here = _module_name(path, root)
        for node in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names if a.name.startswith("aiohttp.")]
                bad = [n for n in names if n not in AIOHTTP_PUBLIC]
            elif (node.module or "").split(".")[0] == "aiohttp" and not node.level:
                module = node.module or ""
                bad = [f"{module}.{a.name}" for a in node.names if a.name.startswith("_")]
                if module not in AIOHTTP_PUBLIC and module != AIOHTTP_ERRORS:
                    bad.append(module)
            else:
                continue
            if bad:
                found.setdefault(here, []).extend(bad)
    return found


def test_aiohttp_internals_are_used_in_one_module() -> None:
    used = aiohttp_internals_used()
    assert set(used) == {INTERNALS}, used


def test_an_aiohttp_internal_is_found(tmp_path: Path) -> None:
    pkg = tmp_path / "sse_proxy"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("from aiohttp.web_protocol import RequestHandler\n")
    (pkg / "b.py").write_text("from aiohttp.http_exceptions import _Private\n")
    (pkg / "c.py").write_text("import aiohttp.streams\nfrom aiohttp import web, hdrs\n")
    assert aiohttp_internals_used(pkg) == {
        "sse_proxy.a": ["aiohttp.web_protocol"],
        "sse_proxy.b": ["aiohttp.http_exceptions._Private"],
        "sse_proxy.c": ["aiohttp.streams"],
    }
