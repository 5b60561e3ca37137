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


@pytest.mark.skipif(chromium() is None, reason="no chromium on PATH (scripts/test.sh installs Debian's chromium only when that upgrades no system package; docs/getting-started.md)")
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
    assert 'id="headline"' in dom.stdout and "Per policy" in dom.stdout
    shot = tmp_path / "shot.png"
    subprocess.run([exe, *flags, f"--screenshot={shot}", "--window-size=1000,2400", page.as_uri()], capture_output=True, timeout=120)
    pixels = mpimg.imread(shot)
    assert pixels.shape[0] == 2400
    # plots are drawn: many distinct colours, not a blank or error page
    colours = np.unique((pixels[..., :3] * 255).astype(np.uint8).reshape(-1, 3), axis=0)
    assert len(colours) > 50


def make_paired_run(folder: Path) -> None:
    """A demo-shaped folder: steps of uniform and tailsieve, the same step's timelines."""
    plan, out = tiny_step()
    tl = StepTimeline.from_step(plan, out).to_dict()
    rows = []
    for pol, times, q, m in (
        ("uniform", [12.0, 10.0, 11.0, 10.5, 10.0, 9.5], 0, 0),
        ("tailsieve", [12.0, 9.0, 10.0, 9.5, 9.0, 9.0], 6, 2),
    ):
        for s, t in enumerate(times):
            rows.append({"policy": pol, "step": s, "makespan_s": t, "q": q if s else 0,
                         "m": m if s else 0, "is_flush": False, "generated_tokens": 1000,
                         "wasted_tokens": 100 if pol == "tailsieve" else 0})
    (folder / "steps.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (folder / "timelines.json").write_text(json.dumps({"uniform": tl, "tailsieve": tl}))
    (folder / "demo.json").write_text(json.dumps({
        "settings": {"replicas": 8, "groups": 64},
        "policies": [
            {"policy": "uniform", "steady_step_s": 10.0, "mean_step_s": 10.2,
             "speedup_vs_uniform": 1.0, "mean_speedup_vs_uniform": 1.0,
             "wasted_token_fraction": 0.0, "q_trajectory": [0] * 6, "m_trajectory": [0] * 6},
            {"policy": "tailsieve", "steady_step_s": 9.17, "mean_step_s": 9.3,
             "speedup_vs_uniform": 1.09, "mean_speedup_vs_uniform": 1.097,
             "wasted_token_fraction": 0.1, "q_trajectory": [0, 6, 6, 6, 6, 6],
             "m_trajectory": [0, 2, 2, 2, 2, 2]},
        ],
    }))


def test_headline_states_the_paired_speedup_with_its_interval(tmp_path: Path) -> None:
    from tailsieve.report.headline import headline_sentences, paired_speedup

    make_paired_run(tmp_path)
    run = load_run(tmp_path)
    sp = paired_speedup(run, "tailsieve")
    assert sp is not None and sp.num_steps == 5  # warm-up step 0 excluded; too few from step 5
    assert sp.first_step == 1 and "(warm-up step excluded)" in " ".join(headline_sentences(run))
    assert sp.speedup == pytest.approx(51.0 / 46.5)
    assert sp.low is not None and sp.high is not None and sp.low <= sp.speedup <= sp.high
    assert sp.low > 1.0  # every paired step was faster
    words = " ".join(headline_sentences(run))
    assert f"{sp.speedup:.3f}x faster than Uniform" in words and "95% interval" in words
    assert "10.0% of all generated tokens" in words
    assert "q = 6 tail groups on m = 2 of 8 replicas" in words
    assert f"a mean step of {sp.policy_mean_s:.2f} emulated s against" in words  # a demo's unit
    run.settings["served_model_name"] = "smollm2"  # a demo on real servers measures seconds
    assert f"a mean step of {sp.policy_mean_s:.2f} s against" in " ".join(headline_sentences(run))
    run.kind = "simulate"
    assert "modelled s against" in " ".join(headline_sentences(run))


def test_headline_pairs_the_steady_steps_when_the_run_has_them(tmp_path: Path) -> None:
    """As the demo's table: with at least 3 common steps from ``STEADY_FROM`` on, the headline
    pairs only those (the controller's first steps excluded) and says so."""
    from tailsieve.report.headline import headline_sentences, paired_speedup
    from tailsieve.sim.speedup_stats import STEADY_FROM

    make_paired_run(tmp_path)
    steps = tmp_path / "steps.jsonl"
    times = {"uniform": [10.0, 10.0, 10.0, 10.0, 12.0], "tailsieve": [11.0, 11.0, 9.0, 10.0, 9.0]}
    extra = [{"policy": pol, "step": 6 + k, "makespan_s": t, "q": 0, "m": 0, "is_flush": False,
              "generated_tokens": 1000, "wasted_tokens": 0}
             for pol, ts in times.items() for k, t in enumerate(ts)]
    steps.write_text(steps.read_text() + "".join(json.dumps(r) + "\n" for r in extra))
    run = load_run(tmp_path)
    sp = paired_speedup(run, "tailsieve")
    assert sp is not None and sp.first_step == STEADY_FROM == 5 and sp.num_steps == 6
    assert sp.speedup == pytest.approx((9.5 + 52.0) / (9.0 + 50.0))  # steps 5-10 only
    assert "from step 5: the warm-up and the controller's first steps excluded" in " ".join(
        headline_sentences(run))


def test_headline_leads_with_the_baseline_a_user_already_has(tmp_path: Path) -> None:
    """With ``uniform-requests`` in the run, the first sentence compares with it (what a
    per-request load balancer does), the second with Uniform."""
    from tailsieve.report.headline import headline_sentences, paired_speedup

    make_paired_run(tmp_path)
    steps = tmp_path / "steps.jsonl"
    extra = [{"policy": "uniform-requests", "step": s, "makespan_s": t, "q": 0, "m": 0,
              "is_flush": False, "generated_tokens": 1000, "wasted_tokens": 0}
             for s, t in enumerate([12.0, 9.5, 10.0, 9.0, 9.5, 9.0])]
    steps.write_text(steps.read_text() + "".join(json.dumps(r) + "\n" for r in extra))
    run = load_run(tmp_path)
    over_rr = paired_speedup(run, "tailsieve", reference="uniform-requests")
    assert over_rr is not None and over_rr.speedup == pytest.approx(47.0 / 46.5)
    first, second = headline_sentences(run)[:2]
    assert first.startswith(f"TailSieve was {over_rr.speedup:.3f}x faster than per-request "
                            "round-robin")
    assert "faster than Uniform" in second


def test_report_reads_like_a_result(tmp_path: Path) -> None:
    make_paired_run(tmp_path)
    text = write_report(tmp_path).read_text()
    head = text[: text.index("<h2>Per policy")]
    assert 'id="headline"' in head and "faster than Uniform" in head and "95% interval" in head
    assert "Mean step time (s, after warm-up)" in text and "Tokens wasted (% of generated)" in text
    assert "steady_step_s" not in text.split('id="summary"')[1].split("</table>")[0]
    # no policy has a lower-bound ratio: the column is left out, not printed empty
    assert "lower bound" not in text
    assert "Per-replica timelines of step 1, side by side" in text
    assert "axis starts at zero" in text


def test_step_time_axis_starts_at_zero(tmp_path: Path) -> None:
    from tailsieve.report.plots import step_times_figure

    make_paired_run(tmp_path)
    fig = step_times_figure(load_run(tmp_path))
    assert fig is not None and fig.axes[0].get_ylim()[0] == 0.0


def test_side_by_side_timelines_share_one_time_axis(tmp_path: Path) -> None:
    from tailsieve.report.plots import timelines_side_by_side

    make_paired_run(tmp_path)
    run = load_run(tmp_path)
    assert timelines_side_by_side(run.timelines, tmp_path / "t.png") is not None
    img = mpimg.imread(tmp_path / "t.png")
    assert img.shape[1] > 1.5 * img.shape[0]  # two panels in one row


def test_demo_picks_the_same_step_for_every_policy() -> None:
    from tailsieve.runtime.demo import PolicyResult, timeline_step

    plan, out = tiny_step()
    tl = StepTimeline.from_step(plan, out)

    def at(step: int, m: int) -> StepTimeline:
        return StepTimeline(step, tl.num_replicas, m and 1, m, tl.cutoff_s, tl.tail_time_s,
                            tl.bulk_cut_s, tl.makespan_s, tl.bars)

    uni = PolicyResult("uniform", timelines=[at(s, 0) for s in range(6)])
    ts = PolicyResult("tailsieve", timelines=[at(0, 0), at(1, 1), at(2, 1), at(3, 1), at(4, 0),
                                              at(5, 0)])
    assert timeline_step({"uniform": uni, "tailsieve": ts}, last_step=5) == 3
    assert timeline_step({"uniform": uni}, last_step=4) == 4


def test_timeline_puts_a_spread_group_on_every_replica_it_ran_on() -> None:
    a = (
        GroupAssignment("s0", Pool.BULK, 0, False, 0, (0, 1)),
        GroupAssignment("s1", Pool.BULK, 1, False, 0, (1, 0)),
        GroupAssignment("w0", Pool.BULK, 0, False, 1),
    )
    plan = StepPlan(1, 2, 2, 2, 0, 0, 0, (), (0, 1), a, 2, ("s0", "s1", "w0"), False, False)
    out = StepOutcome(
        1,
        (GroupResult("s0", Pool.BULK, 0, 5.0, (50, 40)),
         GroupResult("s1", Pool.BULK, 1, 3.0, (30, 20))),
        (AbortedGroup("w0", 0, 1, 20, -1, 60),),
        0.0, 5.0, 5.0, 60, 200,
    )
    tl = StepTimeline.from_step(plan, out)
    by_id = {b.prompt_id: b for b in tl.bars}
    assert by_id["s0"].on_replicas == (0, 1) and by_id["s1"].on_replicas == (0, 1)
    assert by_id["w0"].on_replicas == (0,)
    assert StepTimeline.from_dict(tl.to_dict()) == tl


def test_summary_shows_moves_and_the_speedup_over_round_robin(tmp_path: Path) -> None:
    """Beside the speedup over Uniform, the summary table has the paired speedup over
    per-request round-robin and the moves per step, when the run recorded them."""
    make_run(tmp_path)
    blob = json.loads((tmp_path / "simulate.json").read_text())
    blob["policies"] = [
        {"policy": "uniform", "steady_step_s": 10.0, "moves_per_step": 0.0},
        {"policy": "tailsieve", "steady_step_s": 6.0, "paired_speedup_vs_requests": 1.123,
         "moves_per_step": 91.4},
    ]
    (tmp_path / "simulate.json").write_text(json.dumps(blob))
    table = write_report(tmp_path).read_text().split('id="summary"')[1].split("</table>")[0]
    assert "Paired speedup vs per-request round-robin" in table and "1.123x" in table
    assert "Moves per step" in table and ">91<" in table


def test_headline_names_the_three_kinds_of_waste_with_their_bounds(tmp_path: Path) -> None:
    """A live run's step records split the waste: tokens of cutoff aborts, tokens decoded again
    counted exactly, and estimated ones, each estimate with its bound. Records that do not
    split it (the simulator's) are not called "aborted at the cutoff" alone."""
    from tailsieve.report.headline import headline_sentences

    make_paired_run(tmp_path)
    steps = tmp_path / "steps.jsonl"
    rows = [json.loads(x) for x in steps.read_text().splitlines()]
    for r in rows:
        live = r["policy"] == "tailsieve"
        r.update(cutoff_wasted_tokens=60 if live else 0, cutoff_estimated_tokens=20 if live else 0,
                 cutoff_max_tokens=90 if live else 0, lost_exact_tokens=15 if live else 0,
                 lost_estimated_tokens=25 if live else 0,
                 lost_estimated_max_tokens=64 if live else 0)
    steps.write_text("".join(json.dumps(r) + "\n" for r in rows))
    words = " ".join(headline_sentences(load_run(tmp_path)))
    assert ("Tokens wasted: 10.0% of all generated tokens (600 tokens): 360 on groups aborted "
            "at the cutoff (120 of them estimated; at most 540); 90 decoded again after a fault "
            "or a move, counted exactly, and 150 estimated (at most 384).") in words
    make_paired_run(tmp_path)  # no split in the records
    run = load_run(tmp_path)
    run.kind = "simulate"
    words = " ".join(headline_sentences(run))
    assert "on groups aborted at the cutoff and on responses decoded again after a move or a " \
           "fault (counted exactly by the simulator)" in words
