"""Where benchmarks write by default: outside the repository.

Every benchmark script takes ``--out``; without it, results go under the system temp directory
(``$TMPDIR/tailsieve-bench/<name>``), so a benchmark run leaves ``git status`` clean. The
committed results in ``benchmarks/results/`` are only written when ``--out`` names them.
"""

from __future__ import annotations

import os
import shlex
import tempfile
from collections.abc import Sequence
from pathlib import Path

from tailsieve.workload.shipped import portable_path


def default_out(name: str) -> Path:
    """``<system temp>/tailsieve-bench/<name>`` (a file or a folder, as the caller uses it)."""
    return Path(tempfile.gettempdir()) / "tailsieve-bench" / name


def command_line(script: str, argv: Sequence[str], prefix: str = "python") -> str:
    """The command that made a result, as written into it: ``prefix script args`` with no
    absolute path of the machine it ran on: a path under the working directory relative to it,
    others as ``workload.shipped.portable_path`` names them (a ``--out`` under the temp dir
    reads ``$TMPDIR/...``)."""
    words = []
    for arg in argv:
        opt, eq, value = arg.partition("=")
        if eq and opt.startswith("--") and value.startswith("/"):
            words.append(f"{opt}={_quoted(_portable(value))}")
        else:
            words.append(_quoted(_portable(arg) if arg.startswith("/") else arg))
    return " ".join([prefix, script, *words])


def _portable(path: str) -> str:
    full, cwd = Path(os.path.abspath(path)), Path.cwd()
    if full.is_relative_to(cwd) and full != cwd:
        return full.relative_to(cwd).as_posix()
    return portable_path(path)


def _quoted(word: str) -> str:
    """Shell-quoted, except a leading ``$TMPDIR`` or ``~`` that the shell should expand."""
    for head in ("$TMPDIR/", "~/"):
        if word.startswith(head):
            return head + shlex.quote(word[len(head):])
    return shlex.quote(word)
