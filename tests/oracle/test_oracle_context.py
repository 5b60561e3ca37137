"""The oracle under the context term (per request ``k * (P L + L^2 / 2)``): the DP, top-k,
bounds and lower bound against brute force and the independent MILP, prompts included."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from milp_reference import milp_makespan
from oracle_refs import brute_force_makespan, lagrangian_bounds, min_remaining_work

from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.model.replica_time import all_admit_time, context_costs, replica_time
from tailsieve.model.throughput import ThroughputModel
from tailsieve.oracle import makespan_lower_bound, solve_two_replicas, topk_sweep
from tailsieve.oracle.pareto_dp import SPLIT_WEIGHTS
from tailsieve.oracle.split_bound import CountSplitBound
from tailsieve.oracle.summary import summarize

QWEN = load_profile("qwen3-4b-h100")
CPU_HEAVY = load_profile("cpu").with_context(3e-6)  # context dominates the step time
STEEP_K = ThroughputModel.from_pairs(
    [(1, 1.0), (2, 1.05), (3, 3.0), (8, 9.0)], name="steep"
).with_context(2e-5)
MODELS = [QWEN, CPU_HEAVY, STEEP_K]

lengths_st = st.lists(st.integers(0, 20_000), min_size=1, max_size=11)


def check(lengths: np.ndarray, model: ThroughputModel, prompts: np.ndarray | None) -> None:
    res = solve_two_replicas(lengths, model, prompt_tokens=prompts)
    ref = brute_force_makespan(lengths, model, prompts)
    assert res.makespan_s == pytest.approx(ref, rel=1e-9, abs=1e-12)
    for r in (0, 1):
        on = res.assignment == r
        t = all_admit_time(lengths[on], model, None if prompts is None else prompts[on])
        assert res.replica_times_s[r] == pytest.approx(t, rel=1e-9, abs=1e-12)
        # the closed form is the simulator's replica time (event engine when prompts matter)
        cfg = ReplicaConfig(model)
        sim = replica_time(lengths[on], cfg, None if prompts is None else prompts[on])
        assert t == pytest.approx(sim, rel=1e-9, abs=1e-12)
    sweep = topk_sweep(lengths, model, prompts)
    assert res.makespan_s <= sweep.best_makespan_s * (1 + 1e-12)
    lb = makespan_lower_bound(lengths, model, 2, prompts)
    assert lb <= res.makespan_s * (1 + 1e-12) + 1e-12


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lengths=lengths_st, which=st.sampled_from(range(len(MODELS))), seed=st.integers(0, 99),
       with_prompts=st.booleans())
def test_dp_with_context_equals_brute_force(
    lengths: list[int], which: int, seed: int, with_prompts: bool
) -> None:
    arr = np.array(lengths, dtype=np.float64)
    prompts = np.random.default_rng(seed).integers(0, 8_000, arr.size).astype(np.float64)
    check(arr, MODELS[which], prompts if with_prompts else None)


def test_context_changes_the_optimum_and_aime_draws_stay_exact(aime_lengths: np.ndarray) -> None:
    rng = np.random.default_rng(21)
    for _ in range(4):
        lengths = rng.choice(aime_lengths, 13, replace=False)
        check(lengths, QWEN, rng.integers(50, 2_000, 13).astype(np.float64))
        check(lengths, CPU_HEAVY, None)
    lengths = np.array([16_000.0, 9_000, 9_000, 8_000, 500, 400])
    flat = solve_two_replicas(lengths, CPU_HEAVY.with_context(0.0)).makespan_s
    assert solve_two_replicas(lengths, CPU_HEAVY).makespan_s > flat


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 20_000), min_size=1, max_size=30), st.booleans(),
       st.integers(0, 99))
def test_topk_with_context_matches_direct_evaluation(
    lengths: list[int], heavy: bool, seed: int
) -> None:
    model = CPU_HEAVY if heavy else QWEN
    arr = np.array(lengths, dtype=np.float64)
    prompts = np.random.default_rng(seed).integers(0, 4_000, arr.size).astype(np.float64)
    sweep = topk_sweep(arr, model, prompts)
    order = np.argsort(-arr, kind="stable")
    ls, ps = arr[order], prompts[order]
    for k in range(ls.size + 1):
        assert sweep.tail_s[k] == pytest.approx(
            all_admit_time(ls[:k], model, ps[:k]), rel=1e-12, abs=1e-12)
        assert sweep.bulk_s[k] == pytest.approx(
            all_admit_time(ls[k:], model, ps[k:]), rel=1e-12, abs=1e-12)


@settings(max_examples=25, deadline=None)
@given(st.lists(st.integers(0, 16_000), min_size=2, max_size=8), st.integers(0, 7),
       st.sampled_from(range(len(MODELS))), st.integers(0, 99))
def test_bounds_with_context_are_below_best_completion(
    lengths: list[int], k_raw: int, which: int, seed: int
) -> None:
    model = MODELS[which]
    raw = np.array(lengths, dtype=np.float64)
    order = np.argsort(-raw, kind="stable")
    ls = raw[order]
    ps = np.random.default_rng(seed).integers(0, 8_000, ls.size).astype(np.float64)
    own = context_costs(ls, model, ps)
    n = ls.size
    k = k_raw % n
    taus = model.taus(n)
    marg = np.diff(taus)
    split = CountSplitBound(ls, marg, SPLIT_WEIGHTS, own)
    tables = [(w, min_remaining_work(ls, marg, w, own)) for w in (0.3, 0.5, 0.7)]

    def times(bits: tuple[int, ...]) -> tuple[float, float]:
        out, count = [0.0, 0.0], [0, 0]
        for i, r in enumerate(bits):
            out[r] += ls[i] * marg[count[r]] + own[i]
            count[r] += 1
        return out[0], out[1]

    for prefix in itertools.product((0, 1), repeat=k):
        best = min(max(times(prefix + rest)) for rest in itertools.product((0, 1), repeat=n - k))
        ta, tb = times(prefix)
        a = np.array([k - sum(prefix)], dtype=np.int64)
        assert split(k, a, np.array([ta]), np.array([tb]))[0] <= best * (1 + 1e-12) + 1e-12
        lb = lagrangian_bounds(k, a, np.array([ta]), np.array([tb]), tables)[0]
        assert lb <= best * (1 + 1e-12) + 1e-12


def test_lower_bound_takes_the_long_requests_own_context() -> None:
    lengths = np.array([10_000.0, 100, 100])
    prompts = np.array([2_000.0, 0, 0])
    k = QWEN.context_s_per_token
    lb = makespan_lower_bound(lengths, QWEN, 2, prompts)
    assert lb >= 10_000 * QWEN.tau(1) + k * (2_000 * 10_000 + 10_000**2 / 2) - 1e-12
    summary, _, _ = summarize(lengths, QWEN, prompts)
    assert summary.lower_bound_s == pytest.approx(lb)
    assert summary.lower_bound_s <= summary.optimal_makespan_s


@pytest.mark.slow
@pytest.mark.parametrize(("which", "n", "seed"), [(0, 20, 1), (1, 22, 2), (0, 24, 3)])
def test_dp_with_context_equals_milp(aime_lengths: np.ndarray, which: int, n: int,
                                     seed: int) -> None:
    pytest.importorskip("scipy")
    model = MODELS[which]
    rng = np.random.default_rng(seed)
    lengths = rng.choice(aime_lengths, n, replace=False)
    prompts = rng.integers(50, 3_000, n).astype(np.float64)
    assert solve_two_replicas(lengths, model, prompt_tokens=prompts).makespan_s == pytest.approx(
        milp_makespan(lengths, model, prompt_tokens=prompts), rel=1e-7
    )
