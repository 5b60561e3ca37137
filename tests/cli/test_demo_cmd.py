"""The demo end to end (small): emulated replicas, live runtime, every policy, a report that
opens in a real headless Chromium."""

from __future__ import annotations

import json
import shutil
import subprocess
from pathlib import Path

import pytest

from tailsieve.cli.main import main


def _chromium() -> str | None:
    return shutil.which("chromium") or shutil.which("chromium-browser")


@pytest.mark.slow
def test_demo_runs_every_policy_and_writes_a_report(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "demo"
    rc = main(
        [
            "demo", "--out", str(out), "--replicas", "4", "--groups", "12", "--group-size", "4",
            "--steps", "3", "--time-scale", "0.005", "--no-progress",
        ]
    )
    assert rc == 0
    printed = capsys.readouterr().out
    assert "than per-request round-robin" in printed and "than Uniform" in printed
    # the user's baseline first
    assert printed.index("than per-request round-robin") < printed.index("than Uniform")
    assert "Tokens wasted: " in printed and "on groups aborted at the cutoff" in printed
    timelines = json.loads((out / "timelines.json").read_text())
    assert set(timelines) == {"uniform", "uniform-requests", "tailsieve"}
    assert len({t["step"] for t in timelines.values()}) == 1  # the same step, side by side
    blob = json.loads((out / "demo.json").read_text())
    names = [p["policy"] for p in blob["policies"]]
    assert names == ["uniform", "uniform-requests", "tailsieve"]
    ts = blob["policies"][2]
    assert ts["paired_speedup_vs_requests"] > 0
    assert ts["paired_steps"] == [1, 2, 3]  # a 3-step demo pairs every step after warm-up
    assert ts["paired_speedup"] > 0
    # moves on by default (SGLang API: a move aborts and keeps the partial output); only
    # tailsieve moves
    assert ts["moves_per_step"] > 0
    assert [p["moves_per_step"] for p in blob["policies"][:2]] == [0.0, 0.0]
    steps = [json.loads(line) for line in (out / "steps.jsonl").read_text().splitlines()]
    for policy in names:
        regular = [s for s in steps if s["policy"] == policy and not s["is_flush"]]
        assert len(regular) == 4  # warm-up + 3
        assert all(s["num_groups"] == 12 for s in regular)
    lengths = (out / "batches" / "uniform" / "step_all.jsonl").read_text().splitlines()
    assert len(lengths) == 4 * 12 * 4
    page = out / "report.html"
    assert page.is_file() and "data:image/png;base64," in page.read_text()
    exe = _chromium()
    if exe is None:
        pytest.skip("no chromium on PATH (scripts/test.sh installs Debian's chromium only when that upgrades no system package; docs/getting-started.md)")
    flags = [
        "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
        "--disable-background-networking", "--disable-component-update", "--disable-sync",
        f"--user-data-dir={tmp_path / 'profile'}",
    ]
    dom = subprocess.run(
        [exe, *flags, "--dump-dom", page.as_uri()], capture_output=True, text=True, timeout=120
    )
    assert 'id="figures"' in dom.stdout
    # step times, the timelines and the lengths always; q/m once the controller left balance
    isolated = any(s["m"] > 0 for s in steps if s["policy"] == "tailsieve")
    assert dom.stdout.count("<img") >= 3 + isolated
    for caption in ("Step time per policy", "Per-replica timelines", "Delivered response lengths"):
        assert caption in dom.stdout
    assert ("q (tail groups) and m (tail replicas)" in dom.stdout) == isolated


def test_demo_rejects_bad_config(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["demo", "--replicas", "1", "--no-progress"]) == 2
    assert "at least 2 replicas" in capsys.readouterr().err
