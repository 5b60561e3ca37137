"""Shared by the benchmark smoke tests: import scripts from ``benchmarks/`` and check that a run
leaves the repository as it found it."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BENCH = ROOT / "benchmarks"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))


def git_status() -> str | None:
    """``git status --porcelain`` of the repository (None outside a git checkout)."""
    try:
        out = subprocess.run(["git", "status", "--porcelain", "--untracked-files=all"], cwd=ROOT,
                             capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    return out.stdout if out.returncode == 0 else None


@contextmanager
def repo_unchanged() -> Iterator[None]:
    """Fails when the body adds, changes or removes a file of the repository."""
    before = git_status()
    yield
    after = git_status()
    if before is not None and after is not None:
        assert after == before, f"a benchmark wrote inside the repository:\n{after}"
