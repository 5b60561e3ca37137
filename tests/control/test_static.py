"""The static controller: (q, m) held, c = q, through the real protocol on the simulator."""

from __future__ import annotations

import pytest

from tailsieve.control.config import ControllerConfig
from tailsieve.control.factory import make_controller
from tailsieve.control.static import StaticController
from tailsieve.errors import ConfigError
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.sim.driver import SimSettings, epoch_prompt_ids, run_policies
from tailsieve.sim.replicas import PoolConfigs
from tailsieve.workload import load_workload

GPU = load_profile("illustrative-flat")


def test_factory_builds_it_from_q0_and_m0() -> None:
    cfg = ControllerConfig(num_groups=16, num_replicas=4, group_size=4, q0=5, m0=2)
    ctl = make_controller("tailsieve-static", cfg, GPU)
    assert isinstance(ctl, StaticController)
    t = ctl.targets()
    assert (t.q, t.m, t.num_extra) == (5, 2, 5)


def test_factory_requires_a_split() -> None:
    cfg = ControllerConfig(num_groups=16, num_replicas=4, group_size=4, q0=5)
    with pytest.raises(ConfigError, match="m0"):
        make_controller("tailsieve-static", cfg, GPU)


@pytest.mark.parametrize(("q", "m"), [(3, 4), (0, 1), (16, 1), (5, -1)])
def test_out_of_range_targets_are_rejected(q: int, m: int) -> None:
    with pytest.raises(ConfigError):
        StaticController(q, m, num_groups=16, num_replicas=4)


def test_state_must_match_on_restore() -> None:
    a = StaticController(4, 2, 16, 4)
    StaticController(4, 2, 16, 4).load_state_dict(a.state_dict())
    with pytest.raises(ConfigError, match="differ"):
        StaticController(6, 2, 16, 4).load_state_dict(a.state_dict())


def test_simulated_run_plans_the_held_targets_after_warm_up() -> None:
    wl = load_workload("paper-math", num_prompts=300, seed=3)
    s = SimSettings(num_replicas=4, num_groups=16, group_size=4, num_steps=6, seed=3, q0=5, m0=2)
    pools = PoolConfigs.from_specs(ReplicaConfig(GPU))
    ids = wl.prompt_ids()
    runs = run_policies(["tailsieve-static"], s, lambda: epoch_prompt_ids(ids, 3), wl, pools)
    recs = runs["tailsieve-static"].run.regular
    assert len(recs) == 6
    assert (recs[0].q, recs[0].m) == (0, 0)  # warm-up is uniform
    assert all((r.q, r.m) == (5, 2) for r in recs[1:])
