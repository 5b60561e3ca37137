"""The AIME trace ships inside the package and is found by name from any directory."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from tailsieve.workload import load_workload, read_trace
from tailsieve.workload.shipped import AIME_TRACE_PATH, PROVENANCE_PATH, resolve_trace_path

REPO = Path(__file__).resolve().parents[2]


def test_aime_is_package_data_with_provenance() -> None:
    assert AIME_TRACE_PATH.is_relative_to(REPO / "src" / "tailsieve")
    assert "DeepSeek-R1-Distill-Qwen-1.5B" in PROVENANCE_PATH.read_text()
    trace = read_trace(AIME_TRACE_PATH)
    assert trace.num_rows == 596 * 8 and trace.num_prompts == 596
    assert int(trace.response_tokens.max()) == 16000
    assert int((trace.response_tokens == 16000).sum()) == 106


def test_name_aime_works_from_any_directory(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert resolve_trace_path("aime") == AIME_TRACE_PATH
    assert len(read_trace("aime").response_tokens) == 4768
    assert len(load_workload("aime").prompt_ids()) == 596
    (tmp_path / "aime").write_text("a local file of that name wins")
    assert resolve_trace_path("aime") == Path("aime")


def test_nothing_reads_the_sibling_shared_folder() -> None:
    files = subprocess.run(
        ["git", "ls-files", "src", "tests", "benchmarks", "scripts", ".ci"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout.split()
    needle = "../" + "shared"
    offenders = [
        f for f in files
        if not f.startswith("benchmarks/results/")
        and (REPO / f).is_file()
        and needle in (REPO / f).read_text(errors="ignore")
    ]
    assert offenders == []
