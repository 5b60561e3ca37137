"""Paired comparison of agentic policies, its tables and the CLI over it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailsieve.cli.main import app
from tailsieve.errors import ConfigError
from tailsieve.sim.agentic.api import simulate_agentic
from tailsieve.sim.agentic.compare import AgenticSetup, ceiling, compare_policies, setup_steps
from tailsieve.sim.agentic.policies import policy_spec
from tailsieve.sim.agentic.report import best_other, gap_share, policy_table


def test_policies_are_paired_against_verl() -> None:
    setup = AgenticSetup("search-agent", 2, num_groups=4, group_size=2, warmup_steps=1,
                         measured_steps=1, seeds=(0, 1))
    res = compare_policies(setup, ["tailsieve", "turn-round-robin"])
    assert list(res) == ["verl-sticky", "tailsieve", "turn-round-robin"]
    assert res["verl-sticky"].per_seed_speedup == [1.0, 1.0]
    assert len(res["tailsieve"].stats) == 2  # the warm-up step is not measured
    a = setup_steps(setup, 0)
    assert [t.key for t in a[1]] == [t.key for t in setup_steps(setup, 0)[1]]
    assert [t.key for t in a[1]] != [t.key for t in setup_steps(setup, 1)[1]] or \
        [t.turns for t in a[1]] != [t.turns for t in setup_steps(setup, 1)[1]]


def test_summary_tables_and_shares() -> None:
    res = simulate_agentic("math-code-agent", 2, ["cache-aware", "tailsieve", "length-informed"],
                           2, groups=4, group_size=2, warmup_steps=0, measured_steps=1)
    rows = res["policies"]
    assert set(rows) == {"verl-sticky", "cache-aware", "tailsieve", "length-informed"}
    assert res["best_other"] == "cache-aware" == best_other(rows)
    assert all(0 <= r["hit_rate"] <= 1 for r in rows.values())
    ceil = res["bound"]["speedup"]
    assert all(ceil >= r["speedup"] * (1 - 1e-9) for r in rows.values())
    assert res["tailsieve_gap_share"] == gap_share(rows["tailsieve"]["speedup"], ceil)
    assert res["best_other_gap_share"] == gap_share(rows["cache-aware"]["speedup"], ceil)
    assert res["routing_bound"] == (ceil > 1.05)
    table = policy_table(rows, res["bound"])
    assert "| lower bound (no router passes it) |" in table and "| length-informed |" in table


def test_ceiling_pairs_verl_with_each_steps_bound() -> None:
    setup = AgenticSetup("search-agent", 2, num_groups=4, group_size=2, warmup_steps=1,
                         measured_steps=2, seeds=(0, 1))
    verl = compare_policies(setup, [])["verl-sticky"]
    res = ceiling(setup, verl)
    assert len(res.bounds) == 4 and len(res.per_seed_ceiling) == 2
    assert all(v >= b.bound_s * (1 - 1e-9) for v, b in zip(verl.step_s, res.bounds,
                                                            strict=True))
    assert res.per_seed_ceiling[0] == pytest.approx(
        (verl.step_s[0] / res.bounds[0].bound_s + verl.step_s[1] / res.bounds[1].bound_s) / 2)


def test_gap_share_is_the_share_of_verls_time_gap() -> None:
    # verl 100 s, bound 80 s (1.25x), a policy at 90 s (1.111x): half the gap
    assert gap_share(100 / 90, 1.25) == pytest.approx(0.5)
    assert gap_share(1.25, 1.25) == pytest.approx(1.0)
    assert gap_share(1.05, 1.001) is None and gap_share(None, 1.2) is None


def test_unknown_names_are_clear_errors() -> None:
    with pytest.raises(ConfigError, match="unknown agentic policy"):
        policy_spec("nope")
    with pytest.raises(ConfigError, match="unknown agentic preset"):
        simulate_agentic("nope", 2, seeds=1)


def test_cli_agentic_simulate(tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    r = CliRunner().invoke(app, ["agentic", "simulate", "--preset", "search-agent",
                                 "--replicas", "2", "--groups", "4", "--group-size", "2",
                                 "--seeds", "2", "--policies", "tailsieve",
                                 "--warmup-steps", "0", "--measured-steps", "1",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert "| tailsieve |" in r.output
    assert json.loads(out.read_text())["policies"]["tailsieve"]["speedup"] > 0
