"""The import graph of ``src/tailsieve``: no circle, and no import from a lower layer to a higher
one (docs/architecture.md, "Layers").

Every module is parsed with ``ast`` (nothing is imported), and every import statement counts:
at module level, inside functions and under ``TYPE_CHECKING``. ``from pkg import name`` is an
edge to the submodule ``pkg.name`` when there is one, else to ``pkg``; a module's implicit import
of its parent package is not an edge.
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

SRC = Path(__file__).resolve().parents[1] / "src"
ROOT = "tailsieve"

# A module may import from its own package or from a package of a lower rank; packages of the
# same rank are siblings and import nothing of each other.
RANKS: dict[str, int] = {
    "errors": 0,
    "model": 1,
    "workload": 2, "oracle": 2,
    "core": 3, "drafts": 3,
    "session": 4,
    "policy": 5, "control": 5,
    "sim": 6,
    "runtime": 7,
    "record": 8, "report": 8, "integrations": 8,
    "cli": 9,
    ROOT: 10,  # the package's own __init__: the public API, lazily over everything
}



def module_files(src: Path = SRC) -> dict[str, Path]:
    """Dotted module name -> file, for every module of the package."""
    out = {}
    for path in sorted((src / ROOT).rglob("*.py")):
        parts = list(path.relative_to(src).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        out[".".join(parts)] = path
    return out


def _imported(node: ast.Import | ast.ImportFrom, module: str, is_package: bool,
              known: set[str]) -> Iterator[str]:
    """The modules of the package one import statement names."""
    if isinstance(node, ast.Import):
        names = [a.name for a in node.names]
    else:
        base = node.module or ""
        if node.level:
            here = module.split(".") if is_package else module.split(".")[:-1]
            here = here[: len(here) - (node.level - 1)]
            base = ".".join([*here, base] if base else here)
        names = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base
                 for a in node.names]
    for name in names:
        while name and name not in known:
            name = name.rpartition(".")[0]
        if name and name != module:
            yield name


def _parse(path: Path, tries: int = 3) -> ast.Module:
    """``ast.parse``, again on CPython 3.11's spurious "AST constructor recursion depth
    mismatch" ``SystemError`` (python/cpython#106905: the parse itself is sound)."""
    for k in range(tries):
        try:
            return ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        except SystemError:
            if k == tries - 1:
                raise
    raise AssertionError("unreachable")


def import_graph(src: Path = SRC) -> dict[str, set[str]]:
    """Module -> the package's modules it imports (every import statement in its file)."""
    files = module_files(src)
    known = set(files)
    graph: dict[str, set[str]] = {}
    for module, path in files.items():
        tree = _parse(path)
        is_package = path.name == "__init__.py"
        graph[module] = {
            target for node in ast.walk(tree) if isinstance(node, ast.Import | ast.ImportFrom)
            for target in _imported(node, module, is_package, known)
        }
    return graph


def circles(graph: dict[str, set[str]]) -> list[frozenset[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[frozenset[str]] = []
    for start in sorted(graph):
        if start in index:
            continue
        work = [(start, iter(sorted(graph[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, edges = work[-1]
            nxt = next(edges, None)
            if nxt is not None:
                if nxt not in index:
                    index[nxt] = low[nxt] = len(index)
                    stack.append(nxt)
                    on_stack.add(nxt)
                    work.append((nxt, iter(sorted(graph.get(nxt, ())))))
                elif nxt in on_stack:
                    low[node] = min(low[node], index[nxt])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                comp = set()
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    comp.add(member)
                    if member == node:
                        break
                if len(comp) > 1:
                    found.append(frozenset(comp))
    return found


def layer_of(module: str) -> str:
    """The top-level package (or module) of ``module`` below ``tailsieve``."""
    parts = module.split(".")
    return parts[1] if len(parts) > 1 else ROOT


def upward_imports(graph: dict[str, set[str]]) -> list[str]:
    """``a -> b`` for every import whose target's layer is not below the importer's."""
    bad = []
    for module, targets in sorted(graph.items()):
        src_layer = layer_of(module)
        for target in sorted(targets):
            dst_layer = layer_of(target)
            if dst_layer != src_layer and RANKS[dst_layer] >= RANKS[src_layer]:
                bad.append(f"{module} ({src_layer}, rank {RANKS[src_layer]}) -> {target} "
                           f"({dst_layer}, rank {RANKS[dst_layer]})")
    return bad


def test_every_layer_has_a_rank() -> None:
    layers = {layer_of(m) for m in module_files()}
    assert layers - set(RANKS) == set(), "rank the new layer in RANKS and docs/architecture.md"


def test_no_circle() -> None:
    found = circles(import_graph())
    assert found == [], [sorted(c) for c in found]


def test_no_import_from_a_lower_layer_to_a_higher_one() -> None:
    assert upward_imports(import_graph()) == []


def _write(root: Path, files: dict[str, str]) -> Path:
    for rel, text in files.items():
        path = root / ROOT / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text, encoding="utf-8")
    return root


def test_graph_counts_type_checking_lazy_and_relative_imports(tmp_path: Path) -> None:
    src = _write(tmp_path, {
        "__init__.py": "",
        "core/__init__.py": "",
        "core/a.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n"
                     "    from tailsieve.core.b import X\n",
        "core/b.py": "def f():\n    from . import c\n",
        "core/c.py": "import tailsieve.control.base\nfrom tailsieve.core import a\n",
        "control/__init__.py": "",
        "control/base.py": "from tailsieve.errors import E\n",
        "errors.py": "",
    })
    graph = import_graph(src)
    assert graph["tailsieve.core.a"] == {"tailsieve.core.b"}
    assert graph["tailsieve.core.b"] == {"tailsieve.core.c"}
    assert graph["tailsieve.core.c"] == {"tailsieve.control.base", "tailsieve.core.a"}
    assert circles(graph) == [frozenset({"tailsieve.core.a", "tailsieve.core.b",
                                         "tailsieve.core.c"})]
    assert upward_imports(graph) == [
        "tailsieve.core.c (core, rank 3) -> tailsieve.control.base (control, rank 5)"]


def test_siblings_of_one_rank_may_not_import_each_other(tmp_path: Path) -> None:
    src = _write(tmp_path, {
        "__init__.py": "",
        "policy/__init__.py": "from tailsieve.control import x\n",
        "control/__init__.py": "",
        "control/x.py": "from tailsieve.model import m\n",
        "model/__init__.py": "",
        "model/m.py": "",
    })
    graph = import_graph(src)
    assert circles(graph) == []
    assert upward_imports(graph) == [
        "tailsieve.policy (policy, rank 5) -> tailsieve.control.x (control, rank 5)"]
