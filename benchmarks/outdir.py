"""Where benchmarks write by default: outside the repository.

Every benchmark script takes ``--out``; without it, results go under the system temp directory
(``$TMPDIR/tailsieve-bench/<name>``), so a benchmark run leaves ``git status`` clean. The
committed results in ``benchmarks/results/`` are only written when ``--out`` names them.
"""

from __future__ import annotations

import tempfile
from pathlib import Path


def default_out(name: str) -> Path:
    """``<system temp>/tailsieve-bench/<name>`` (a file or a folder, as the caller uses it)."""
    return Path(tempfile.gettempdir()) / "tailsieve-bench" / name
