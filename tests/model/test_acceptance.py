"""The acceptance model: presets, ranges, monotonicity in co-located siblings, data files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from tailsieve.errors import ConfigError
from tailsieve.model.acceptance import (
    LITERATURE,
    AcceptanceCurve,
    acceptance_presets,
    get_acceptance,
    load_acceptance_file,
    measured_presets,
)

SAMPLE = {
    "name": "toy-math", "provenance": {"trace": "toy"}, "max_spec_tokens": 8,
    "sources": {"ngram": {"1": 1.1, "2": 1.1, "4": 1.1, "8": 1.1},
                "suffix-running": {"1": 1.3, "2": 1.5, "4": 1.8, "8": 2.2},
                "rhymerl-epoch": {"1": 2.4}},
}


def test_literature_presets_are_cited_and_in_range() -> None:
    for name, curve in LITERATURE.items():
        assert curve.citation, name
        for k in (1, 2, 3, 8, 64):
            assert 1.0 <= curve.tau(k) <= curve.max_spec_tokens + 1
            assert curve.drafted(k) >= curve.tau(k) - 1.0
    assert LITERATURE["seer"].tau(1) == pytest.approx(1.70)
    assert LITERATURE["seer"].tau(8) == pytest.approx(2.85)
    assert LITERATURE["seer"].sibling and not LITERATURE["low"].sibling
    assert LITERATURE["low"].tau(1) < 1.25  # n-gram level


@given(k1=st.floats(1.0, 64.0), k2=st.floats(1.0, 64.0),
       name=st.sampled_from(sorted(LITERATURE)))
def test_tau_never_falls_with_more_siblings(k1: float, k2: float, name: str) -> None:
    curve = LITERATURE[name]
    lo, hi = sorted((k1, k2))
    assert curve.tau(lo) <= curve.tau(hi) + 1e-12


@given(pts=st.lists(st.floats(1.0, 9.0), min_size=1, max_size=4), k=st.floats(1.0, 100.0))
def test_interpolation_stays_between_the_points(pts: list[float], k: float) -> None:
    taus = sorted(pts)
    curve = AcceptanceCurve("x", "s", tuple((2 ** i, t) for i, t in enumerate(taus)))
    assert taus[0] - 1e-12 <= curve.tau(k) <= taus[-1] + 1e-12


def test_invalid_curves_are_refused() -> None:
    with pytest.raises(ConfigError):
        AcceptanceCurve("x", "s", ((1, 0.9),))  # below one token per step
    with pytest.raises(ConfigError):
        AcceptanceCurve("x", "s", ((2, 1.2), (1, 1.3)))  # k not ascending
    with pytest.raises(ConfigError):
        AcceptanceCurve("x", "s", ((1, 10.0),), max_spec_tokens=8)  # more than d + 1
    with pytest.raises(ConfigError):
        LITERATURE["seer"].tau(0.5)


def test_measured_file_loads_as_named_presets(tmp_path: Path) -> None:
    path = tmp_path / "acceptance-toy-math.json"
    path.write_text(json.dumps(SAMPLE))
    curves = load_acceptance_file(path)
    assert set(curves) == {"toy-math:ngram", "toy-math:suffix-running", "toy-math:rhymerl-epoch"}
    sr = curves["toy-math:suffix-running"]
    assert sr.tau(1) == pytest.approx(1.3) and sr.tau(8) == pytest.approx(2.2)
    assert sr.tau(1) < sr.tau(3) < sr.tau(8)
    assert "measured" in sr.citation
    assert get_acceptance(f"{path}:suffix-running").tau(4) == pytest.approx(1.8)
    with pytest.raises(ConfigError):
        get_acceptance(f"{path}:no-such-source")


def test_bad_files_and_names_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "acceptance-bad.json"
    path.write_text(json.dumps({"name": "bad"}))
    with pytest.raises(ConfigError):
        load_acceptance_file(path)
    with pytest.raises(ConfigError):
        get_acceptance("no-such-preset")


def test_presets_work_with_or_without_shipped_measurements() -> None:
    measured = measured_presets()  # empty until a measurement is committed
    presets = acceptance_presets()
    assert set(LITERATURE) <= set(presets)
    assert set(measured) <= set(presets)
    for name, curve in measured.items():
        assert ":" in name and curve.tau(1) >= 1.0
