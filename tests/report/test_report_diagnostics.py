"""The report shows the step diagnostics of a simulated run."""

from __future__ import annotations

import json
from pathlib import Path

from tailsieve.cli.main import main
from tailsieve.report.html_report import write_report


def test_report_has_diagnostics_tables_and_plot(tmp_path: Path) -> None:
    out = tmp_path / "run"
    assert main(["simulate", "--replicas", "4", "--groups", "16", "--group-size", "4",
                 "--steps", "7", "--num-prompts", "300", "--policy", "tailsieve",
                 "--m0", "1",  # a tail pool from the start (the spread default starts balanced)
                 "--out", str(out)]) == 0
    data = json.loads((out / "simulate.json").read_text())
    steps = data["steps"]["tailsieve"]
    assert steps[1]["diagnostics"]["predicted_bulk_s"] > 0
    text = write_report(out).read_text()
    assert "Where the step time goes" in text and 'id="diagnostics"' in text
    assert "tailsieve: per step" in text and "uniform: per step" not in text
    assert text.count('class="steps"') == 1
    assert (out / "report_png" / "predicted_vs_observed.png").is_file()
    assert text.count("<tr>", text.index('class="steps"')) == len(steps) + 1
