"""Smoke test of the paper-reproduction suite (``benchmarks/paper``): every module runs in a
tiny configuration and writes JSON with the expected keys, and the report renders."""

from __future__ import annotations

import importlib
import json
import sys
from pathlib import Path
from typing import Any

import pytest

BENCH = Path(__file__).resolve().parents[2] / "benchmarks"
if str(BENCH) not in sys.path:
    sys.path.insert(0, str(BENCH))

COMMON_KEYS = {"name", "quick", "paper", "runtime_s", "png", "machine"}

# module -> (tiny keyword arguments, keys its JSON must have beyond COMMON_KEYS)
CASES: dict[str, tuple[dict[str, Any], set[str]]] = {
    "fig2_oracle": ({"draws": 2, "num_requests": 30}, {"profiles", "data"}),
    "fig3_capture": ({"rounds": 3}, {"cases", "settings"}),
    "fig4_landscape": ({"steps": 4, "q_grid": (2, 8)}, {"scenes", "settings"}),
    "fig6b_convergence": ({"steps": 4}, {"trajectories", "uniform_step_s"}),
    "tables_policies": ({"steps": 3, "seeds": (0,), "sizes": (16,), "workloads": ("paper-math",),
                         "profiles": ("qwen3-4b-h100",)}, {"rows", "settings"}),
    "spec_budget": ({"steps": 3, "seeds": (0,), "d_bases": (1,)}, {"table", "rows"}),
    "drift": ({"steps": 4, "seeds": (0,)}, {"scenarios", "settings"}),
    "bias_check": ({"steps": 4}, {"cases", "settings"}),
    "spread_ablation": ({"steps": 6, "seeds": (0, 1), "cases": (("qwen3-4b-h100", 4, "paper-math"),),
                         "grid": [(0, 0, 0, True), (4, 2, 4, True)]}, {"cases", "settings"}),
}


@pytest.fixture(scope="module")
def out_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("paper")


@pytest.mark.parametrize("name", sorted(CASES))
def test_module_runs_and_writes_json(name: str, out_dir: Path) -> None:
    kwargs, keys = CASES[name]
    mod = importlib.import_module(f"paper.{name}")
    result = mod.run(out_dir, True, **kwargs)
    on_disk = json.loads((out_dir / f"{name}.json").read_text())
    assert (COMMON_KEYS | keys) <= set(on_disk), set(on_disk)
    assert on_disk["name"] == name
    assert (out_dir / on_disk["png"]).is_file()
    assert set(result) >= keys


def test_specific_fields(out_dir: Path) -> None:
    """A few values that the report reads, on the outputs of the tiny runs."""
    for name, (kwargs, _) in CASES.items():
        if not (out_dir / f"{name}.json").is_file():
            importlib.import_module(f"paper.{name}").run(out_dir, True, **kwargs)
    fig2 = json.loads((out_dir / "fig2_oracle.json").read_text())
    for prof in ("cpu", "qwen3-4b-h100"):
        p = fig2["profiles"][prof]
        assert 0.0 <= p["gap_median"] <= p["gap_max"]
        assert {"optimal_makespan_s", "topk_makespan_s", "best_k"} <= set(p["example"])
    bias = json.loads((out_dir / "bias_check.json").read_text())
    for case in bias["cases"].values():
        assert case["composition"]["tailsieve_duplicates"] == 0
        assert case["composition"]["max_delay_steps"] <= 1
        assert 0.0 <= case["ks_pvalue"] <= 1.0
    tables = json.loads((out_dir / "tables_policies.json").read_text())
    pols = {r["policy"] for r in tables["rows"]}
    assert {"uniform", "tailsieve", "tailsieve-fixed", "topk-oracle"} <= pols
    assert all("steady_speedup" in r and "mean_speedup" in r for r in tables["rows"])


def test_report_renders(out_dir: Path, tmp_path: Path) -> None:
    from paper import report

    for name, (kwargs, _) in CASES.items():
        if not (out_dir / f"{name}.json").is_file():
            importlib.import_module(f"paper.{name}").run(out_dir, True, **kwargs)
    md = report.write(out_dir, tmp_path / "BENCHMARKS.md", {"mode": "test", "runtime_s": 1.0})
    text = md.read_text()
    assert "## Summary" in text
    for title in ("Figure 2", "Figure 3", "Figure 4", "Figure 6b", "Tables 1 and 4",
                  "Section 4.3", "Section 4.5", "Section 3.3", "Real engines"):
        assert title in text


def test_run_all_rejects_unknown_item() -> None:
    run_all = importlib.import_module("run_all")
    assert run_all.main(["--only", "no_such_item", "--report-only"]) == 2
