"""The online fit recovers a known decode curve from simulated request timings, holds k where
contexts are too short to show it, and refuses nonsense with clear errors."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from online_sim import lockstep_observation, run_replica

from tailsieve.errors import ProfileError
from tailsieve.model.decode_observations import DecodeLedger, PieceObservation, PrefillObservation
from tailsieve.model.online_fit import (
    FitSettings,
    fit_decode,
    fit_prefill,
    knots_for,
    ramp_basis,
)


def tau_true(b: float) -> float:
    return 0.003 + 0.00012 * b


def simulated(k: float, noise: float = 0.0, steps: int = 4, seed: int = 0,
              clock: bool = True) -> tuple[list[PieceObservation], DecodeLedger]:
    """Observations of ``steps`` simulated steps on two replicas; with ``clock`` harvested a
    second time on the first fit's step clock (as ``OnlineProfile`` does step after step)."""
    ledgers = []
    for _ in range(2 if clock else 1):
        led = DecodeLedger()
        r = np.random.default_rng(seed)
        t = 0.0
        for s in range(steps):
            for rep in ("a", "b"):
                run_replica(led, r, tau_true, k, noise=noise, replica=rep, t0=t)
            t += 1000.0 * (s + 1)
        ledgers.append(led)
    obs = ledgers[0].harvest()
    if clock:
        model = fit_decode(obs).model()
        obs = ledgers[1].harvest(model)
    return obs, ledgers[-1]


def step_error(fit_model: object, obs: list[PieceObservation], k: float) -> float:
    """Token-weighted relative error of the step time at the (b, C) the pieces ran at."""
    b = np.concatenate([np.asarray(o.batch) for o in obs])
    c = np.concatenate([np.asarray(o.context_tokens) for o in obs])
    d = np.concatenate([np.asarray(o.durations_s) for o in obs])
    truth = 0.003 + 0.00012 * b + k * c
    got = fit_model.tau_array(b) + fit_model.context_s_per_token * c  # type: ignore[attr-defined]
    return float(np.average(np.abs(got - truth) / truth, weights=d / truth))


@pytest.mark.parametrize(("k", "tolerance"), [(0.0, 0.05), (2e-7, 0.05), (2e-6, 0.08)])
def test_recovers_the_step_time_where_the_steps_ran(k: float, tolerance: float) -> None:
    # 2e-6 s/token: the context term is five times tau at b = 64 (a long-context regime)
    obs, _ = simulated(k, noise=0.3)
    fit = fit_decode(obs)
    assert fit.quality.ready, fit.quality.reason
    assert step_error(fit.model(), obs, k) < tolerance


def test_recovers_tau_and_k_when_contexts_vary() -> None:
    obs, _ = simulated(2e-7, noise=0.3)
    fit = fit_decode(obs)
    assert fit.context_s_per_token == pytest.approx(2e-7, rel=0.15)
    for b, t in zip(fit.knots, fit.tau_s, strict=True):
        if b >= 16:  # where most decode steps ran
            assert t == pytest.approx(tau_true(b), rel=0.08)
    assert fit.quality.rel_rmse < 0.05
    assert fit.quality.batch_max <= 64 and fit.quality.batch_levels >= 4


def test_noise_free_overhead_is_recovered_roughly() -> None:
    obs, _ = simulated(0.0, noise=0.0)
    fit = fit_decode(obs)
    assert 0.0 <= fit.overhead_s < 0.01  # 2 ms answer overhead plus up to a step of admission


def test_the_curve_is_monotone_and_positive() -> None:
    obs, _ = simulated(0.0, noise=1.0, steps=1)
    fit = fit_decode(obs)
    assert all(t > 0 for t in fit.tau_s)
    assert list(fit.tau_s) == sorted(fit.tau_s)
    m = fit.model()
    assert m.tau(200) >= m.tau(64)  # extrapolated beyond the largest knot, still monotone


@settings(max_examples=30, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 300), st.floats(0.01, 5.0), st.integers(1, 40),
                          st.floats(0, 5e4)), min_size=1, max_size=30))
def test_any_valid_observations_give_a_valid_model(rows: list[tuple[int, float, int, float]],
                                                   ) -> None:
    obs = [lockstep_observation(g, t, b, c) for g, t, b, c in rows]
    fit = fit_decode(obs)
    m = fit.model()  # ThroughputModel validates: positive, non-decreasing
    assert m.tau(1) > 0 and fit.context_s_per_token >= 0 and fit.overhead_s >= 0
    assert fit.quality.num_observations + fit.quality.num_trimmed == len(obs)


def test_k_is_held_at_the_prior_when_contexts_are_short() -> None:
    # a lockstep probe: batch and context rise together, contexts of tens of tokens
    obs = [lockstep_observation(g, 0.01 + g * (tau_true(b) + 1e-6 * b * (g / 2)), b,
                                     b * g / 2) for b in (1, 6, 32) for g in (12, 48)
           for _ in range(4)]
    assert fit_decode(obs, context_prior_s_per_token=0.0).context_s_per_token == 0.0
    assert fit_decode(obs, context_prior_s_per_token=5e-8).context_s_per_token == 5e-8
    loose = FitSettings(min_context_tokens=0.0)
    assert fit_decode(obs, loose).context_s_per_token > 0  # fitted once allowed


def test_ready_needs_enough_varied_pieces() -> None:
    one_level = [lockstep_observation(100, 0.5, 8) for _ in range(40)]
    q = fit_decode(one_level).quality
    assert not q.ready and "batch size" in q.reason
    few = [lockstep_observation(100, 0.3 + 0.01 * b, b) for b in (1, 8, 32)]
    q = fit_decode(few).quality
    assert not q.ready and "timed pieces" in q.reason


def test_nonsense_is_refused_clearly() -> None:
    with pytest.raises(ProfileError, match="no timed piece"):
        fit_decode([])
    with pytest.raises(ProfileError, match="duration_s must be a positive"):
        lockstep_observation(10, -1.0, 4)
    with pytest.raises(ProfileError, match="duration_s must be a positive"):
        lockstep_observation(10, float("nan"), 4)
    with pytest.raises(ProfileError, match="tokens must be a positive integer"):
        lockstep_observation(0, 1.0, 4)
    with pytest.raises(ProfileError, match="batch must be >= 1"):
        PieceObservation(10, 1.0, (1.0,), (0.0,), (0.0,))
    with pytest.raises(ProfileError, match="stretches last"):
        PieceObservation(10, 1.0, (0.4,), (2.0,), (0.0,))
    with pytest.raises(ProfileError, match="one length"):
        PieceObservation(10, 1.0, (1.0,), (2.0, 3.0), (0.0,))
    with pytest.raises(ProfileError, match="context tokens"):
        PieceObservation(10, 1.0, (1.0,), (2.0,), (-5.0,))
    with pytest.raises(ProfileError, match="expected PieceObservation"):
        fit_decode([(10, 1.0)])  # type: ignore[list-item]
    with pytest.raises(ProfileError, match="ttft_s"):
        PrefillObservation(100, 0.0)
    with pytest.raises(ProfileError, match="min_observations"):
        FitSettings(min_observations=1)


def test_prefill_rate_from_times_to_first_token() -> None:
    rng = np.random.default_rng(3)
    obs = [PrefillObservation(int(p), 0.02 + 40e-6 * p * (1 + 0.02 * rng.standard_normal()))
           for p in rng.integers(30, 900, 20)]
    got = fit_prefill(obs)
    assert got is not None and got.s_per_token == pytest.approx(40e-6, rel=0.1)
    assert fit_prefill(obs[:3]) is None  # too few
    assert fit_prefill([PrefillObservation(100, 0.1 + 1e-3 * i) for i in range(8)]) is None


def test_knots_and_ramp_basis() -> None:
    assert knots_for(1) == (1,)
    assert knots_for(33) == (1, 2, 4, 8, 16, 32, 64)
    basis = ramp_basis(np.array([1.0, 3.0, 8.0, 100.0]), (1, 2, 4, 8))
    tau = np.array([2.0, 1.0, 0.5, 0.25])  # tau(1), then increments
    assert np.allclose(basis @ tau, [2.0, 3.25, 3.75, 3.75])
