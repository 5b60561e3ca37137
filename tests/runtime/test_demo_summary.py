"""The demo's paired speedup over Uniform, on hand-made step metrics."""

from __future__ import annotations

import pytest

from tailsieve.runtime.demo import PolicyResult
from tailsieve.runtime.step.observe import StepMetrics


def _m(policy: str, step: int, makespan: float, flush: bool = False) -> StepMetrics:
    return StepMetrics(step=step, policy=policy, num_groups=4, q=0, m=0, makespan_s=makespan,
                       tail_time_s=0.0, bulk_cut_s=makespan, wall_s=makespan, num_launched=4,
                       num_aborted=0, num_regenerated=0, generated_tokens=10, wasted_tokens=0,
                       delivered_tokens=10, num_carried_next=0, num_healthy_replicas=2,
                       is_flush=flush)


def test_paired_speedup_over_the_steady_steps() -> None:
    uni = PolicyResult("uniform", [_m("uniform", t, 10.0) for t in range(8)])
    ts = PolicyResult("tailsieve", [_m("tailsieve", t, 20.0 if t < 5 else 5.0 * (t - 3))
                                    for t in range(8)] + [_m("tailsieve", 8, 1.0, flush=True)])
    s = ts.summary(uni)
    assert s["paired_steps"] == [5, 6, 7]
    assert s["paired_speedup"] == pytest.approx((1.0 + 10 / 15 + 0.5) / 3)
    assert uni.summary(uni)["paired_speedup"] == pytest.approx(1.0)


def test_short_demo_pairs_every_step_after_warmup() -> None:
    uni = PolicyResult("uniform", [_m("uniform", t, 6.0) for t in range(3)])
    ts = PolicyResult("tailsieve", [_m("tailsieve", t, 3.0) for t in range(3)])
    s = ts.summary(uni)
    assert s["paired_steps"] == [1, 2] and s["paired_speedup"] == pytest.approx(2.0)


def test_paired_speedup_over_per_request_round_robin() -> None:
    uni = PolicyResult("uniform", [_m("uniform", t, 6.0) for t in range(3)])
    rr = PolicyResult("uniform-requests", [_m("uniform-requests", t, 4.0) for t in range(3)])
    ts = PolicyResult("tailsieve", [_m("tailsieve", t, 3.0) for t in range(3)])
    s = ts.summary(uni, rr)
    assert s["paired_speedup"] == pytest.approx(2.0)
    assert s["paired_speedup_vs_requests"] == pytest.approx(4.0 / 3.0)
    assert rr.summary(uni, rr)["paired_speedup_vs_requests"] is None  # not against itself
