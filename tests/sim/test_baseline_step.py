"""One-shot baselines as simulated steps, and the top-k oracle's (q, m) search."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from tailsieve.core.pool import Pool
from tailsieve.errors import ConfigError
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.model.replica_time import all_admit_time
from tailsieve.model.speculative import SpecConfig
from tailsieve.policy.registry import get_policy
from tailsieve.sim.baseline_step import BASELINE_POLICIES, route_topk_oracle, run_baseline_step
from tailsieve.sim.replicas import PoolConfigs

GPU = load_profile("illustrative-flat")
POOLS = PoolConfigs.from_specs(ReplicaConfig(GPU))


def _lens(num_groups: int, n: int, seed: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    effect = rng.lognormal(0, 0.8, num_groups)[:, None]
    return np.rint(1000 * effect * rng.lognormal(0, 0.5, (num_groups, n))).astype(np.int64) + 1


def _brute_topk(lens: np.ndarray, num_replicas: int, pools: PoolConfigs) -> float:
    ranked = lens[np.argsort(-lens.sum(axis=1), kind="stable")]
    best = np.inf
    for m, q in itertools.product(range(1, num_replicas), range(1, lens.shape[0])):
        nb = num_replicas - m
        tail = [all_admit_time(ranked[j:q:m].ravel(), pools.tail.throughput) for j in range(m)]
        bulk = [all_admit_time(ranked[q + j::nb].ravel(), pools.bulk.throughput)
                for j in range(nb)]
        best = min(best, max(*tail, *bulk))
    return float(best)


@pytest.mark.parametrize("seed", range(4))
@pytest.mark.parametrize("spec", ["none", "mtp:3"])
def test_topk_oracle_finds_the_best_static_split(seed: int, spec: str) -> None:
    lens = _lens(12, 4, seed)
    pools = PoolConfigs.from_specs(ReplicaConfig(GPU), tail_spec=SpecConfig.parse(spec))
    ids = [f"g{i}" for i in range(12)]
    out, routing = run_baseline_step(0, ids, lambda p, s: lens[int(p[1:])], "topk-oracle", 4,
                                     pools)
    assert out.makespan_s == pytest.approx(_brute_topk(lens, 4, pools), rel=1e-9)
    assert 1 <= routing.q <= 11 and 1 <= len(routing.tail_replicas) <= 3
    tail_groups = [g for g in out.delivered if g.pool is Pool.TAIL]
    assert len(tail_groups) == routing.q


@pytest.mark.parametrize("name", [n for n in BASELINE_POLICIES if n != "topk-oracle"])
def test_registry_baselines_match_their_routing_makespan(name: str) -> None:
    lens = _lens(16, 8, 7)
    ids = [f"g{i}" for i in range(16)]
    out, _ = run_baseline_step(3, ids, lambda p, s: lens[int(p[1:])], name, 4, POOLS)
    expect = get_policy(name).route(list(lens), 4, GPU).makespan_s(list(lens), GPU)
    assert out.makespan_s == pytest.approx(expect, rel=1e-9)
    assert out.delivered_ids == tuple(ids) and not out.aborted
    assert out.generated_tokens == int(lens.sum()) and out.wasted_tokens == 0
    assert all(g.response_tokens == tuple(lens[i]) for i, g in enumerate(out.delivered))


def test_uniform_is_round_robin_by_group() -> None:
    lens = _lens(6, 2, 1)
    out, routing = run_baseline_step(0, [f"g{i}" for i in range(6)],
                                     lambda p, s: lens[int(p[1:])], "uniform", 4, POOLS)
    assert [g.replica for g in out.delivered] == [0, 1, 2, 3, 0, 1]
    assert (routing.replica[:, 0] == routing.replica[:, 1]).all()


def test_running_cap_is_simulated() -> None:
    lens = _lens(8, 8, 2)
    capped = PoolConfigs.single(ReplicaConfig(GPU, max_num_seqs=4))
    ids = [f"g{i}" for i in range(8)]
    free, _ = run_baseline_step(0, ids, lambda p, s: lens[int(p[1:])], "uniform", 2, POOLS)
    slow, _ = run_baseline_step(0, ids, lambda p, s: lens[int(p[1:])], "uniform", 2, capped)
    assert slow.makespan_s > free.makespan_s


def test_topk_single_replica_falls_back_to_one_pool() -> None:
    lens = _lens(4, 2, 3)
    routing = route_topk_oracle(lens, 1, POOLS)
    assert routing.tail_replicas == () and (routing.replica == 0).all()


def test_unknown_baseline() -> None:
    with pytest.raises(ConfigError):
        run_baseline_step(0, ["a"], lambda p, s: [1], "tailsieve", 2, POOLS)
