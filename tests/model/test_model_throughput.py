"""ThroughputModel validation, interpolation, extrapolation and JSON round trip."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.errors import ProfileError
from tailsieve.model.profiles import PROFILE_NAMES, builtin_profile, load_profile
from tailsieve.model.throughput import ThroughputModel


def test_empty_table_rejected() -> None:
    with pytest.raises(ProfileError, match="empty"):
        ThroughputModel.from_pairs([], name="t")


@pytest.mark.parametrize(
    ("pairs", "pattern"),
    [
        ([(1, 0.01), (2, float("nan"))], r"point 1 \(batch_size=2.*not a finite"),
        ([(1, 0.0)], r"point 0 \(batch_size=1.*positive"),
        ([(1, -0.5)], r"point 0.*positive"),
        ([(0, 0.01)], r"batch_size must be >= 1"),
        ([(1, 0.02), (4, 0.01)], r"point 1 \(batch_size=4.*decreases"),
        ([(4, 0.01), (2, 0.02)], r"point 1.*strictly increasing"),
    ],
)
def test_bad_points_name_the_point(pairs: list[tuple[int, float]], pattern: str) -> None:
    with pytest.raises(ProfileError, match=pattern):
        ThroughputModel.from_pairs(pairs, name="t")


def test_design_numbers_reproduced() -> None:
    cpu = builtin_profile("cpu")
    speeds = {1: 315, 4: 264, 8: 241, 16: 188, 32: 126, 64: 83, 128: 52}
    for b, v in speeds.items():
        assert cpu.tokens_per_s(b) == pytest.approx(v, rel=1e-3)


def test_tau_zero_is_zero() -> None:
    m = builtin_profile("cpu")
    assert m.tau(0) == 0.0 and m.taus(3)[0] == 0.0


@pytest.mark.parametrize("name", PROFILE_NAMES)
def test_monotone_and_continuous_beyond_table(name: str) -> None:
    m = builtin_profile(name)
    top = m.max_measured_batch
    b = np.linspace(0.5, 4 * top, 5001)
    tau = m.tau_array(b)
    assert np.all(np.diff(tau) >= -1e-15)
    # continuity at the table edge
    eps = 1e-6
    assert m.tau(top + eps) == pytest.approx(m.tau(top), abs=1e-9)
    assert m.tau(top - eps) == pytest.approx(m.tau(top), abs=1e-9)
    # extrapolation follows the fitted slope
    _, slope = m.fit
    assert m.tau(2 * top) - m.tau(top) == pytest.approx(slope * top, rel=1e-9)


@settings(max_examples=50, deadline=None)
@given(
    st.lists(st.floats(1e-4, 1.0), min_size=1, max_size=8),
    st.lists(st.integers(1, 50), min_size=8, max_size=8),
)
def test_interpolation_is_monotone(steps: list[float], gaps: list[int]) -> None:
    taus = np.cumsum(sorted(steps))
    bs = np.cumsum(gaps[: len(steps)])
    m = ThroughputModel.from_pairs(list(zip(bs.tolist(), taus.tolist(), strict=True)))
    grid = np.linspace(0, 3 * bs[-1], 997)
    vals = m.tau_array(grid)
    assert np.all(np.diff(vals) >= -1e-12)
    for b, t in zip(bs, taus, strict=True):
        assert m.tau(int(b)) == pytest.approx(t)


def test_json_roundtrip(tmp_path: Path) -> None:
    m = ThroughputModel.from_pairs([(1, 0.01), (8, 0.012), (64, 0.03)], name="mine", source="x")
    path = tmp_path / "p.json"
    m.save(path)
    back = load_profile(path)
    assert back == m and back.name == "mine" and back.source == "x"
    assert back.tau(100) == m.tau(100)


@pytest.mark.parametrize(
    ("payload", "pattern"),
    [
        ("not json", "not valid JSON"),
        (json.dumps([1, 2]), "JSON object"),
        (json.dumps({"name": "x"}), "missing 'points'"),
        (json.dumps({"points": [{"batch_size": 1}]}), "point 0"),
        (json.dumps({"points": [{"batch_size": 1.5, "step_s": 0.1}]}), "integer"),
        (json.dumps({"points": [{"batch_size": 1, "step_s": "a"}]}), "number"),
    ],
)
def test_malformed_profile_files(tmp_path: Path, payload: str, pattern: str) -> None:
    path = tmp_path / "bad.json"
    path.write_text(payload)
    with pytest.raises(ProfileError, match=pattern):
        load_profile(path)


def test_unknown_profile_name() -> None:
    with pytest.raises(ProfileError, match="unknown profile"):
        load_profile("tpu")
    with pytest.raises(ProfileError, match="not found"):
        load_profile("/nonexistent/profile.json")


def test_peak_aggregate_and_scaled() -> None:
    m = builtin_profile("illustrative-flat")
    peak = m.peak_aggregate_tokens_per_s(512)
    assert peak == pytest.approx(max(b / m.tau(b) for b in range(1, 513)))
    slow = m.scaled(2.0)
    assert slow.tau(7) == pytest.approx(2 * m.tau(7))
    with pytest.raises(ProfileError):
        m.scaled(-1.0)
