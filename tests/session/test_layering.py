"""session/ is its own room: it imports only model, core, workload and errors."""

from __future__ import annotations

import ast
from pathlib import Path

import tailsieve.session

ALLOWED = ("tailsieve.model", "tailsieve.core", "tailsieve.workload", "tailsieve.errors",
           "tailsieve.session")


def test_session_imports_only_lower_layers() -> None:
    root = Path(tailsieve.session.__file__).parent
    bad = []
    for path in sorted(root.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) else [])
            bad += [f"{path.name}: {n}" for n in names
                    if n.startswith("tailsieve") and not n.startswith(ALLOWED)]
    assert not bad
