"""Shipped data and committed results name package- or repository-relative paths only: no file
holds an absolute path of the machine it was made on (/work/, /home/, /tmp/, /root/)."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

from tailsieve.workload.shipped import DATA_DIR, PACKAGE_DIR, portable_path

REPO = Path(__file__).resolve().parents[1].parent
ABSOLUTE = re.compile(r"(?<![\w.$~-])/(work|home|tmp|root)/")
sys.path.insert(0, str(REPO / "benchmarks"))


def _committed(*folders: str) -> list[Path]:
    out = subprocess.run(["git", "ls-files", *folders], cwd=REPO, capture_output=True,
                         text=True, check=True).stdout.split()
    return [REPO / f for f in out]


def test_shipped_data_and_results_hold_no_absolute_path() -> None:
    files = _committed("src/tailsieve/workload/data", "benchmarks/results")
    assert any(f.parent == DATA_DIR for f in files) and len(files) > 20
    offenders = []
    for f in files:
        if f.suffix in (".gz", ".png", ".parquet") or not f.is_file():
            continue
        for ln, line in enumerate(f.read_text(errors="ignore").splitlines(), 1):
            if m := ABSOLUTE.search(line):
                offenders.append(f"{f.relative_to(REPO)}:{ln}: {line[m.start():m.start() + 60]}")
    assert offenders == []


def test_the_scan_sees_absolute_paths() -> None:
    assert ABSOLUTE.search('"trace": "/work/wt/x/src/a.jsonl.gz"')
    assert ABSOLUTE.search("--out /tmp/re4")
    assert not ABSOLUTE.search("--out $TMPDIR/re4 and src/tailsieve/workload/data/x")


def test_writers_name_paths_portably(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from outdir import command_line

    assert portable_path(DATA_DIR / "PROVENANCE.md") == "tailsieve/workload/data/PROVENANCE.md"
    assert portable_path(PACKAGE_DIR / "x" / ".." / "workload") == "tailsieve/workload"
    assert portable_path("math") == "math"  # a name, not a file
    monkeypatch.chdir(REPO)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)  # re-read TMPDIR
    cmd = command_line("benchmarks/b.py", ["--out", str(tmp_path / "r 4"),
                                            f"--trace={DATA_DIR / 'x.csv'}", "--n", "3"])
    assert cmd == ("python benchmarks/b.py --out $TMPDIR/'r 4' "
                   "--trace=src/tailsieve/workload/data/x.csv --n 3")
    assert not ABSOLUTE.search(cmd)
