"""Per-request round-robin: length-blind, every response on its own replica in turn."""

from __future__ import annotations

import numpy as np
from hypothesis import given
from hypothesis import strategies as st

from tailsieve.model.profiles import load_profile
from tailsieve.policy.registry import get_policy

MODEL = load_profile("qwen3-4b-h100")


@given(
    sizes=st.lists(st.integers(1, 12), min_size=1, max_size=30),
    num_replicas=st.integers(1, 9),
)
def test_deals_requests_round_robin_and_balances_counts(sizes: list[int], num_replicas: int) -> None:
    groups = [np.ones(n) for n in sizes]
    routing = get_policy("uniform-requests").route(groups, num_replicas, MODEL)
    flat = np.concatenate(routing.replicas)
    assert np.array_equal(flat, np.arange(flat.size) % num_replicas)
    counts = np.bincount(flat, minlength=num_replicas)
    assert counts.max() - counts.min() <= 1


def test_never_reads_lengths() -> None:
    a = [np.array([1, 2, 3, 4]), np.array([9000, 1, 1, 1])]
    b = [np.array([5, 5, 5, 5]), np.array([1, 1, 1, 1])]
    pol = get_policy("uniform-requests")
    ra, rb = pol.route(a, 4, MODEL), pol.route(b, 4, MODEL)
    assert all(np.array_equal(x, y) for x, y in zip(ra.replicas, rb.replicas, strict=True))
    assert not pol.uses_lengths


def test_spreads_a_group_over_replicas_unlike_uniform() -> None:
    groups = [np.full(8, 100.0) for _ in range(4)]
    spread = get_policy("uniform-requests").route(groups, 8, MODEL)
    whole = get_policy("uniform").route(groups, 8, MODEL)
    assert all(len(set(p.tolist())) == 8 for p in spread.replicas)
    assert all(len(set(p.tolist())) == 1 for p in whole.replicas)
