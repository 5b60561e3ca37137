"""Issue 11: the controller chooses between isolation and balance (m = 0, spread groups).

* the predicted makespan is the mean of per-step maxima (an alternating bottleneck must not
  look balanced);
* m = 0 is a candidate from any split and is reached in one move, also while q is unsettled;
* the cutoff's aborted groups are remembered (and checkpointed) as the cutoff saw them;
* end to end on the grounded profile, from m0 = 3 the controller leaves isolation for balance.
"""

from __future__ import annotations

import json

import pytest

from tailsieve.control.config import ControllerConfig
from tailsieve.control.outer_loop import OuterLoop
from tailsieve.control.predictor import PoolPrediction, PoolTimePredictor, StepWork
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.sim.driver import SimSettings, epoch_prompt_ids, run_policies
from tailsieve.sim.replicas import PoolConfigs
from tailsieve.sim.workloads import resolve_workload

GPU4B = load_profile("qwen3-4b-h100")


def test_makespan_is_the_mean_of_per_step_maxima() -> None:
    # tail-bound step then bulk-bound step: both pools average 15 s, every step took 20 s
    p = PoolPrediction(4, 2, 15.0, 15.0, ((20.0, 10.0), (10.0, 20.0)))
    assert p.makespan() == pytest.approx(20.0)
    assert p.makespan(k_tail=0.5) == pytest.approx(15.0)  # (max(10, 10) + max(5, 20)) / 2
    assert PoolPrediction(4, 2, 15.0, 12.0).makespan() == 15.0  # no per-step detail


def test_balance_is_a_candidate_from_any_split() -> None:
    cfg = ControllerConfig(num_groups=64, num_replicas=8)
    loop = OuterLoop(cfg, PoolTimePredictor(64, 8, GPU4B, GPU4B))
    assert loop.candidates(5) == [0, 3, 4, 5, 6, 7]
    assert loop.candidates(1) == [0, 1, 2, 3]
    no_uniform = ControllerConfig(num_groups=64, num_replicas=8, allow_uniform=False)
    assert OuterLoop(no_uniform, loop.predictor).candidates(5) == [3, 4, 5, 6, 7]


def test_aborted_groups_are_remembered_and_checkpointed() -> None:
    w = StepWork([[10, 20], [30, 40]], 1, aborted=[(1, 500), (0, 0)])
    back = StepWork.from_dict(json.loads(json.dumps(w.to_dict())))
    assert back == w
    assert StepWork.from_dict({"groups": [[1, 2]], "num_tail": 0}).aborted == []  # old format
    smp = PoolTimePredictor(2, 4, GPU4B, GPU4B).samples([w])[0]
    first, second = smp.extras(1), smp.extras(2)[2:]
    assert first[0] == 500 and first[1] > 1e8  # one finished response, one still running
    assert (second > 1e8).all()  # nothing had finished


def test_controller_leaves_isolation_for_balance_on_the_grounded_profile() -> None:
    pools = PoolConfigs.single(ReplicaConfig(GPU4B))
    wl = resolve_workload("paper-math", seed=0, num_prompts=600)
    s = SimSettings(num_replicas=8, num_groups=32, group_size=8, num_steps=10, seed=0, q0=1,
                    m0=3)
    runs = run_policies(["uniform", "tailsieve"], s,
                        lambda: epoch_prompt_ids(wl.prompt_ids(), 0), wl, pools)
    ms = runs["tailsieve"].run.m_trajectory
    assert ms[1] == 3 and ms[-1] == 0 and ms.index(0, 1) <= 7, ms
    last = runs["tailsieve"].run.records[-2]  # before the flush
    assert last.num_aborted == 0 and last.wasted_tokens == 0  # balance: nothing cut
