"""``tailsieve simulate`` end to end on small settings."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailsieve.cli.main import app, main

SMALL = ["simulate", "--workload", "paper-math", "--replicas", "4", "--groups", "16",
         "--group-size", "4", "--steps", "5", "--num-prompts", "200"]


def test_json_output_has_every_policy_and_summary_field() -> None:
    res = CliRunner().invoke(app, [*SMALL, "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    names = [p["policy"] for p in data["policies"]]
    assert names == ["uniform", "uniform-requests", "uniform-oracle", "streamrl-oracle", "seer-oracle",
                     "topk-oracle", "tailsieve-fixed", "tailsieve"]
    for p in data["policies"]:
        for key in ("steady_step_s", "speedup_vs_uniform", "q_trajectory", "m_trajectory",
                    "wasted_token_fraction", "lower_bound_ratio"):
            assert key in p
        assert len(p["q_trajectory"]) == 5
        assert p["lower_bound_ratio"] >= 1.0
    assert data["policies"][0]["speedup_vs_uniform"] == pytest.approx(1.0)


def test_table_plots_and_records(tmp_path: Path) -> None:
    res = CliRunner().invoke(app, [*SMALL, "--policy", "tailsieve", "--tail-spec", "mtp:3",
                                   "--tail-strength", "strong", "--plot", str(tmp_path / "p"),
                                   "--out", str(tmp_path / "o"), "--q0", "2", "--m0", "1"])
    assert res.exit_code == 0, res.output
    assert "tailsieve" in res.output and "uniform" in res.output
    pngs = sorted(p.name for p in (tmp_path / "p").glob("*.png"))
    assert pngs == ["controller.png", "step_times.png", "timeline_tailsieve.png"]
    data = json.loads((tmp_path / "o" / "simulate.json").read_text())
    assert data["settings"]["tail_spec"] == "mtp:3"
    steps = data["steps"]["tailsieve"]
    assert steps[0]["is_warmup"] and steps[-1]["is_flush"]
    assert {"makespan_s", "tail_time_s", "bulk_cut_s", "q", "m", "num_aborted",
            "wasted_tokens", "generated_tokens", "delivered_ids"} <= set(steps[1])


def test_bad_policy_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SMALL, "--policy", "nope"]) == 2
    assert "unknown policy 'nope'" in capsys.readouterr().err


def test_bad_spec_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SMALL, "--tail-spec", "warp:3"]) == 2
    assert "speculative" in capsys.readouterr().err


def test_kv_capacity_flags_preempt_and_switch_off(tmp_path: Path) -> None:
    base = [*SMALL, "--policy", "uniform", "--policy", "tailsieve"]
    tight = CliRunner().invoke(app, [*base, "--kv-capacity", "30000", "--json",
                                     "--out", str(tmp_path)])
    assert tight.exit_code == 0, tight.output
    data = json.loads(tight.output)
    assert data["settings"]["kv_capacity_tokens"] == 30000
    assert data["policies"][0]["preemptions_per_step"] > 0
    steps = json.loads((tmp_path / "simulate.json").read_text())["steps"]["uniform"]
    assert sum(r["num_preemptions"] for r in steps) > 0
    assert all(r["recomputed_tokens"] >= r["num_preemptions"] for r in steps)
    assert all(sum(r["replica_preemptions"]) == r["num_preemptions"] for r in steps)
    assert any(len(r["replica_preemptions"]) == 4 for r in steps)
    off = json.loads(CliRunner().invoke(app, [*base, "--kv-capacity", "0", "--max-num-seqs",
                                              "0", "--json"]).output)
    assert off["settings"]["kv_capacity_tokens"] is None
    assert off["settings"]["max_num_seqs"] is None
    assert all(p["preemptions_per_step"] == 0 for p in off["policies"])
    default = json.loads(CliRunner().invoke(app, [*base, "--json"]).output)
    assert default["settings"]["kv_capacity_tokens"] == 444758
    # preemption only ever slows a step down
    assert data["policies"][0]["mean_step_s"] > off["policies"][0]["mean_step_s"]
    assert main([*base, "--kv-capacity", "-5"]) == 2


def test_json_has_step_diagnostics_and_the_paired_statistic() -> None:
    res = CliRunner().invoke(app, [*SMALL[:-4], "--steps", "7", "--num-prompts", "300",
                                   "--policy", "tailsieve", "--seeds", "2", "--json"])
    assert res.exit_code == 0, res.output
    data = json.loads(res.output)
    assert data["settings"]["seeds"] == 2 and data["settings"]["paired_steady_from"] == 5
    ts = next(p for p in data["policies"] if p["policy"] == "tailsieve")
    stat = ts["paired_stat"]
    assert stat["num_seeds"] == 2 and len(stat["per_seed"]) == 2
    assert stat["ci_low"] <= stat["mean"] <= stat["ci_high"]
    assert stat["num_steady_steps"] == 2  # steps 5 and 6
    steps = data["diagnostics"]["tailsieve"]
    assert [d["step"] for d in steps] == list(range(len(steps)))
    for key in ("predicted_tail_s", "predicted_bulk_s", "cutoff_s", "tail_time_s",
                "tail_idle_replica_s", "aborted_tokens", "aborted_replica_s", "wasted_fraction",
                "capture_rate", "tail_obs_over_pred", "bulk_obs_over_pred", "num_moves",
                "moved_tokens", "prefill_s"):
        assert key in steps[1]
    for key in ("moves_per_step", "moved_tokens_per_step", "prefill_s_per_step"):
        assert ts[key] >= 0
    assert data["diagnostics"]["uniform"][1]["num_moves"] == 0
    assert steps[0]["predicted_bulk_s"] is None and steps[1]["predicted_bulk_s"] > 0
    assert data["diagnostics"]["uniform"][0]["aborted_tokens"] == 0


def test_seeds_must_be_positive(capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*SMALL, "--seeds", "0"]) == 2
    assert "--seeds" in capsys.readouterr().err


def test_fluid_bound_next_to_the_oracles(tmp_path: Path) -> None:
    args = [*SMALL, "--policy", "uniform", "--policy", "seer-oracle"]
    res = CliRunner().invoke(app, [*args, "--json"])
    assert res.exit_code == 0, res.output
    uni = json.loads(res.output)["policies"][0]
    assert uni["policy"] == "uniform" and len(uni["fluid_bound_steps_s"]) == uni["num_steps"]
    assert uni["fluid_bound_total_s"] == pytest.approx(sum(uni["fluid_bound_steps_s"]))
    assert 0 < uni["steady_fluid_bound_s"] <= uni["steady_step_s"]
    res = CliRunner().invoke(app, [*args, "--out", str(tmp_path)])
    assert res.exit_code == 0, res.output
    row = next(line for line in res.output.splitlines() if "fluid bound" in line and "│" in line)
    assert f"{uni['steady_fluid_bound_s']:.2f}" in row
    assert f"<= {uni['steady_step_s'] / uni['steady_fluid_bound_s']:.3f}x" in row
    assert f"uniform {uni['fluid_bound_ratio']:.3f}" in res.output.replace("\n", " ")
    steps = json.loads((tmp_path / "simulate.json").read_text())["steps"]["uniform"]
    assert [s["fluid_bound_s"] for s in steps if not s["is_flush"]] == \
        pytest.approx(uni["fluid_bound_steps_s"])


def test_bounded_pieces_cost_seams_and_deferred_moves_drop_nothing() -> None:
    """``--piece-tokens``: the live runtime's pieces in the simulator. Without pieces moves are
    free to happen at once; with pieces so large that no response needs a second one, a
    deferred move never takes effect (no moves); small pieces with a seam cost time; bad
    values are one-line errors."""
    base = [*SMALL, "--policy", "tailsieve", "--json"]

    def steps(extra: list[str]) -> tuple[float, float]:
        res = CliRunner().invoke(app, [*base, *extra])
        assert res.exit_code == 0, res.output
        data = json.loads(res.output)
        pol = next(p for p in data["policies"] if p["policy"] == "tailsieve")
        assert data["settings"]["piece_tokens"] == (int(extra[1]) if extra else None)
        return float(pol["step_total_s"]), float(pol["moves_per_step"])

    free = steps([])
    assert free[1] > 0
    assert steps(["--piece-tokens", "1000000"])[1] == 0
    seams = steps(["--piece-tokens", "256", "--piece-seam-s", "0.5"])
    assert seams[1] > 0 and seams[0] != pytest.approx(free[0])
    assert main([*SMALL, "--piece-tokens", "0"]) == 2
    assert main([*SMALL, "--piece-tokens", "64", "--piece-moves", "sideways"]) == 2


def test_stream_interval_moves_at_once_and_reports_the_unsent_tokens_as_waste() -> None:
    """``--stream-interval K``: moves as on vLLM streamed in chunks of K: at once, the tokens
    generated since the last chunk decoded again (wasted, at most K - 1 per move); K = 1 is
    the ideal (every token kept)."""
    base = [*SMALL, "--policy", "tailsieve", "--json"]

    def run(k: int) -> dict:  # type: ignore[type-arg]
        res = CliRunner().invoke(app, [*base, "--stream-interval", str(k)])
        assert res.exit_code == 0, res.output
        data = json.loads(res.output)
        assert data["settings"]["stream_interval"] == k
        pol: dict = next(p for p in data["policies"] if p["policy"] == "tailsieve")  # type: ignore[type-arg]
        return pol

    ideal, chunked = run(1), run(64)
    assert ideal["wasted_token_fraction"] == 0.0 and ideal["moves_per_step"] > 0
    assert chunked["moves_per_step"] > 0 and chunked["wasted_token_fraction"] > 0
    assert main([*SMALL, "--stream-interval", "0"]) == 2
    assert main([*SMALL, "--stream-interval", "8", "--piece-tokens", "64"]) == 2


def test_drain_flags_reach_the_controller_and_the_settings() -> None:
    """``--no-drain-lpt`` / ``--drain-priority``: the drain's levers (docs/balancer.md#the-drain)
    are recorded in the settings and change the tailsieve run (LPT is on by default)."""
    base = [*SMALL[:-4], "--steps", "8", "--num-prompts", "300", "--policy", "tailsieve",
            "--json"]
    got = {}
    for extra in ([], ["--no-drain-lpt"], ["--drain-priority"]):
        res = CliRunner().invoke(app, [*base, *extra])
        assert res.exit_code == 0, res.output
        data = json.loads(res.output)
        assert data["settings"]["drain_lpt"] is ("--no-drain-lpt" not in extra)
        assert data["settings"]["drain_priority"] is ("--drain-priority" in extra)
        pol = next(p for p in data["policies"] if p["policy"] == "tailsieve")
        got[tuple(extra)] = float(pol["step_total_s"])
    assert got[()] != pytest.approx(got[("--no-drain-lpt",)])
