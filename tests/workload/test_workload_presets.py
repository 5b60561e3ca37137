"""Presets hit their calibration targets; fit_synthetic recovers a trace's statistics."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tailsieve.workload import (
    SyntheticWorkload,
    cross_checkpoint_auc,
    fit_synthetic,
    percentiles,
    preset,
    read_trace,
    truncated_fraction,
    variance_decomposition,
)
from tailsieve.workload.analytics import split_half_auc


def _check(tr, p50: float, p90: float, trunc: float, share_log: float) -> None:  # type: ignore[no-untyped-def]
    q = percentiles(tr.response_tokens)
    assert q["p50"] == pytest.approx(p50, rel=0.04)
    assert q["p90"] == pytest.approx(p90, rel=0.04)
    assert truncated_fraction(tr)[0] == pytest.approx(trunc, abs=0.006)
    assert variance_decomposition(tr, log=True).shares()["prompt"] == pytest.approx(
        share_log, abs=0.05
    )


@pytest.mark.parametrize("seed", [0, 1])
def test_paper_math_targets(seed: int) -> None:
    tr = SyntheticWorkload(preset("paper-math"), 2000, seed=seed).generate_trace(4, 8, seed=seed)
    # P50 1,160, P90 4,115; ~3% truncated at 16,384; prompt share ~0.65 (log lengths)
    _check(tr, 1160, 4115, 0.03, 0.65)
    assert int(tr.response_tokens.max()) == 16384
    aucs = [a for _, _, a in cross_checkpoint_auc(tr, 0.1)]
    assert min(aucs) > 0.95


@pytest.mark.parametrize("seed", [0, 1])
def test_aime_r1_targets(seed: int) -> None:
    tr = SyntheticWorkload(preset("aime-r1"), 3000, seed=seed).generate_trace(1, 8, seed=seed)
    # P50 ~7,600, P90 ~12,700, 2.2% truncated at 16,000, log between-prompt share ~0.68
    _check(tr, 7598, 12722, 0.0222, 0.68)
    assert int(tr.response_tokens.max()) == 16000


def test_aime_data_figures(aime_path: Path) -> None:
    tr = read_trace(aime_path)
    q = percentiles(tr.response_tokens)
    assert (q["p50"], q["p90"], q["p99"]) == (7598.0, pytest.approx(12721.7), 16000.0)
    assert truncated_fraction(tr) == (pytest.approx(106 / 4768), 16000)
    assert variance_decomposition(tr, log=True).shares()["prompt"] == pytest.approx(
        0.6789, abs=1e-4
    )
    assert variance_decomposition(tr).shares()["prompt"] == pytest.approx(0.6167, abs=1e-4)
    assert split_half_auc(tr, 0.1) == pytest.approx(0.8866, abs=1e-4)


def test_fit_synthetic_recovers_aime(aime_path: Path) -> None:
    tr = read_trace(aime_path)
    params = fit_synthetic(tr)
    assert params.max_tokens == 16000
    gen = SyntheticWorkload(params, 3000, seed=5).generate_trace(1, 8)
    _check(gen, 7598, 12722, 0.0222, 0.679)


def test_fit_synthetic_recovers_multi_checkpoint_drift() -> None:
    truth = preset("paper-math")
    tr = SyntheticWorkload(truth, 1500, seed=2).generate_trace(6, 8)
    params = fit_synthetic(tr)
    assert params.max_tokens == 16384
    assert params.interaction_sigma_log == pytest.approx(truth.interaction_sigma_log, abs=0.04)
    gen = SyntheticWorkload(params, 1500, seed=3).generate_trace(6, 8)
    q0, q1 = percentiles(tr.response_tokens), percentiles(gen.response_tokens)
    assert q1["p50"] == pytest.approx(q0["p50"], rel=0.06)
    assert q1["p90"] == pytest.approx(q0["p90"], rel=0.06)
    assert np.isfinite(params.drift_sigma_log)
