"""``workload.trace_lists`` sits below ``workload.trace``: it imports nothing from it, not even
for type checking (no import circle)."""

from __future__ import annotations

import ast
from pathlib import Path

import tailsieve.workload.trace_lists as trace_lists


def test_trace_lists_does_not_import_trace() -> None:
    tree = ast.parse(Path(trace_lists.__file__).read_text())
    imported = {n.module for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)}
    imported |= {a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names}
    assert "tailsieve.workload.trace" not in imported
    assert not any(m and m.startswith("tailsieve.workload.") for m in imported)
