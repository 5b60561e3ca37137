"""The paired speedup statistic on hand-made runs, and its t-interval against scipy."""

from __future__ import annotations

import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.errors import ConfigError
from tailsieve.sim.records import PolicyRun, StepRecord
from tailsieve.sim.speedup_stats import (
    STEADY_FROM,
    last_steps_speedup,
    paired_step_ratios,
    seed_speedup,
    speedup_stat,
    speedup_table,
    t_interval,
    t_quantile_975,
)


def _rec(step: int, makespan: float, flush: bool = False) -> StepRecord:
    return StepRecord(step, makespan, 0.0, makespan, 0, 0, 0, 0, 0, 1, 1.0, 0.0,
                      step == 0, flush, (), (), (), ())


def _run(name: str, times: list[float], flush: float | None = None) -> PolicyRun:
    recs = [_rec(i, t) for i, t in enumerate(times)]
    if flush is not None:
        recs.append(_rec(len(times), flush, flush=True))
    return PolicyRun(name, recs)


def test_paired_ratios_skip_warmup_settling_and_flush() -> None:
    uni = _run("uniform", [10.0] * 8)
    pol = _run("p", [100.0, 100.0, 100.0, 100.0, 100.0, 5.0, 4.0, 10.0], flush=0.001)
    ratios = paired_step_ratios(uni, pol, steady_from=5)
    assert ratios == {5: 2.0, 6: 2.5, 7: 1.0}
    assert seed_speedup(uni, pol, 5) == pytest.approx((2.0 + 2.5 + 1.0) / 3)
    # the paper's column: ratio of the means of the last three regular steps
    assert last_steps_speedup(uni, pol) == pytest.approx(30.0 / 19.0)


def test_too_few_steps_is_an_error() -> None:
    uni, pol = _run("uniform", [1.0] * 3), _run("p", [1.0] * 3)
    with pytest.raises(ConfigError, match="no steady steps"):
        seed_speedup(uni, pol, STEADY_FROM)


def test_stat_over_seeds_hand_computed() -> None:
    seeds = []
    for r in (1.1, 1.2, 1.3, 1.4, 1.5):
        seeds.append({"uniform": _run("uniform", [r * 10.0] * 7), "p": _run("p", [10.0] * 7)})
    s = speedup_stat("p", seeds, steady_from=5)
    assert s.mean == pytest.approx(1.3)
    half = 2.776 * math.sqrt(0.025) / math.sqrt(5)  # sd of 1.1..1.5 is sqrt(0.025)
    assert s.ci_low == pytest.approx(1.3 - half)
    assert s.ci_high == pytest.approx(1.3 + half)
    assert s.per_seed == pytest.approx((1.1, 1.2, 1.3, 1.4, 1.5))
    assert s.last3_mean == pytest.approx(1.3)
    assert (s.num_seeds, s.steady_from, s.num_steady_steps) == (5, 5, 2)
    assert s.label() == f"1.300x [{1.3 - half:.3f}, {1.3 + half:.3f}]"
    table = speedup_table(seeds, steady_from=5)
    assert list(table) == ["uniform", "p"]
    assert table["uniform"].mean == 1.0
    assert s.to_dict()["per_seed"] == list(s.per_seed)


def test_one_seed_has_no_interval() -> None:
    s = speedup_stat("p", [{"uniform": _run("u", [2.0] * 6), "p": _run("p", [1.0] * 6)}])
    assert s.mean == 2.0 and s.ci_low is None and s.label() == "2.000x"
    with pytest.raises(ConfigError):
        speedup_stat("q", [{"uniform": _run("u", [2.0] * 6)}])


@settings(max_examples=40, deadline=None)
@given(st.lists(st.floats(0.5, 2.0), min_size=2, max_size=40))
def test_t_interval_matches_scipy(values: list[float]) -> None:
    stats = pytest.importorskip("scipy.stats")
    mean, lo, hi = t_interval(values)
    x = np.asarray(values)
    if x.std(ddof=1) == 0:
        assert lo == hi == pytest.approx(mean)
        return
    ref = stats.t.interval(0.95, len(x) - 1, loc=x.mean(), scale=stats.sem(x))
    assert mean == pytest.approx(x.mean())
    assert hi - mean == pytest.approx(ref[1] - x.mean(), rel=2e-3, abs=1e-9)
    assert mean - lo == pytest.approx(x.mean() - ref[0], rel=2e-3, abs=1e-9)


def test_t_quantiles() -> None:
    stats = pytest.importorskip("scipy.stats")
    for df in (1, 4, 10, 30, 31, 60, 500):
        assert t_quantile_975(df) == pytest.approx(stats.t.ppf(0.975, df), rel=2e-3)
    with pytest.raises(ConfigError):
        t_quantile_975(0)
