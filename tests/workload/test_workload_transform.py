"""Tail-strength transform (paper A.5): P90'/P50' == r."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tailsieve.errors import ConfigError
from tailsieve.workload.io import read_trace
from tailsieve.workload.presets import preset
from tailsieve.workload.synthetic import SyntheticWorkload
from tailsieve.workload.transform import fit_tail_transform, transform_lengths, transform_trace


def _ratio(lengths: np.ndarray) -> float:
    p50, p90 = np.percentile(lengths, [50, 90])
    return float(p90 / p50)


@pytest.mark.parametrize("r", ["weak", "strong", 1.5, 2.0, 3.547, 6.0, 10.0])
def test_ratio_on_aime(aime_path: Path, r: str | float) -> None:
    tr = read_trace(aime_path)
    want = {"weak": 1.5, "strong": 6.0}.get(r, r) if isinstance(r, str) else r
    out = transform_trace(tr, r)
    # integer rounding moves P50/P90 by at most ~1 token each
    assert _ratio(out.response_tokens) == pytest.approx(want, abs=2e-3 * want)
    assert np.all(
        out.response_tokens[tr.response_tokens <= np.median(tr.response_tokens)]
        == tr.response_tokens[tr.response_tokens <= np.median(tr.response_tokens)]
    )


@pytest.mark.parametrize("r", [1.5, 6.0])
def test_ratio_on_synthetic(r: float) -> None:
    tr = SyntheticWorkload(preset("paper-math"), 800, seed=3).generate_trace(1, 8)
    out = transform_lengths(tr.response_tokens, r)
    assert _ratio(out) == pytest.approx(r, abs=0.01)
    assert np.median(out) == pytest.approx(np.median(tr.response_tokens), abs=1)


def test_real_is_identity_and_validation() -> None:
    x = np.array([1, 5, 9, 100, 1000])
    assert np.array_equal(transform_lengths(x, "real"), x)
    assert fit_tail_transform(x, None).stretch == 1.0
    with pytest.raises(ConfigError):
        transform_lengths(x, 0.5)
    with pytest.raises(ConfigError):
        transform_lengths(x, "huge")
