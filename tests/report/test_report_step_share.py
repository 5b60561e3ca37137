"""Every rollout speedup a report prints comes with the training step's at a stated share."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from test_report import make_paired_run

from tailsieve.cli.main import main
from tailsieve.core.training_step import step_speedup
from tailsieve.errors import ConfigError
from tailsieve.report.headline import headline_sentences, paired_speedup
from tailsieve.report.html_report import diagnostics_html, write_report
from tailsieve.report.run_data import load_run


def test_headline_gives_the_training_step_at_the_share(tmp_path: Path) -> None:
    make_paired_run(tmp_path)
    run = load_run(tmp_path)
    sp = paired_speedup(run, "tailsieve")
    assert sp is not None and sp.speedup > 1
    words = " ".join(headline_sentences(run, rollout_share=0.4))
    step = step_speedup(sp.speedup, 0.4)
    assert (f"Where the rollout is 40% of a training step (--rollout-share), a "
            f"{sp.speedup:.3f}x rollout makes the training step {step:.3f}x.") in words
    default = " ".join(headline_sentences(run))
    assert f"{step_speedup(sp.speedup, 0.7):.3f}x." in default and "70% of a training" in default
    with pytest.raises(ConfigError, match="rollout share"):
        headline_sentences(run, rollout_share=0.0)


def test_html_summary_cells_and_note_state_the_share(tmp_path: Path) -> None:
    make_paired_run(tmp_path)
    text = write_report(tmp_path, rollout_share=0.5).read_text()
    table = text.split('id="summary"')[1].split("</table>")[0]
    # every speedup cell holds the rollout's and the step's: 1.090x steady, 1.097x mean
    for rollout in (1.09, 1.097):
        assert f"{rollout:.3f}x (step {step_speedup(rollout, 0.5):.3f}x)" in table
    cells = re.findall(r"<td>([0-9.]+x[^<]*)</td>", table)
    assert cells and all("(step " in c for c in cells)
    assert "rollout share of 0.50 of the step" in text
    assert "50% of a training step" in text.split('id="headline"')[1].split("</ul>")[0]


def test_report_cli_takes_the_share(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    make_paired_run(tmp_path)
    assert main(["report", str(tmp_path), "--rollout-share", "0.25"]) == 0
    assert "25% of a training step" in (tmp_path / "report.html").read_text()
    capsys.readouterr()
    assert main(["report", str(tmp_path), "--rollout-share", "1.5"]) == 2
    assert "--rollout-share must be in (0, 1]" in capsys.readouterr().err


def test_diagnostics_paired_statistic_gives_the_step(tmp_path: Path) -> None:
    blob = {"settings": {}, "runs": {"tailsieve": [{"step": 1, "makespan_s": 1.0}]}, "policies": [
        {"policy": "tailsieve", "diagnostics": {"capture_rate": 0.5},
         "paired_stat": {"mean": 1.2, "ci_low": 1.1, "ci_high": 1.3, "num_seeds": 3,
                         "steady_from": 5}}]}
    (tmp_path / "simulate.json").write_text(json.dumps(blob))
    text = diagnostics_html(load_run(tmp_path), rollout_share=0.5)
    assert f"step {step_speedup(1.2, 0.5):.3f}x at rollout share 0.50" in text
