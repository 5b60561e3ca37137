"""The docs site builds strictly, and strictness is real: a broken link fails the build."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
MKDOCS = Path(sys.executable).with_name("mkdocs")

pytestmark = pytest.mark.skipif(not MKDOCS.exists(), reason="mkdocs not installed (dev extra)")


def _build(root: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [str(MKDOCS), "build", "--strict", "--site-dir", str(site)],
        cwd=root, capture_output=True, text=True, timeout=600,
        env={"PATH": str(MKDOCS.parent) + ":/usr/bin:/bin", "NO_MKDOCS_2_WARNING": "1",
             "PYTHONPATH": str(root / "src")},
    )


@pytest.mark.slow
def test_docs_build_strict_and_fail_on_a_broken_link(tmp_path: Path) -> None:
    root = tmp_path / "repo"
    root.mkdir()
    for name in ("mkdocs.yml", "BENCHMARKS.md", "benchmarks/results/REPORT.md"):
        (root / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / name, root / name)
    for folder in ("docs", "src", "benchmarks/results/paper", "benchmarks/results/grounded",
                   "benchmarks/results/balancer", "benchmarks/results/drain",
                   "benchmarks/results/tail_signal",
                   "benchmarks/results/acceptance", "benchmarks/results/routers_live",
                   "examples"):
        shutil.copytree(REPO / folder, root / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info"))
    ok = _build(root, tmp_path / "site")
    assert ok.returncode == 0, ok.stderr[-3000:]
    cli_page = (tmp_path / "site" / "cli" / "index.html").read_text()
    assert "tailsieve rollout" in cli_page and "--replay-trace" in cli_page
    assert "TailSieveRollout" in (tmp_path / "site" / "api" / "index.html").read_text()
    page = root / "docs" / "concepts.md"
    page.write_text(page.read_text() + "\nSee [a page that does not exist](nowhere.md).\n")
    broken = _build(root, tmp_path / "site2")
    assert broken.returncode != 0 and "nowhere.md" in broken.stderr
