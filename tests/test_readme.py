"""The README stays short, its links resolve, and its Python code runs as printed (against
emulated vLLM replicas instead of real servers)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from tailsieve.runtime.emulator import EmulatorFleet

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text()


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def test_readme_is_short() -> None:
    assert len(README.encode()) < 12_000


def test_readme_links_point_at_files_in_the_repository() -> None:
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", README)
    local = [t for t in targets if not t.startswith(("http://", "https://"))]
    assert "docs/concepts.md" in local and "BENCHMARKS.md" in local
    assert [t for t in local if not (REPO / t).exists()] == []
    for script in ("scripts/demo.sh", "scripts/test.sh"):
        assert f"bash {script}" in README and (REPO / script).is_file()


def test_readme_python_blocks_run_against_emulated_replicas(
    capsys: pytest.CaptureFixture[str],
) -> None:
    blocks = python_blocks(README)
    assert len(blocks) == 2 and "TailSieveRollout" in blocks[0] and "simulate(" in blocks[1]
    fleet = EmulatorFleet.start(2, profile="cpu", time_scale=0.01, model_name="readme-model")
    try:
        code, n = re.subn(r"^endpoints = .*$", f"endpoints = {fleet.urls!r}", blocks[0],
                          flags=re.M)
        assert n == 1
        exec(compile(code, "README.md[python 1]", "exec"), {"__name__": "readme"})
    finally:
        fleet.close()
    lines = capsys.readouterr().out.splitlines()
    assert [ln.split()[0] for ln in lines] == ["0", "1", "2"]  # one line per step
    exec(compile(blocks[1], "README.md[python 2]", "exec"), {"__name__": "readme"})
    assert capsys.readouterr().out.startswith("TailSieve vs Uniform: ")
