"""The fluid perfect-balance bound: below the optimum of every tiny case found by brute force
(any placement, free moves, idling allowed), exact where it must be, and below every policy's
simulated step (tests/sim/test_fluid_bound_sim.py)."""

from __future__ import annotations

import itertools
from functools import cache

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.errors import ConfigError
from tailsieve.model.throughput import ThroughputModel
from tailsieve.oracle.fluid_bound import fluid_bound, fluid_bound_s


def brute_force_makespan(lengths: tuple[int, ...], prompts: tuple[int, ...],
                         taus: tuple[float, ...], k: float, num_replicas: int) -> float:
    """The least makespan over every discrete schedule: each replica, when free, runs one
    iteration of any subset of the unfinished responses no other replica is running (a move
    is free) or waits for another replica's iteration to end; an iteration of ``b`` responses
    holding ``C`` context tokens lasts ``taus[b] + k * C`` and gives each of them one token."""
    n = len(lengths)

    @cache
    def solve(done: tuple[int, ...], busy: tuple[tuple[float, frozenset[int]] | None, ...]
              ) -> float:
        # ``busy``: per replica, (seconds until its iteration ends, responses in it) or None
        if all(d == L for d, L in zip(done, lengths, strict=True)) and all(
                b is None for b in busy):
            return 0.0
        running = set().union(*(b[1] for b in busy if b is not None))
        free = [r for r, b in enumerate(busy) if b is None]
        avail = [i for i in range(n) if done[i] < lengths[i] and i not in running]
        best = np.inf
        # every way to hand the available responses to the free replicas (or leave them out)
        for owner in itertools.product([-1, *free], repeat=len(avail)):
            new = list(busy)
            for r in free:
                members = frozenset(i for i, o in zip(avail, owner, strict=True) if o == r)
                if members:
                    ctx = sum(prompts[i] + done[i] for i in members)
                    new[r] = (taus[len(members)] + k * ctx, members)
            if all(b is None for b in new):
                continue  # nothing runs: waiting for nothing is not a schedule
            dt = min(b[0] for b in new if b is not None)
            nxt_done = list(done)
            nxt: list[tuple[float, frozenset[int]] | None] = []
            for b in new:
                if b is not None and b[0] <= dt + 1e-12:
                    for i in b[1]:
                        nxt_done[i] += 1
                    nxt.append(None)
                elif b is not None:
                    nxt.append((round(b[0] - dt, 12), b[1]))
                else:
                    nxt.append(None)
            best = min(best, dt + solve(tuple(nxt_done), tuple(nxt)))
        return float(best)

    return solve(tuple(0 for _ in lengths), tuple(None for _ in range(num_replicas)))


def table(taus: list[float]) -> ThroughputModel:
    return ThroughputModel.from_pairs(list(enumerate(taus, start=1)))


@st.composite
def tiny_cases(draw: st.DrawFn) -> tuple[tuple[int, ...], tuple[int, ...], list[float], float,
                                         int]:
    n = draw(st.integers(1, 3))
    lengths = tuple(draw(st.lists(st.integers(1, 3), min_size=n, max_size=n)))
    prompts = tuple(draw(st.lists(st.sampled_from([0, 1, 4]), min_size=n, max_size=n)))
    steps = draw(st.lists(st.floats(0.0, 2.0), min_size=n - 1, max_size=n - 1))
    tau1 = draw(st.floats(0.2, 3.0))
    taus = [tau1]
    for d in steps:  # any non-decreasing table: concave, convex or flat
        taus.append(taus[-1] + d)
    k = draw(st.sampled_from([0.0, 0.05, 0.5]))
    return lengths, prompts, taus, k, draw(st.integers(1, 2))


@settings(max_examples=120, deadline=None)
@given(tiny_cases())
def test_bound_never_exceeds_the_brute_force_optimum(
        case: tuple[tuple[int, ...], tuple[int, ...], list[float], float, int]) -> None:
    lengths, prompts, taus, k, r = case
    model = table(taus).with_context(k)
    opt = brute_force_makespan(lengths, prompts, (0.0, *taus), k, r)
    bound = fluid_bound_s(lengths, model, r, prompts)
    assert bound <= opt * (1 + 1e-9) + 1e-12, (bound, opt)


def test_counterexample_to_lockstep_perfect_balance() -> None:
    """Literal "every replica at the same cost at every moment" (lockstep, n_s / R each) is not
    a lower bound: one long response alone on one replica and a one-token response with a long
    prompt in a single iteration on the other beat it. The fluid bound stays below."""
    lengths, prompts, taus, k = (3, 1), (0, 7), [1.0, 1.0], 0.5
    model = table(taus).with_context(k)
    opt = brute_force_makespan(lengths, prompts, (0.0, *taus), k, 2)
    # placement: the long one alone (3 iterations of 1 + 0.5 j), the other alone once
    placed = max(sum(1.0 + k * j for j in range(3)), 1.0 + k * 7)
    lens, ps = np.array(lengths), np.array(prompts)
    lockstep = sum(1.0 + k * float(np.sum((ps + s)[lens > s])) / 2 for s in range(3))
    assert opt == pytest.approx(placed) == pytest.approx(4.5)
    assert lockstep == pytest.approx(5.5)  # the literal version is above the optimum
    assert fluid_bound_s(lengths, model, 2, prompts) <= opt


def test_exact_for_one_response_and_for_lockstep_on_one_replica() -> None:
    model = table([2.0, 2.5, 3.0, 3.5]).with_context(0.1)  # linear from b = 1: g = tau
    # one response: its own iterations, nothing else
    fb = fluid_bound((5,), model, 4, (3,))
    assert fb.bound_s == pytest.approx(5 * 2.0 + 0.1 * (3 * 5 + 10)) and fb.level == -1
    # one replica, a linear table: lockstep (everything together) is optimal and the bound
    lengths, prompts = (3, 2, 2, 1), (1, 0, 2, 0)
    lockstep = sum(model.tau(sum(s < L for L in lengths))
                   + 0.1 * sum(p + s for L, p in zip(lengths, prompts, strict=True) if s < L)
                   for s in range(3))
    assert fluid_bound_s(lengths, model, 1, prompts) == pytest.approx(lockstep)
    assert brute_force_makespan(lengths, prompts, (0.0, 2.0, 2.5, 3.0, 3.5), 0.1, 1) == \
        pytest.approx(lockstep)


def test_spread_term_is_total_work_over_r_and_inputs_checked() -> None:
    model = table([1.0, 1.0, 1.0, 1.0])  # flat: g(b) = 1 for every b >= 1
    fb = fluid_bound((4, 4, 4, 4), model, 2)
    assert fb.spread_s == pytest.approx(4 * 1.0 / 2)  # one pooled iteration per level, / R
    assert fb.bound_s == pytest.approx(4.0)  # the chain of 4 iterations dominates
    assert fluid_bound_s([], model, 3) == 0.0 and fluid_bound_s([0, 0], model, 3) == 0.0
    with pytest.raises(ConfigError):
        fluid_bound_s([1], model, 0)
    with pytest.raises(ConfigError):
        fluid_bound_s([1], model, 1, [-1])
