"""The tailsieve controller drives the balancer: settings from measurements, m = 0 only."""

from __future__ import annotations

import dataclasses

import pytest

from tailsieve.control.config import ControllerConfig
from tailsieve.control.factory import make_controller
from tailsieve.control.hierarchical import HierarchicalController
from tailsieve.control.step_sample import StepWork
from tailsieve.errors import ConfigError
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.sim.driver import SimSettings, epoch_prompt_ids, run_policies
from tailsieve.sim.replicas import PoolConfigs
from tailsieve.sim.workloads import resolve_workload

GPU4B = load_profile("qwen3-4b-h100")


def test_balance_settings_scale_with_the_observed_step() -> None:
    cfg = ControllerConfig(num_groups=16, num_replicas=4)
    ctl = make_controller("tailsieve", cfg, GPU4B)
    assert isinstance(ctl, HierarchicalController)
    first = ctl.targets().balance
    assert first is not None and first.expected_step_s == 0.0
    assert first.interval_s == pytest.approx(40 * cfg.seam_s)
    ctl.state.step_ema_s = 320.0
    bal = ctl.targets().balance
    assert bal is not None
    assert bal.interval_s == pytest.approx(320.0 / cfg.checks_per_step)
    assert bal.horizon_at(20.0) == pytest.approx(300.0)
    # a tail pool step runs the paper's protocol without moves
    ctl.state.m, ctl.state.q = 1, 2
    assert ctl.targets().balance is None
    # the fixed-allocation variant never moves
    fixed = make_controller("tailsieve-fixed", cfg, GPU4B)
    assert fixed.targets().balance is None


def test_balance_settings_carry_the_drain_levers_and_the_evidence() -> None:
    """LPT in the drain is on by default with the remembered steps' finished lengths as its
    evidence; engine priority only when asked for; both off: no drain settings."""
    cfg = ControllerConfig(num_groups=2, num_replicas=2)
    ctl = make_controller("tailsieve", cfg, GPU4B)
    assert isinstance(ctl, HierarchicalController)
    ctl.state.history.append(StepWork([[10, 20], [30, 40]], 0))
    bal = ctl.targets().balance
    assert bal is not None and bal.drain is not None
    assert bal.drain.lpt and not bal.drain.priority
    assert sorted(bal.drain.lengths) == [10, 20, 30, 40]
    both = make_controller("tailsieve", dataclasses.replace(cfg, drain_priority=True), GPU4B)
    got = both.targets().balance
    assert got is not None and got.drain is not None and got.drain.priority
    off = make_controller("tailsieve", dataclasses.replace(cfg, drain_lpt=False), GPU4B)
    got = off.targets().balance
    assert got is not None and got.drain is None
    with pytest.raises(ConfigError, match="drain_start_fraction"):
        ControllerConfig(num_groups=2, num_replicas=2, drain_start_fraction=2.0)


def test_the_drain_shortens_balanced_steps() -> None:
    """The same run with and without LPT in the drain: the drain's steps are shorter."""
    pools = PoolConfigs.single(ReplicaConfig.from_profile(GPU4B))
    wl = resolve_workload("paper-math", seed=0, num_prompts=400)
    total = {}
    for lpt in (False, True):
        s = SimSettings(num_replicas=4, num_groups=16, group_size=8, num_steps=8, seed=0,
                        drain_lpt=lpt)
        run = run_policies(["tailsieve"], s, lambda: epoch_prompt_ids(wl.prompt_ids(), 0), wl,
                           pools)["tailsieve"].run
        total[lpt] = sum(r.makespan_s for r in run.regular if r.step >= 3)
    assert total[True] < total[False]


def test_moves_are_recorded_checkpointed_and_gain_over_uniform_requests() -> None:
    pools = PoolConfigs.single(ReplicaConfig.from_profile(GPU4B))
    wl = resolve_workload("paper-math", seed=1, num_prompts=400)
    s = SimSettings(num_replicas=4, num_groups=16, group_size=8, num_steps=7, seed=1)
    runs = run_policies(["uniform-requests", "tailsieve"], s,
                        lambda: epoch_prompt_ids(wl.prompt_ids(), 1), wl, pools)
    ur, ts = runs["uniform-requests"].run, runs["tailsieve"].run
    assert ts.moves_per_step > 0 and ts.prefill_s_per_step > 0
    assert ts.wasted_token_fraction == 0.0
    steps = [r for r in ts.regular if r.step >= 2]
    assert sum(r.makespan_s for r in steps) < sum(
        r.makespan_s for r in ur.regular if r.step >= 2)
    summ = ts.summary(ur)
    assert summ["moves_per_step"] == pytest.approx(ts.moves_per_step)
    proto = runs["tailsieve"].protocol
    assert proto is not None
    ctl = proto.controller
    assert isinstance(ctl, HierarchicalController)
    assert ctl.state.step_ema_s > 0
    again = make_controller("tailsieve", s.controller_config(), GPU4B)
    again.load_state_dict(ctl.state_dict())
    assert again.targets() == ctl.targets()
