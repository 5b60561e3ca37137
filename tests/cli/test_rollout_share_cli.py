"""The commands that print a rollout speedup print the training step's beside it, at the
share ``--rollout-share`` states."""

from __future__ import annotations

import io
import re
import time
from pathlib import Path

import pytest
from rich.console import Console
from typer.testing import CliRunner

from tailsieve.cli.demo_cmd import _print
from tailsieve.cli.main import app, main
from tailsieve.core.training_step import step_speedup
from tailsieve.runtime.demo import DemoConfig, PolicyResult, summaries, write_run
from tailsieve.runtime.step.observe import StepMetrics

SMALL = ["simulate", "--workload", "paper-math", "--replicas", "4", "--groups", "16",
         "--group-size", "4", "--steps", "6", "--num-prompts", "200"]


def test_simulate_table_has_the_step_column() -> None:
    res = CliRunner().invoke(app, [*SMALL, "--policy", "tailsieve", "--rollout-share", "0.5"],
                             terminal_width=250)
    assert res.exit_code == 0, res.output
    assert "rollout is 0.50 of the step (--rollout-share)" in " ".join(res.output.split())
    row = next(line for line in res.output.splitlines() if line.startswith("│ tailsieve"))
    cells = [c.strip() for c in row.strip("│").split("│")]
    paired, step = float(cells[4].split("x")[0]), float(cells[5].rstrip("x"))
    assert step == pytest.approx(step_speedup(paired, 0.5), abs=2e-3)


def test_bad_share_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    for cmd in (SMALL, ["demo", "--no-progress"], ["agentic", "simulate"]):
        assert main([*cmd, "--rollout-share", "0"]) == 2
        assert "--rollout-share must be in (0, 1]" in capsys.readouterr().err


def test_agentic_simulate_prints_the_step_line() -> None:
    r = CliRunner().invoke(app, ["agentic", "simulate", "--preset", "search-agent",
                                 "--replicas", "2", "--groups", "4", "--group-size", "2",
                                 "--seeds", "1", "--policies", "tailsieve",
                                 "--warmup-steps", "0", "--measured-steps", "1",
                                 "--rollout-share", "0.6"])
    assert r.exit_code == 0, r.output
    line = next(x for x in r.output.splitlines() if x.startswith("Training step where"))
    assert "0.60 of it" in line
    found = dict(re.findall(r"(\S+) ([0-9.]+)x -> [0-9.]+x", line))
    pairs = re.findall(r"(\S+) ([0-9.]+)x -> ([0-9.]+)x", line)
    assert {"verl-sticky", "tailsieve"} <= set(found)
    for _, rollout, step in pairs:
        assert float(step) == pytest.approx(step_speedup(float(rollout), 0.6), abs=2e-3)


def _metrics(policy: str, step: int, makespan_s: float) -> StepMetrics:
    return StepMetrics(step, policy, 4, 0, 0, makespan_s, 0.0, makespan_s, makespan_s, 16, 0, 0,
                       1000, 0, 1000, 0, 2, False)


def test_demo_rows_give_the_training_step(tmp_path: Path) -> None:
    """The demo's printed table and headline: each speedup with the step's at the share."""
    times = {"uniform": [12.0, 10.0, 11.0, 10.0], "uniform-requests": [12.0, 10.0, 10.5, 10.0],
             "tailsieve": [12.0, 8.0, 9.0, 8.0]}
    results = {p: PolicyResult(p, [_metrics(p, s, t) for s, t in enumerate(ts)])
               for p, ts in times.items()}
    cfg = DemoConfig(out_dir=tmp_path, steps=3)
    write_run(cfg, results)
    buf = io.StringIO()
    _print(Console(file=buf, width=250), tmp_path, results, "emulated replicas", "emulated s",
           "emulated s", time.perf_counter(), 0.3)
    text = buf.getvalue()
    paired = summaries(results)[2]["paired_speedup"]
    assert paired > 1
    assert f"{paired:.3f}x ({step_speedup(paired, 0.3):.3f}x)" in text
    assert "rollout is 0.30 of the step" in " ".join(text.split())
    assert "30% of a training step" in text
    assert "30% of a training step" in (tmp_path / "report.html").read_text()


def test_spec_simulate_has_the_step_column() -> None:
    res = CliRunner().invoke(app, ["simulate", "--spec", "seer", "--replicas", "2", "--groups",
                                   "8", "--group-size", "4", "--steps", "6", "--num-prompts",
                                   "100", "--rollout-share", "0.5"], terminal_width=250)
    assert res.exit_code == 0, res.output
    assert "rollout is 0.50 of the step" in res.output
    rows = [line for line in res.output.splitlines() if line.startswith("│ uniform-spec")]
    cells = [c.strip() for c in rows[0].strip("│").split("│")]
    assert float(cells[3].rstrip("x")) == pytest.approx(
        step_speedup(float(cells[1].rstrip("x")), 0.5), abs=2e-3)
