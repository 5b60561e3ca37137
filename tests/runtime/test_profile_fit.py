"""Fitting measured decode points into a throughput profile (``runtime.profile_fit``): the
running maximum, the context term ``k`` and the points moved to zero context."""

from __future__ import annotations

import pytest

from tailsieve.runtime.profile_fit import BatchMeasurement, build_model, fit_context


def test_build_model_is_monotone() -> None:
    ms = [BatchMeasurement(1, 0.010, 0.01, 0.01, 0.0, 1.0),
          BatchMeasurement(2, 0.009, 0.009, 0.009, 0.0, 1.0),  # noise: faster at b=2
          BatchMeasurement(4, 0.012, 0.012, 0.012, 0.0, 1.0)]
    model = build_model(ms, "m", "src")
    assert [p.step_s for p in model.points] == pytest.approx([0.010, 0.010, 0.012])


def test_fit_context_and_zero_context_points() -> None:
    k = 2e-6
    ctx = [BatchMeasurement(8, 0.01 + k * 8 * p, 0, 0, 0.0, 1.0, prompt_tokens=p)
           for p in (1, 200, 800)]
    assert fit_context(ctx) == pytest.approx(k)
    assert fit_context(ctx[:1]) == 0.0
    ms = [BatchMeasurement(b, 0.01 + 1e-4 * b + k * b * (1 + 0.625 * 100), 0, 0, 0.0, 1.0,
                           prompt_tokens=1) for b in (1, 4, 16)]
    model = build_model(ms, "m", "src", context_s_per_token=k, tokens=100)
    assert [p.step_s for p in model.points] == pytest.approx([0.01 + 1e-4 * b for b in (1, 4, 16)])
    assert model.context_s_per_token == k and model.provenance["kind"] == "measured"
    assert model.provenance["fit"]["a0_s"] == pytest.approx(0.01)
    assert model.provenance["fit"]["c_s_per_request"] == pytest.approx(1e-4)
