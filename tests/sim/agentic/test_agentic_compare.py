"""Paired comparison of agentic policies, its tables and the CLI over it."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailsieve.cli.main import app
from tailsieve.errors import ConfigError
from tailsieve.sim.agentic.api import simulate_agentic
from tailsieve.sim.agentic.compare import AgenticSetup, compare_policies, setup_steps
from tailsieve.sim.agentic.policies import policy_spec
from tailsieve.sim.agentic.report import best_other, oracle_share


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
    res = simulate_agentic("math-code-agent", 2, ["cache-aware", "tailsieve", "oracle"], 2,
                           groups=4, group_size=2, warmup_steps=0, measured_steps=1)
    rows = res["policies"]
    assert set(rows) == {"verl-sticky", "cache-aware", "tailsieve", "oracle"}
    assert res["best_other"] == "cache-aware" == best_other(rows)
    assert all(0 <= r["hit_rate"] <= 1 for r in rows.values())
    share = oracle_share(rows)
    assert share is None or share == pytest.approx(
        (rows["tailsieve"]["speedup"] - 1) / (rows["oracle"]["speedup"] - 1))


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
