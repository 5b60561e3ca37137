"""The exact DP against brute force (all 2^n assignments) and structural properties."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from oracle_refs import brute_force_makespan

from tailsieve.errors import TraceError
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_time import all_admit_time
from tailsieve.model.throughput import ThroughputModel
from tailsieve.oracle import solve_two_replicas, topk_sweep

CPU = load_profile("cpu")
MAX_STATES_N100 = 200_000  # 8x the most these five instances keep (26,417)
GPU = load_profile("illustrative-flat")
# strongly concave-then-linear curve: aggregate throughput saturates quickly
STEEP = ThroughputModel.from_pairs([(1, 1.0), (2, 1.05), (3, 3.0), (8, 9.0)], name="steep")
MODELS = [CPU, GPU, STEEP]


def check_exact(lengths: np.ndarray, model: ThroughputModel) -> None:
    res = solve_two_replicas(lengths, model)
    ref = brute_force_makespan(lengths, model)
    assert res.makespan_s == pytest.approx(ref, rel=1e-9, abs=1e-12)
    # the returned assignment achieves the returned makespan
    t_a = all_admit_time(lengths[res.assignment == 0], model)
    t_b = all_admit_time(lengths[res.assignment == 1], model)
    assert max(t_a, t_b) == pytest.approx(res.makespan_s, rel=1e-12, abs=1e-12)
    assert res.replica_times_s == pytest.approx((t_a, t_b), rel=1e-12, abs=1e-12)
    assert res.makespan_s <= topk_sweep(lengths, model).best_makespan_s * (1 + 1e-12)


lengths_st = st.lists(st.integers(min_value=0, max_value=20_000), min_size=1, max_size=12)


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(lengths=lengths_st, which=st.sampled_from(range(len(MODELS))))
def test_dp_equals_brute_force_random(lengths: list[int], which: int) -> None:
    check_exact(np.array(lengths, dtype=np.float64), MODELS[which])


@settings(max_examples=30, deadline=None)
@given(
    value=st.integers(1, 16_000),
    n=st.integers(1, 12),
    which=st.sampled_from(range(len(MODELS))),
)
def test_all_equal_lengths(value: int, n: int, which: int) -> None:
    check_exact(np.full(n, float(value)), MODELS[which])


@settings(max_examples=30, deadline=None)
@given(
    base=st.lists(st.integers(1, 500), min_size=1, max_size=11),
    giant=st.integers(10_000, 1_000_000),
    which=st.sampled_from(range(len(MODELS))),
)
def test_one_giant_outlier(base: list[int], giant: int, which: int) -> None:
    check_exact(np.array([*base, giant], dtype=np.float64), MODELS[which])


@settings(max_examples=30, deadline=None)
@given(
    ratio=st.floats(1.05, 3.0),
    n=st.integers(2, 12),
    which=st.sampled_from(range(len(MODELS))),
)
def test_geometric_lengths(ratio: float, n: int, which: int) -> None:
    check_exact(np.round(100.0 * ratio ** np.arange(n)), MODELS[which])


@settings(max_examples=30, deadline=None)
@given(
    values=st.lists(st.sampled_from([100, 1_000, 16_000]), min_size=2, max_size=13),
    which=st.sampled_from(range(len(MODELS))),
)
def test_many_ties(values: list[int], which: int) -> None:
    check_exact(np.array(values, dtype=np.float64), MODELS[which])


def test_aime_draws_match_brute_force(aime_lengths: np.ndarray, profile: ThroughputModel) -> None:
    rng = np.random.default_rng(7)
    for _ in range(5):
        check_exact(rng.choice(aime_lengths, 13, replace=False), profile)


def test_tuning_knobs_do_not_change_the_result(aime_lengths: np.ndarray) -> None:
    rng = np.random.default_rng(3)
    lengths = rng.choice(aime_lengths, 60, replace=False)
    ref = solve_two_replicas(lengths, CPU).makespan_s
    for kwargs in ({"beam_width": 0}, {"beam_width": 4}, {"weights": (0.5,)}, {"weights": ()}):
        assert solve_two_replicas(lengths, CPU, **kwargs).makespan_s == pytest.approx(
            ref, rel=1e-12
        )


def test_n100_is_fast_and_small(aime_lengths: np.ndarray) -> None:
    """Fast by the work done, not the clock: the exact solve of 100 requests keeps at most
    ``MAX_STATES_N100`` DP states over all passes (0.2 s on the project's CPU; 2**100
    assignments exist)."""
    rng = np.random.default_rng(11)
    res = [solve_two_replicas(rng.choice(aime_lengths, 100, replace=False), CPU) for _ in range(5)]
    assert max(r.retained_states for r in res) <= MAX_STATES_N100
    assert all(r.makespan_s <= r.incumbent_makespan_s * (1 + 1e-12) for r in res)


def test_edge_cases() -> None:
    empty = solve_two_replicas([], CPU)
    assert empty.makespan_s == 0.0 and empty.assignment.size == 0
    one = solve_two_replicas([500], CPU)
    assert one.makespan_s == pytest.approx(500 * CPU.tau(1))
    assert one.assignment.tolist() == [0]
    zeros = solve_two_replicas([0, 0, 0], CPU)
    assert zeros.makespan_s == 0.0
    # the longest request is reported on replica A
    res = solve_two_replicas([10, 3000, 20, 5], GPU)
    assert res.assignment[1] == 0


@pytest.mark.parametrize("bad", [[1, -2], [1, float("nan")], [float("inf")], ["x"]])
def test_bad_lengths_raise_trace_error(bad: list[object]) -> None:
    with pytest.raises(TraceError, match=r"length|number"):
        solve_two_replicas(bad, CPU)  # type: ignore[arg-type]


def test_time_limit_raises_one_line_error(aime_lengths: np.ndarray) -> None:
    from tailsieve.errors import TailSieveError
    from tailsieve.oracle import OracleTimeoutError

    lengths = np.random.default_rng(0).choice(aime_lengths, 50, replace=False)
    with pytest.raises(OracleTimeoutError, match="ran out of time") as info:
        solve_two_replicas(lengths, CPU, time_limit_s=0.0)
    assert isinstance(info.value, TailSieveError)
    # without the count-split bound the result is the same
    a = solve_two_replicas(lengths, CPU).makespan_s
    b = solve_two_replicas(lengths, CPU, split_bound_max_n=0).makespan_s
    assert a == pytest.approx(b, rel=1e-12)
