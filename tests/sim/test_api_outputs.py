"""``sim.api.SimulationResult``'s outputs, what ``tailsieve simulate`` writes once its options are
read, called directly: ``simulate.json`` (read back by the report), the plots, and the
per-step diagnostics the command's ``--json`` prints."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailsieve.cli.main import main
from tailsieve.report.run_data import load_run
from tailsieve.sim.api import SimulationResult, simulate

ARGS = dict(policies=["uniform", "tailsieve"], replicas=4, groups=16, group_size=4, steps=4,
            num_prompts=200)


@pytest.fixture(scope="module")
def result() -> SimulationResult:
    return simulate("paper-math", **ARGS)  # type: ignore[arg-type]


def test_write_holds_every_step_and_the_report_reads_it(result: SimulationResult,
                                                        tmp_path: Path) -> None:
    path = result.write(tmp_path / "sim")
    data = json.loads(path.read_text())
    assert data["settings"] == json.loads(json.dumps(result.settings))
    assert [p["policy"] for p in data["policies"]] == list(result.summaries)
    for name, r in result.runs.items():
        assert len(data["steps"][name]) == len(r.run.records) == 4
    run = load_run(tmp_path / "sim")
    assert set(run.steps) == {"uniform", "tailsieve"} and run.kind == "simulate"


def test_plot_writes_the_step_times_the_controller_and_timelines(result: SimulationResult,
                                                                 tmp_path: Path) -> None:
    paths = result.plot(tmp_path / "png")
    names = {p.name for p in paths}
    assert {"step_times.png", "controller.png"} <= names
    assert all(p.stat().st_size > 0 for p in paths)


def test_diagnostics_are_what_the_command_prints(result: SimulationResult,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    diag = result.diagnostics()
    assert set(diag) == set(result.runs)
    assert len(diag["tailsieve"]) >= 1
    assert main(["simulate", "--workload", "paper-math", "--policy", "uniform", "--policy",
                 "tailsieve", "--replicas", "4", "--groups", "16", "--group-size", "4",
                 "--steps", "4", "--num-prompts", "200", "--json"]) == 0
    printed = json.loads(capsys.readouterr().out)
    def timeless(rows: list[dict[str, object]]) -> list[dict[str, object]]:
        """The rows less what the router's clock measured (decision CPU time)."""
        return [{k: v for k, v in r.items() if "decision" not in k} for r in rows]

    assert timeless(printed["diagnostics"]["tailsieve"]) == timeless(
        json.loads(json.dumps(diag["tailsieve"])))
    assert timeless(printed["policies"]) == timeless(
        json.loads(json.dumps(result.to_dict()["policies"])))
