"""``measure_acceptance`` on the shipped recorded trace, and how the trace becomes groups."""

from __future__ import annotations

import pytest

from tailsieve.drafts import DraftConfig, measure_acceptance, trace_groups
from tailsieve.drafts.group import Group


def test_groups_of_the_shipped_trace() -> None:
    groups = trace_groups("smollm2-math", max_prompts=2)
    assert [(g.prompt_id, g.epoch) for g in groups] == [
        ("math-0000", 0), ("math-0001", 0), ("math-0000", 1), ("math-0001", 1)]
    g0, _, g1, _ = groups
    assert len(g0.responses) == 8 and g0.previous is None and g1.previous == g0.responses
    assert len(g0.prompt_ids) == 77  # the trace's prompt_tokens of math-0000
    # ordered by recording server: four of replica 0, then four of replica 1
    assert g0.replicas == (0, 0, 0, 0, 1, 1, 1, 1)
    assert g0.independent(0, 3) and not g0.independent(0, 4)


def test_table_shape_and_bounds() -> None:
    table = measure_acceptance("smollm2-math", max_prompts=2,
                               config=DraftConfig(max_spec_tokens=4))
    pkg = table.to_package_dict()
    assert pkg["max_spec_tokens"] == 4
    for source, by_k in pkg["sources"].items():  # type: ignore[union-attr]
        assert list(by_k) == ["1", "2", "4", "8"], source
        assert all(1.0 <= v <= 5.0 for v in by_k.values())
    # a source that does not depend on k repeats one measurement
    assert len(set(pkg["sources"]["seer-group"].values())) == 1  # type: ignore[index]
    assert table.tau("ngram", 1) == pytest.approx(pkg["sources"]["ngram"]["1"], abs=1e-4)  # type: ignore[index]
    # every response of both epochs is replayed, rhymerl only the second epoch
    assert table.results["ngram"][1].responses == 32
    assert table.results["rhymerl-epoch"][1].responses == 16
    assert "| rhymerl-epoch | 8 |" in table.to_markdown()


def test_unknown_source_and_k() -> None:
    with pytest.raises(ValueError, match="unknown draft source"):
        measure_acceptance("smollm2-math", sources=["magic"], max_prompts=1)
    with pytest.raises(ValueError, match="k values"):
        measure_acceptance("smollm2-math", k_values=[0], max_prompts=1)


def test_group_checks_its_columns() -> None:
    with pytest.raises(ValueError, match="no responses"):
        Group("p", 0, (), ())
    with pytest.raises(ValueError, match="replicas"):
        Group("p", 0, (), ((1,),), replicas=(0, 1))
