"""Traces shipped inside the package (``tailsieve/workload/data``; see its PROVENANCE.md).

A shipped trace can be named instead of a path wherever a trace file is read:

* ``aime``: DeepSeek-R1-Distill-Qwen-1.5B on 596 AIME problems x 8 samples (exact token counts,
  max 16,000, one checkpoint);
* ``smollm2-math``: SmolLM2-135M-Instruct on vLLM CPU, 128 of the shipped math word problems x
  8 samples, two epochs (the trace's steps 0 and 1), natural EOS, temperature 1, max 1,024
  tokens; recorded by ``tailsieve record run`` with token ids and streamed chunk times.

A file of the same name in the working directory takes precedence.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

PACKAGE_DIR = Path(__file__).resolve().parent.parent  # the installed ``tailsieve`` package
DATA_DIR = PACKAGE_DIR / "workload" / "data"
AIME_TRACE_PATH = DATA_DIR / "aime-r1distill-1.5b-lengths.csv"
SMOLLM2_TRACE_PATH = DATA_DIR / "smollm2-135m-math.jsonl.gz"
PROVENANCE_PATH = DATA_DIR / "PROVENANCE.md"
SHIPPED_PROMPTS = DATA_DIR / "math-word-problems.jsonl"  # ``record.math_problems``' set
SHIPPED_TRACES: dict[str, Path] = {"aime": AIME_TRACE_PATH, "smollm2-math": SMOLLM2_TRACE_PATH}
SHIPPED_MAX_TOKENS: dict[str, int] = {"smollm2-math": 1024}  # the recording's cap


def portable_path(path: str | Path) -> str:
    """How a file is named in written results and provenance, never by a machine's absolute
    path: a file inside the installed package relative to the package's parent
    (``tailsieve/workload/data/...``, as ``record.turn_recorder`` names it), one under the
    working directory relative to it, one under the system temp dir as
    ``$TMPDIR/...``, one under the home folder as ``~/...``; anything else as given. Relative
    names that are not existing files (``math``, ``smollm2-math``, ``<api>``) come back as
    they are."""
    p = Path(path)
    if not p.is_absolute() and not p.exists():
        return str(path)
    full = Path(os.path.abspath(p))
    roots = ((PACKAGE_DIR, "tailsieve/"), (Path.cwd(), ""),
             (Path(tempfile.gettempdir()), "$TMPDIR/"), (Path.home(), "~/"))
    for root, prefix in roots:
        for r in dict.fromkeys((root, root.resolve())):
            if full.is_relative_to(r) and full != r:
                return prefix + full.relative_to(r).as_posix()
    return str(path)


def resolve_trace_path(path: str | Path) -> Path:
    """``path`` itself, or the shipped trace it names (``aime``, ``smollm2-math``) when no
    such file exists."""
    p = Path(path)
    if not p.exists() and str(path) in SHIPPED_TRACES:
        return SHIPPED_TRACES[str(path)]
    return p
