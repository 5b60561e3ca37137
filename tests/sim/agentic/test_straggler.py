"""A straggler in the agentic simulator: one replica slowed at everything it times, routers
that price it at its speed (or, as before, at one curve for every replica)."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest
from typer.testing import CliRunner

from tailsieve.cli.main import app
from tailsieve.errors import ConfigError
from tailsieve.session.admission import KvAdmission
from tailsieve.sim.agentic.compare import AgenticSetup, replica_configs, setup_steps
from tailsieve.sim.agentic.policies import policy_spec
from tailsieve.sim.agentic.replicas import Replicas
from tailsieve.sim.agentic.run import RunOptions, simulate_policy
from tailsieve.sim.agentic.stats import StepStats
from tailsieve.sim.agentic.step import StepOptions

PROFILE = "qwen3-4b-h100"


def test_slowdowns_scale_a_replica_and_routers_see_what_they_are_told() -> None:
    fast, slow = replica_configs(PROFILE, 2, (1.0, 4.0))
    assert slow.throughput.tau(8) == pytest.approx(4 * fast.throughput.tau(8))
    assert slow.prefill_cost_s(3000) == pytest.approx(4 * fast.prefill_cost_s(3000))
    three = replica_configs(PROFILE, 3, (2.0,))
    assert three[1] is three[2] and three[0].throughput.tau(1) > three[1].throughput.tau(1)
    told = Replicas([fast, slow])
    assert told.views(0.0)[1].config is slow
    blind = Replicas([fast, slow], priced_as=[fast, fast])
    assert blind.views(0.0)[1].config is fast and blind.engines[1].config is slow
    with pytest.raises(ConfigError, match="priced_as"):
        Replicas([fast, slow], priced_as=[fast])
    with pytest.raises(ConfigError, match="slowdowns"):
        replica_configs(PROFILE, 2, (1.0, 0.0))
    with pytest.raises(ConfigError, match="3 slowdowns for 2"):
        AgenticSetup("swe-agent", 2, slowdowns=(1.0, 1.0, 2.0))


def test_tailsieve_gives_a_straggler_less_work() -> None:
    setup = AgenticSetup("swe-agent", 3, num_groups=8, group_size=4, warmup_steps=1,
                         measured_steps=1, seeds=(0,), slowdowns=(1.0, 1.0, 4.0))
    steps = setup_steps(setup, 0)
    truth = replica_configs(PROFILE, 3, setup.slowdowns)

    def step_s(policy: str, options: RunOptions | None = None) -> float:
        st = simulate_policy(steps, truth, policy_spec(policy), 0, options, 1)[-1]
        assert st is not None
        return st.step_s

    verl, tailsieve = step_s("verl-sticky"), step_s("tailsieve")
    one_curve = step_s("tailsieve", RunOptions(step=StepOptions(
        priced_as=tuple(replica_configs(PROFILE, 3)))))
    assert verl / tailsieve >= 1.3
    assert tailsieve < one_curve


def test_cli_slowdowns(tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    r = CliRunner().invoke(app, ["agentic", "simulate", "--preset", "search-agent",
                                 "--replicas", "2", "--policies", "tailsieve", "--seeds", "1",
                                 "--groups", "2", "--group-size", "2", "--warmup-steps", "0",
                                 "--measured-steps", "1", "--slowdowns", "1,3",
                                 "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert json.loads(out.read_text())["slowdowns"] == [1.0, 3.0]
    bad = CliRunner().invoke(app, ["agentic", "simulate", "--slowdowns", "1,x"])
    assert isinstance(bad.exception, ConfigError) and "--slowdowns" in str(bad.exception)


def test_moves_off_a_straggler_keep_within_admissions_reservations(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """KV-bound SWE sessions with admission by KV room: turns moved mid-turn off the slow
    replica go only where the reservations leave room. Without that bound they fill the fast
    replicas past their KV, and the contexts of their sessions in a tool call are evicted
    (hit rate about 0.4, 18 preemptions against 3 on this seed)."""
    setup = AgenticSetup("swe-agent", 3, PROFILE, 16, 8, 2, 1, (0,), slowdowns=(1.0, 1.0, 4.0))
    truth = replica_configs(PROFILE, 3, setup.slowdowns)

    def measured() -> StepStats:
        got = simulate_policy(setup_steps(setup, 0), truth, policy_spec("tailsieve"), 0,
                              RunOptions(), 2)[-1]
        assert got is not None and got.midturn_moves > 0
        return got

    bounded = measured()
    monkeypatch.setattr(KvAdmission, "rooms", lambda self: [math.inf] * len(self.budget))
    unbounded = measured()
    assert bounded.hit_rate > unbounded.hit_rate + 0.2
    assert bounded.preemptions < unbounded.preemptions
    assert bounded.step_s < 0.9 * unbounded.step_s
