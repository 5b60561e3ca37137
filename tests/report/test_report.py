"""The HTML report renders in a real headless Chromium (Debian's chromium package)."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import matplotlib.image as mpimg
import numpy as np
import pytest

from tailsieve.cli.main import main
from tailsieve.core.outcome import AbortedGroup, GroupResult, StepOutcome
from tailsieve.core.plan import GroupAssignment, StepPlan
from tailsieve.core.pool import Pool
from tailsieve.core.timeline import StepTimeline
from tailsieve.report.html_report import write_report
from tailsieve.report.run_data import load_run


def chromium() -> str | None:
    for name in ("chromium", "chromium-browser", "google-chrome"):
        path = shutil.which(name)
        if path:
            return path
    return None


def tiny_step() -> tuple[StepPlan, StepOutcome]:
    a = (
        GroupAssignment("t0", Pool.TAIL, 1, True, 0),
        GroupAssignment("b0", Pool.BULK, 0, False, 0),
        GroupAssignment("b1", Pool.BULK, 0, False, 1),
    )
    plan = StepPlan(1, 2, 2, 2, 1, 1, 1, (1,), (0,), a, 1, ("b0", "b1"), False, False)
    out = StepOutcome(
        1,
        (GroupResult("t0", Pool.TAIL, 1, 9.0, (900, 10)), GroupResult("b0", Pool.BULK, 0, 4.0, (40, 30))),
        (AbortedGroup("b1", 0, 1, 20, -1, 60),),
        9.0, 4.0, 9.0, 60, 1060,
    )
    return plan, out


def make_run(folder: Path) -> None:
    plan, out = tiny_step()
    recs = {
        pol: [
            {"step": s, "makespan_s": 10.0 - s * k, "q": s % 3 * k, "m": k, "is_flush": False}
            for s in range(6)
        ]
        for pol, k in (("uniform", 0), ("tailsieve", 1))
    }
    blob = {
        "settings": {"replicas": 2, "groups": 2},
        "policies": [{"policy": "uniform", "steady_step_s": 10.0}, {"policy": "tailsieve", "steady_step_s": 6.0}],
        "steps": recs,
        "timelines": {"tailsieve": StepTimeline.from_step(plan, out).to_dict()},
        "lengths": {"uniform": [1, 5, 9, 30], "tailsieve": [2, 4, 8, 33]},
    }
    (folder / "simulate.json").write_text(json.dumps(blob))
    (folder / "capture.json").write_text(json.dumps({"rho": [0.05, 0.1], "capture_rate": [0.8, 0.9]}))


def test_timeline_marks_cutoff_and_aborts() -> None:
    plan, out = tiny_step()
    tl = StepTimeline.from_step(plan, out)
    assert tl.cutoff_s == 4.0
    aborted = [b for b in tl.bars if b.aborted]
    assert [b.prompt_id for b in aborted] == ["b1"] and aborted[0].end_s == 4.0
    assert StepTimeline.from_dict(tl.to_dict()) == tl


def test_report_collects_every_plot(tmp_path: Path) -> None:
    make_run(tmp_path)
    run = load_run(tmp_path)
    assert set(run.steps) == {"uniform", "tailsieve"} and "tailsieve" in run.timelines
    page = write_report(tmp_path)
    text = page.read_text()
    assert text.count("data:image/png;base64,") == 5
    assert 'data-count="5"' in text


def test_report_cli_rejects_empty_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["report", str(tmp_path)]) == 2
    assert "no run data found" in capsys.readouterr().err


@pytest.mark.skipif(chromium() is None, reason="Debian's chromium is not installed")
def test_report_renders_in_headless_chromium(tmp_path: Path) -> None:
    make_run(tmp_path)
    page = write_report(tmp_path)
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    exe = chromium()
    assert exe is not None
    dom = subprocess.run([exe, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120)
    assert 'id="figures"' in dom.stdout and dom.stdout.count("<img") == 5
    shot = tmp_path / "shot.png"
    subprocess.run([exe, *flags, f"--screenshot={shot}", "--window-size=1000,2400", page.as_uri()], capture_output=True, timeout=120)
    pixels = mpimg.imread(shot)
    assert pixels.shape[0] == 2400
    # plots are drawn: many distinct colours, not a blank or error page
    colours = np.unique((pixels[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 50
