"""A clone without a sibling ``shared`` data folder, and a wheel installed elsewhere, work on
their own: ``tailsieve simulate --workload aime`` finds the shipped AIME trace."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def _tracked_files() -> list[str]:
    out = subprocess.run(
        ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
        cwd=REPO, capture_output=True, text=True, check=True,
    ).stdout
    return [f for f in out.splitlines() if (REPO / f).is_file()]


def _simulate_json(cmd: list[str], cwd: Path, env: dict[str, str]) -> dict[str, object]:
    proc = subprocess.run(
        [*cmd, "simulate", "--workload", "aime", "--steps", "3", "--groups", "16",
         "--policy", "tailsieve", "--json"],
        cwd=cwd, env=env, capture_output=True, text=True, timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    data: dict[str, object] = json.loads(proc.stdout)
    return data


def _clean_env() -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}
    env["PYTHONNOUSERSITE"] = "1"
    return env


def test_copy_of_the_repo_without_shared_folder(tmp_path: Path) -> None:
    """The working tree copied alone into an empty folder (no ``shared`` folder beside it)."""
    clone = tmp_path / "clone"
    for f in _tracked_files():
        (clone / f).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(REPO / f, clone / f)
    assert not (tmp_path / "shared").exists()
    env = _clean_env() | {"PYTHONPATH": str(clone / "src")}
    where = subprocess.run(
        [sys.executable, "-c", "import tailsieve.workload.shipped as s; print(s.AIME_TRACE_PATH)"],
        cwd=clone, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(clone)
    data = _simulate_json([sys.executable, "-m", "tailsieve.cli.main"], clone, env)
    assert data["settings"]["workload"] == "aime"  # type: ignore[index]
    bench = subprocess.run(
        [sys.executable, "-c",
         "import sys, pathlib; sys.path.insert(0, 'benchmarks'); from paper import bias_check; "
         f"bias_check.run(pathlib.Path({str(tmp_path / 'bench')!r}), True, steps=3)"],
        cwd=clone, env=env, capture_output=True, text=True, timeout=300,
    )
    assert bench.returncode == 0, bench.stderr[-2000:]


@pytest.mark.slow
def test_wheel_installed_into_a_fresh_venv_elsewhere(tmp_path: Path) -> None:
    """``pip install .`` (a built wheel, not editable) into a new venv outside the checkout.
    pip's own cache (``PIP_CACHE_DIR`` or ``~/.cache/pip``) keeps repeated runs fast."""
    env = _clean_env()
    wheels = tmp_path / "wheels"
    subprocess.run(
        [sys.executable, "-m", "pip", "wheel", "--no-deps", "--quiet", "-w", str(wheels), str(REPO)],
        env=env, check=True, capture_output=True, timeout=600,
    )
    (wheel,) = wheels.glob("tailsieve-*.whl")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=300)
    pip = subprocess.run(
        [str(venv / "bin" / "python"), "-m", "pip", "install", "--quiet",
         "--disable-pip-version-check", str(wheel)],
        env=env, capture_output=True, text=True, timeout=900,
    )
    assert pip.returncode == 0, pip.stderr[-3000:]
    work = tmp_path / "elsewhere"
    work.mkdir()
    where = subprocess.run(
        [str(venv / "bin" / "python"), "-c",
         "import tailsieve.workload.shipped as s; print(s.AIME_TRACE_PATH)"],
        cwd=work, env=env, capture_output=True, text=True, check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(venv) and Path(where).is_file()
    assert (Path(where).parent / "PROVENANCE.md").is_file()
    for shipped in ("smollm2-135m-math.jsonl.gz", "math-word-problems.jsonl"):
        assert (Path(where).parent / shipped).is_file(), shipped
    data = _simulate_json([str(venv / "bin" / "tailsieve")], work, env)
    assert data["settings"]["workload"] == "aime"  # type: ignore[index]
