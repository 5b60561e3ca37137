"""``tailsieve trace`` sub-commands."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from tailsieve.cli.main import main
from tailsieve.workload.io import read_trace
from tailsieve.workload.presets import AIME_TRACE_IN_REPO

AIME = AIME_TRACE_IN_REPO


def run(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    """Run the console entry point (it returns the exit code) and capture its output."""
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.fixture
def multi(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> Path:
    path = tmp_path / "synth.jsonl"
    rc, _, err = run(
        [
            "trace",
            "synth",
            "--preset",
            "paper-math",
            "--prompts",
            "300",
            "--steps",
            "3",
            "--seed",
            "1",
            "--out",
            str(path),
            "--plot",
            str(tmp_path / "ranks.png"),
        ],
        capsys,
    )
    assert rc == 0, err
    assert (tmp_path / "ranks.png").stat().st_size > 0
    return path


def test_synth_then_stats_json(
    multi: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rc, out, err = run(
        ["trace", "stats", str(multi), "--json", "--plot", str(tmp_path / "cdf.png")], capsys
    )
    assert rc == 0, err
    data = json.loads(out)
    for key in (
        "num_prompts",
        "num_samples",
        "p50",
        "p90",
        "p99",
        "max",
        "truncated_fraction",
        "prompt_variance_share",
        "tail_auc",
    ):
        assert key in data
    assert data["num_prompts"] == 300 and data["num_samples"] == 300 * 3 * 8
    assert data["truncation_source"] == "finish_reason"
    assert (tmp_path / "cdf.png").stat().st_size > 0
    rc, out, _ = run(["trace", "stats", str(multi)], capsys)
    assert rc == 0 and "p90" in out


@pytest.mark.skipif(not AIME.is_file(), reason="AIME data absent")
def test_stats_aime(capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, _ = run(["trace", "stats", str(AIME), "--json"], capsys)
    data = json.loads(out)
    assert rc == 0
    assert data["num_prompts"] == 596 and data["num_samples"] == 4768
    assert data["p50"] == 7598.0 and data["max"] == 16000
    assert data["truncated_fraction"] == pytest.approx(0.0222, abs=1e-4)
    assert "split_half_tail_auc" in data and "tail_auc" not in data


def test_transform(multi: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for strength, r in (("weak", 1.5), ("strong", 6.0), ("3", 3.0)):
        out_path = tmp_path / f"t-{strength}.csv"
        rc, _out, err = run(
            [
                "trace",
                "transform",
                str(multi),
                "--tail-strength",
                strength,
                "--out",
                str(out_path),
                "--json",
            ],
            capsys,
        )
        assert rc == 0, err
        lens = read_trace(out_path).response_tokens
        p50, p90 = np.percentile(lens, [50, 90])
        assert p90 / p50 == pytest.approx(r, rel=3e-3)
    rc, _, err = run(
        [
            "trace",
            "transform",
            str(multi),
            "--tail-strength",
            "0.5",
            "--out",
            str(tmp_path / "x.csv"),
        ],
        capsys,
    )
    assert rc != 0 and err.startswith("error:") and len(err.strip().splitlines()) == 1


def test_capture(multi: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    rc, out, err = run(
        [
            "trace",
            "capture",
            str(multi),
            "--rho",
            "0.05",
            "0.10",
            "0.25",
            "--replicas",
            "4",
            "--groups",
            "32",
            "--rounds",
            "20",
            "--json",
            "--plot",
            str(tmp_path / "cap.png"),
        ],
        capsys,
    )
    assert rc == 0, err
    data = json.loads(out)
    assert [r["rho"] for r in data["results"]] == [0.05, 0.10, 0.25]
    for r in data["results"]:
        assert 0 <= r["cross_step_capture"] <= 1 and r["same_round_capture"] > r["random_baseline"]
    assert (tmp_path / "cap.png").stat().st_size > 0
    rc, out, _ = run(
        ["trace", "capture", str(multi), "--rounds", "5", "--tail-fraction", "0.1", "--json"],
        capsys,
    )
    assert rc == 0 and json.loads(out)["tail_fraction"] == 0.1
    rc, out, _ = run(["trace", "capture", "aime-r1", "--rounds", "5", "--prompts", "200"], capsys)
    assert rc == 0 and "same" in out
    rc, _, err = run(["trace", "capture", str(multi), "--rho", "0.1", "bogus"], capsys)
    assert rc != 0 and "bogus" in err


BAD = {
    "negative.csv": ("prompt_id,sample,response_tokens\na,0,-4\n", ["line 2", "response_tokens"]),
    "nonint.csv": ("prompt_id,sample,response_tokens\na,0,4.5\n", ["line 2", "response_tokens"]),
    "nonnum.jsonl": (
        '{"prompt_id": "a", "sample": "x", "response_tokens": 3}\n',
        ["line 1", "sample"],
    ),
    "missing.csv": ("prompt_id,response_tokens\na,4\n", ["line 1", "sample"]),
    "dup.jsonl": (
        '{"prompt_id": "a", "sample": 0, "response_tokens": 3}\n' * 2,
        ["line 2", "sample"],
    ),
    "cut.jsonl": (
        '{"prompt_id": "a", "sample": 0, "response_tokens": 3}\n{"prompt_id": "a", "sa',
        ["line 2", "truncated"],
    ),
    "empty.csv": ("", ["empty"]),
}


@pytest.mark.parametrize("name", sorted(BAD))
def test_bad_input_one_line_error(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text, needles = BAD[name]
    path = tmp_path / name
    path.write_text(text)
    for argv in (
        ["trace", "stats", str(path)],
        [
            "trace",
            "transform",
            str(path),
            "--tail-strength",
            "weak",
            "--out",
            str(tmp_path / "o.csv"),
        ],
        ["trace", "capture", str(path), "--rounds", "2"],
    ):
        rc, _, err = run(argv, capsys)
        assert rc != 0
        lines = err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: ") and str(path) in lines[0]
        for needle in needles:
            assert needle in lines[0]
