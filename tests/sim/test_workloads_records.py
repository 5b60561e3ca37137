"""Tail-strength wrapping of workloads and the per-policy summary numbers."""

from __future__ import annotations

import numpy as np
import pytest

from tailsieve.sim.records import PolicyRun, StepRecord
from tailsieve.sim.workloads import TailStrengthWorkload, resolve_workload


@pytest.mark.parametrize(("strength", "ratio"), [("weak", 1.5), ("strong", 6.0), ("3", 3.0)])
def test_tail_strength_sets_p90_over_p50(strength: str, ratio: float) -> None:
    wl = resolve_workload("paper-math", strength, seed=0, num_prompts=400)
    assert isinstance(wl, TailStrengthWorkload)
    rng = np.random.default_rng(1)
    lens = np.concatenate([wl.group_lengths(p, 0, 8, rng) for p in wl.prompt_ids()])
    p50, p90 = np.percentile(lens, [50, 90])
    assert p90 / p50 == pytest.approx(ratio, rel=0.1)


def test_real_strength_is_the_base_workload() -> None:
    assert not isinstance(resolve_workload("paper-math", "real", num_prompts=50),
                          TailStrengthWorkload)


def _rec(step: int, makespan: float, lb: float, flush: bool = False) -> StepRecord:
    return StepRecord(step, makespan, 0.0, makespan, 1, 1, 1, 0, 10, 100, lb, 0.001,
                      step == 0, flush, (), (), (), ())


def test_summary_numbers() -> None:
    run = PolicyRun("x", [_rec(0, 10, 5), _rec(1, 8, 4), _rec(2, 6, 3), _rec(3, 4, 2),
                          _rec(4, 1, 1, flush=True)])
    base = PolicyRun("uniform", [_rec(i, 12, 6) for i in range(4)])
    s = run.summary(base)
    assert s["steady_step_s"] == pytest.approx(6.0)  # flush excluded
    assert s["speedup_vs_uniform"] == pytest.approx(2.0)
    assert s["mean_speedup_vs_uniform"] == pytest.approx(12 / 6)  # steps 1..3
    assert s["lower_bound_ratio"] == pytest.approx(2.0)
    assert s["wasted_token_fraction"] == pytest.approx(0.1)
    assert s["q_trajectory"] == [1, 1, 1, 1]
