"""``measure_acceptance`` on the shipped recorded trace, and how the trace becomes groups."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tailsieve.drafts import DraftConfig, measure_acceptance, trace_groups
from tailsieve.drafts.group import Group
from tailsieve.drafts.trace_groups import seeded_recording
from tailsieve.model.acceptance import load_acceptance_file

SEEDED = seeded_recording("smollm2-math")  # a seed per request: every sibling independent
SERVER_KS = ["1", "2", "4", "8"] if SEEDED else ["1", "2", "4"]  # 7 or 3 independent siblings


def test_groups_of_the_shipped_trace() -> None:
    groups = trace_groups("smollm2-math", max_prompts=2)
    assert [(g.prompt_id, g.epoch) for g in groups] == [
        ("math-0000", 0), ("math-0001", 0), ("math-0000", 1), ("math-0001", 1)]
    g0, _, g1, _ = groups
    assert len(g0.responses) == 8 and g0.previous is None and g1.previous == g0.responses
    assert len(g0.prompt_ids) == 77  # the trace's prompt_tokens of math-0000
    if SEEDED:
        assert g0.replicas is None and all(g0.independent(0, j) for j in range(8))
    else:  # ordered by recording server: four of replica 0, then four of replica 1
        assert g0.replicas == (0, 0, 0, 0, 1, 1, 1, 1)
        assert g0.independent(0, 3) and not g0.independent(0, 4)


def test_table_shape_and_bounds() -> None:
    table = measure_acceptance("smollm2-math", max_prompts=2,
                               config=DraftConfig(max_spec_tokens=4))
    pkg = table.to_package_dict()
    assert pkg["max_spec_tokens"] == 4
    # what the simulator reads: placement-free sources at one k, the server tree per k (up to
    # k = 4 where each response has 3 independent siblings); lockstep replays stay out
    sources: dict[str, dict[str, float]] = pkg["sources"]  # type: ignore[assignment]
    assert pkg["placement"] == {"ngram": "none", "suffix-siblings": "server",
                                "seer-group": "none", "rhymerl-epoch": "none"}
    assert {s: list(by_k) for s, by_k in sources.items()} == {
        "ngram": ["1"], "suffix-siblings": SERVER_KS, "seer-group": ["1"],
        "rhymerl-epoch": ["1"]}
    assert all(1.0 <= v <= 5.0 for by_k in sources.values() for v in by_k.values())
    assert table.tau("ngram", 1) == pytest.approx(sources["ngram"]["1"], abs=1e-4)
    if not SEEDED:
        assert table.results["suffix-siblings"][8].total().steps == 0
        assert "| suffix-siblings | 8 | - (no response has 7 independent" in table.to_markdown()
    curves = load_acceptance_file(text=json.dumps(pkg))
    assert curves["smollm2-math:suffix-siblings"].placement == "server"
    assert curves["smollm2-math:seer-group"].placement == "none"
    # every response of both epochs is replayed, rhymerl only the second epoch
    assert table.results["ngram"][1].responses == 32
    assert table.results["rhymerl-epoch"][1].responses == 16
    assert "| rhymerl-epoch | 8 |" in table.to_markdown()


def test_a_seeded_recording_makes_every_sibling_independent(tmp_path: Path) -> None:
    rows = [{"prompt_id": "p", "step": 0, "sample": i, "response_tokens": 3, "replica": i % 2,
             "token_ids": [i, i + 1, i + 2]} for i in range(4)]
    trace = tmp_path / "rec.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (group,) = trace_groups(trace)
    assert group.replicas == (0, 0, 1, 1) and not group.independent(0, 2)  # unseeded servers
    (tmp_path / "rec.jsonl.info.json").write_text(json.dumps({"run_seed": 7}))
    (group,) = trace_groups(trace)
    assert group.replicas is None and group.independent(0, 2)  # a seed per request
    assert group.responses[1] == (2, 3, 4)  # still ordered by (recording server, sample)


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
