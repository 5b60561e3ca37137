"""The acceptance model: presets, placement by draft source, ranges, data files."""

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
                "suffix-siblings": {"1": 1.3, "2": 1.5, "4": 1.8, "8": 2.2},
                "suffix-running": {"1": 1.3, "2": 1.31, "4": 1.32, "8": 1.33},
                "seer-group": {"1": 1.9, "2": 1.9, "4": 1.9, "8": 1.9},
                "rhymerl-epoch": {"1": 2.4}},
}
SERVER = AcceptanceCurve("srv", "suffix-siblings", ((1, 1.2), (8, 2.4)), placement="server")


def test_literature_presets_are_cited_and_in_range() -> None:
    for name, curve in LITERATURE.items():
        assert curve.citation, name
        for k in (1, 2, 3, 8, 64):
            assert 1.0 <= curve.tau(k) <= curve.max_spec_tokens + 1
            assert curve.drafted(k) >= curve.tau(k) - 1.0
    assert LITERATURE["low"].tau(1) < 1.25  # n-gram level


@given(k=st.floats(1.0, 64.0), name=st.sampled_from(sorted(LITERATURE)))
def test_no_literature_figure_depends_on_placement(k: float, name: str) -> None:
    """Seer's group drafter sees every sibling wherever it runs, EAGLE/MTP draft from a model,
    RhymeRL from the previous epoch: none of them gains from siblings sharing a server, so
    Seer's published 2.85 is its level everywhere, the baseline's included."""
    curve = LITERATURE[name]
    assert curve.placement == "none" and not curve.server_siblings
    assert curve.tau(k) == curve.tau(1)
    assert LITERATURE["seer"].tau(k) == pytest.approx(2.85)


def test_only_a_server_tree_varies_with_finished_siblings() -> None:
    assert SERVER.server_siblings
    assert SERVER.tau(1) < SERVER.tau(3) < SERVER.tau(8)
    with pytest.raises(ConfigError, match="placement"):
        AcceptanceCurve("x", "seer-group", ((1, 1.7), (8, 2.85)))  # none with two points
    with pytest.raises(ConfigError, match="placement"):
        AcceptanceCurve("x", "s", ((1, 1.2),), placement="elsewhere")  # type: ignore[arg-type]


@given(pts=st.lists(st.floats(1.0, 9.0), min_size=1, max_size=4), k=st.floats(1.0, 100.0))
def test_interpolation_stays_between_the_points(pts: list[float], k: float) -> None:
    taus = sorted(pts)
    curve = AcceptanceCurve("x", "s", tuple((2 ** i, t) for i, t in enumerate(taus)),
                            placement="server")
    assert taus[0] - 1e-12 <= curve.tau(k) <= taus[-1] + 1e-12


def test_invalid_curves_are_refused() -> None:
    with pytest.raises(ConfigError):
        AcceptanceCurve("x", "s", ((1, 0.9),))  # below one token per step
    with pytest.raises(ConfigError):
        AcceptanceCurve("x", "s", ((2, 1.2), (1, 1.3)), placement="server")  # k descending
    with pytest.raises(ConfigError):
        AcceptanceCurve("x", "s", ((1, 10.0),), max_spec_tokens=8)  # more than d + 1
    with pytest.raises(ConfigError):
        SERVER.tau(0.5)


def test_measured_file_loads_as_named_presets(tmp_path: Path) -> None:
    path = tmp_path / "acceptance-toy-math.json"
    path.write_text(json.dumps(SAMPLE))
    curves = load_acceptance_file(path)
    # the lockstep replay (k = running siblings together) is not a simulator source
    assert set(curves) == {"toy-math:ngram", "toy-math:suffix-siblings", "toy-math:seer-group",
                           "toy-math:rhymerl-epoch"}
    sr = curves["toy-math:suffix-siblings"]
    assert sr.placement == "server"
    assert sr.tau(1) == pytest.approx(1.3) and sr.tau(8) == pytest.approx(2.2)
    assert sr.tau(1) < sr.tau(3) < sr.tau(8)
    assert "measured" in sr.citation
    group = curves["toy-math:seer-group"]
    assert group.placement == "none" and group.tau_by_k == ((1, 1.9),)
    assert get_acceptance(f"{path}:suffix-siblings").tau(4) == pytest.approx(1.8)
    with pytest.raises(ConfigError, match="lockstep"):
        get_acceptance(f"{path}:suffix-running")
    with pytest.raises(ConfigError):
        get_acceptance(f"{path}:no-such-source")


def test_a_placement_free_source_that_varies_with_k_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "acceptance-odd.json"
    path.write_text(json.dumps({"sources": {"seer-group": {"1": 1.7, "8": 2.85}}}))
    with pytest.raises(ConfigError, match="varies with k"):
        load_acceptance_file(path)
    path.write_text(json.dumps({"sources": {"seer-group": {"1": 1.7, "8": 2.85}},
                                "placement": {"seer-group": "server"}}))
    assert load_acceptance_file(path)["odd:seer-group"].server_siblings


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
