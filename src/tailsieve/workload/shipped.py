"""Traces shipped inside the package (``tailsieve/workload/data``; see its PROVENANCE.md).

A shipped trace can be named instead of a path wherever a trace file is read: ``aime`` is
DeepSeek-R1-Distill-Qwen-1.5B on 596 AIME problems x 8 samples (exact token counts, max 16,000,
one checkpoint). A file of the same name in the working directory takes precedence.
"""

from __future__ import annotations

from pathlib import Path

DATA_DIR = Path(__file__).resolve().parent / "data"
AIME_TRACE_PATH = DATA_DIR / "aime-r1distill-1.5b-lengths.csv"
PROVENANCE_PATH = DATA_DIR / "PROVENANCE.md"
SHIPPED_TRACES: dict[str, Path] = {"aime": AIME_TRACE_PATH}


def resolve_trace_path(path: str | Path) -> Path:
    """``path`` itself, or the shipped trace it names (``aime``) when no such file exists."""
    p = Path(path)
    if not p.exists() and str(path) in SHIPPED_TRACES:
        return SHIPPED_TRACES[str(path)]
    return p
