"""``tailsieve oracle`` / ``oracle-sweep`` end to end through ``main``."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tailsieve.cli.main import main
from tailsieve.model.profiles import load_profile
from tailsieve.oracle import solve_two_replicas
from tailsieve.workload.presets import AIME_TRACE_IN_REPO

AIME = AIME_TRACE_IN_REPO


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run the console entry point (it returns the exit code) and capture its output."""
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


def write_trace(tmp_path: Path, lengths: list[int]) -> Path:
    path = tmp_path / "t.csv"
    rows = ["prompt_id,sample,response_tokens"]
    rows += [f"p{i // 4},{i % 4},{n}" for i, n in enumerate(lengths)]
    path.write_text("\n".join(rows) + "\n")
    return path


def test_inline_lengths_json(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(
        ["oracle", "--lengths", "100,2000,300,4000,50", "--profile", "illustrative-flat", "--json"], capsys
    )
    assert rc == 0
    data = json.loads(out)
    for key in (
        "num_requests",
        "uniform_makespan_s",
        "optimal_makespan_s",
        "best_k",
        "topk_makespan_s",
        "topk_gap",
        "lower_bound_s",
        "retained_states",
        "solve_s",
        "profile",
    ):
        assert key in data
    assert data["num_requests"] == 5 and data["profile"] == "illustrative-flat"
    expect = solve_two_replicas([100, 2000, 300, 4000, 50], load_profile("illustrative-flat")).makespan_s
    assert data["optimal_makespan_s"] == pytest.approx(expect)
    assert data["lower_bound_s"] <= data["optimal_makespan_s"] <= data["topk_makespan_s"] + 1e-9
    assert data["optimal_makespan_s"] <= data["uniform_makespan_s"] + 1e-9
    assert data["topk_gap"] >= 0


def test_trace_sampling_is_seeded(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(0)
    trace = write_trace(tmp_path, rng.integers(1, 9000, 40).tolist())
    args = ["oracle", "--trace", str(trace), "--sample-requests", "12", "--json"]
    _, a, _ = run([*args, "--seed", "3"], capsys)
    _, b, _ = run([*args, "--seed", "3"], capsys)
    _, c, _ = run([*args, "--seed", "4"], capsys)
    da, db, dc = json.loads(a), json.loads(b), json.loads(c)
    assert da["num_requests"] == 12
    assert da["optimal_makespan_s"] == db["optimal_makespan_s"]
    assert da["total_tokens"] != dc["total_tokens"]


def test_table_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    plot = tmp_path / "fig2.png"
    rc, out, _ = run(
        ["oracle", "--lengths", "5000,300,200,4000,100,90,80", "--plot", str(plot)], capsys
    )
    assert rc == 0
    assert "exact optimal makespan" in out and "best top-k" in out
    assert plot.is_file() and plot.stat().st_size > 1000


@pytest.mark.parametrize(
    ("argv", "pattern"),
    [
        (["oracle", "--lengths", ""], "empty"),
        (["oracle", "--lengths", "1,abc"], "entry 2: 'abc' is not a number"),
        (["oracle", "--lengths", "10,-5"], "entry 2"),
        (["oracle", "--lengths", "10,nan"], "entry 2"),
        (["oracle", "--trace", "/no/such/trace.csv"], "no such trace file"),
        (["oracle"], "exactly one of"),
        (["oracle", "--lengths", "1,2", "--profile", "tpu"], "unknown profile"),
        (["oracle-sweep", "--trace", "/no/such/trace.csv"], "no such trace file"),
    ],
)
def test_bad_input_one_line_error(
    argv: list[str], pattern: str, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, _, err = run(argv, capsys)
    assert rc != 0
    assert err.startswith("error: ") and pattern in err
    assert err.count("\n") == 1 and "Traceback" not in err


def test_malformed_profile_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "p.json"
    bad.write_text('{"points": [{"batch_size": 1, "step_s": -1}]}')
    rc, _, err = run(["oracle", "--lengths", "1,2", "--profile", str(bad)], capsys)
    assert rc != 0 and err.startswith("error: ") and "step_s must be positive" in err


def test_too_many_samples(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = write_trace(tmp_path, [10, 20, 30])
    rc, _, err = run(["oracle", "--trace", str(trace), "--sample-requests", "5"], capsys)
    assert rc != 0 and "cannot sample 5" in err


def test_sweep_json(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rng = np.random.default_rng(1)
    trace = write_trace(tmp_path, rng.integers(1, 16000, 80).tolist())
    rc, out, _ = run(
        [
            "oracle-sweep",
            "--trace",
            str(trace),
            "--draws",
            "5",
            "--sample-requests",
            "30",
            "--profile",
            "cpu",
            "--profile",
            "illustrative-flat",
            "--json",
        ],
        capsys,
    )
    assert rc == 0
    studies = json.loads(out)
    assert [s["profile"] for s in studies] == ["cpu", "illustrative-flat"]
    for s in studies:
        assert len(s["gaps"]) == 5 and 0 <= s["gap_median"] <= s["gap_p90"] <= s["gap_max"]
    rc, out, _ = run(
        ["oracle-sweep", "--trace", str(trace), "--draws", "2", "--sample-requests", "10"], capsys
    )
    assert rc == 0 and "P90" in out


@pytest.mark.skipif(not AIME.is_file(), reason="AIME data not present")
def test_real_trace(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(
        ["oracle", "--trace", str(AIME), "--sample-requests", "100", "--seed", "0", "--json"],
        capsys,
    )
    assert rc == 0
    data = json.loads(out)
    assert data["num_requests"] == 100 and data["topk_gap"] < 0.05
