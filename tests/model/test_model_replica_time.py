"""Closed-form all-admit times against the event-driven ReplicaEngine."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.model.profiles import builtin_profile
from tailsieve.model.replica_engine import ReplicaConfig, ReplicaEngine
from tailsieve.model.replica_time import (
    all_admit_completion_times,
    all_admit_time,
    replica_completion_times,
    replica_time,
)

CPU = builtin_profile("cpu")
GPU = builtin_profile("illustrative-flat")
lengths_st = st.lists(st.integers(0, 5_000), min_size=0, max_size=40)


def engine_times(lengths: list[int], config: ReplicaConfig) -> np.ndarray:
    eng = ReplicaEngine(config)
    for i, n in enumerate(lengths):
        eng.submit(i, n)
    out = np.zeros(len(lengths))
    while eng.has_work():
        for c in eng.pop_next():
            out[int(c.request_id)] = c.time_s  # type: ignore[call-overload]
    return out


def token_by_token(lengths: list[int], model: object) -> float:
    """Literal simulation: one decode step at a time."""
    left = [n for n in lengths if n > 0]
    t = 0.0
    while left:
        t += model.tau(len(left))  # type: ignore[attr-defined]
        left = [n - 1 for n in left if n > 1]
    return t


@settings(max_examples=60, deadline=None)
@given(lengths_st, st.booleans())
def test_all_admit_equals_engine(lengths: list[int], gpu: bool) -> None:
    model = GPU if gpu else CPU
    sim = engine_times(lengths, ReplicaConfig(model))
    closed = all_admit_completion_times(lengths, model)
    assert closed == pytest.approx(sim, rel=1e-9, abs=1e-12)
    expect = float(sim.max()) if lengths else 0.0
    assert all_admit_time(lengths, model) == pytest.approx(expect, rel=1e-9, abs=1e-12)


@settings(max_examples=20, deadline=None)
@given(st.lists(st.integers(0, 60), min_size=0, max_size=12))
def test_all_admit_equals_token_by_token(lengths: list[int]) -> None:
    assert all_admit_time(lengths, CPU) == pytest.approx(token_by_token(lengths, CPU), rel=1e-9)


@settings(max_examples=60, deadline=None)
@given(lengths_st, st.integers(0, 5_000))
def test_marginal_cost_identity(lengths: list[int], extra: int) -> None:
    shorter = min([extra, *lengths])  # shorter than (or equal to) everything already there
    before = all_admit_time(lengths, CPU)
    after = all_admit_time([*lengths, shorter], CPU)
    n = len(lengths)  # the shorter one adds one step per token at batch n + 1
    marginal = shorter * (CPU.tau(n + 1) - CPU.tau(n))
    assert after - before == pytest.approx(marginal, rel=1e-9, abs=1e-12)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(0, 3_000), min_size=1, max_size=25))
def test_cap_one_is_sequential_sum(lengths: list[int]) -> None:
    cfg = ReplicaConfig(CPU, max_num_seqs=1)
    times = replica_completion_times(lengths, cfg)
    expect = np.cumsum(np.array(lengths, dtype=np.float64) * CPU.tau(1))
    assert times == pytest.approx(expect, rel=1e-9, abs=1e-12)
    assert replica_time(lengths, cfg) == pytest.approx(float(expect[-1]), rel=1e-9)


@settings(max_examples=40, deadline=None)
@given(lengths_st.filter(bool), st.integers(1, 50))
def test_cap_not_binding_equals_all_admit(lengths: list[int], extra: int) -> None:
    cfg = ReplicaConfig(GPU, max_num_seqs=len(lengths) + extra)
    assert replica_time(lengths, cfg) == pytest.approx(all_admit_time(lengths, GPU), rel=1e-9)


def test_cap_slows_down_and_prefill_adds() -> None:
    lengths = [4000, 100, 100, 100, 3000, 50]
    free = replica_time(lengths, ReplicaConfig(CPU))
    capped = replica_time(lengths, ReplicaConfig(CPU, max_num_seqs=2))
    assert capped >= free
    pre = replica_time(lengths, ReplicaConfig(CPU, prefill_s=0.5))
    assert pre > free


def test_order_of_input_is_irrelevant_without_cap() -> None:
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 5000, 30)
    a = all_admit_completion_times(lengths, CPU)
    perm = rng.permutation(30)
    b = all_admit_completion_times(lengths[perm], CPU)
    assert a[perm] == pytest.approx(b)
