"""Smoke run of ``benchmarks/bench_spec.py`` (speculation placed by the router)."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from smoke_helpers import repo_unchanged


def test_bench_spec(tmp_path: Path) -> None:
    measured = tmp_path / "acceptance-toy.json"
    measured.write_text(json.dumps({"name": "toy", "sources": {
        "suffix-siblings": {"1": 1.1, "8": 1.3}}, "drafted": {"suffix-siblings": {"1": 0.5}}}))
    with repo_unchanged():
        assert importlib.import_module("bench_spec").main(
            ["--out", str(tmp_path), "--seeds", "2", "--steps", "6", "--groups", "8",
             "--cases", "4b-paper-math-r8", "--presets", "seer", "low",
             "toy:suffix-siblings", "--acceptance-file", str(measured)]) == 0
    data = json.loads((tmp_path / "spec.json").read_text())
    assert data["baseline"].startswith("uniform-requests")
    assert list(data["measured_presets"]) == ["toy:suffix-siblings"]
    rows = {(r["preset"], r["price"]): r for r in data["cases"]}
    assert set(rows) == {("seer", 1.0), ("seer", 2.0), ("low", 1.0),
                         ("toy:suffix-siblings", 1.0)}
    assert rows[("toy:suffix-siblings", 1.0)]["kind"] == "measured"
    assert rows[("toy:suffix-siblings", 1.0)]["measured_acceptance"]
    assert not rows[("seer", 1.0)]["measured_acceptance"]
    for row in rows.values():
        assert row["tailsieve"]["mean"] > 0 and len(row["per_seed"]) == 2
        assert row["uniform-requests-nospec"]["mean"] > 0
    # a source that drafts alike wherever a response runs stays spread (Seer's included)
    assert rows[("low", 1.0)]["colocated_seeds"] == rows[("seer", 1.0)]["colocated_seeds"] == 0
    md = (tmp_path / "spec.md").read_text()
    assert "| 4b-paper-math-r8 | seer | not measured |" in md
