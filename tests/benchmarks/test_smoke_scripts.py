"""Smoke runs of every simulated benchmark script at a tiny shape: each runs its code path end
to end in seconds, writes into ``tmp_path`` and leaves the repository untouched. The full runs
stay out of the tests. (The paper and grounded modules have their own tiny runs in
``test_paper_suite.py`` and ``test_grounded_suite.py``; the live scripts are in
``test_smoke_live.py``.)"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from smoke_helpers import BENCH, ROOT, repo_unchanged

# every script under benchmarks/ and the test that runs it; a new script must be added here
SCRIPTS = {
    "bench_acceptance.py": "test_bench_acceptance.py::test_bench_acceptance",
    "bench_agentic.py": "test_bench_agentic",
    "bench_agentic_emulated.py": "test_smoke_live.py::test_bench_agentic_emulated",
    "bench_agentic_live.py": "test_smoke_live.py::test_bench_agentic_live_emulated",
    "bench_auto_profile.py": "test_smoke_live.py::test_bench_auto_profile_emulated",
    "bench_balancer.py": "test_bench_balancer",
    "bench_drain.py": "test_bench_drain",
    "bench_faults.py": "test_bench_faults",
    "bench_seam.py": "test_smoke_live.py::test_bench_seam_vllm",
    "bench_grounded.py": "test_bench_grounded",
    "bench_live_moves.py": "test_smoke_live.py::test_bench_live_moves_emulated",
    "bench_oracle.py": "test_bench_oracle",
    "bench_real_engine.py": "test_smoke_live.py::test_bench_real_engine_*",
    "bench_proxy.py": "test_smoke_proxy.py::test_bench_proxy",
    "bench_proxy_imbalance.py": "test_smoke_proxy_imbalance.py::test_bench_proxy_imbalance",
    "bench_proxy_stream.py": "test_smoke_proxy_stream.py::test_bench_proxy_stream",
    "bench_router.py": "test_smoke_live.py::test_bench_router_*",
    "bench_routers_live.py": "test_smoke_routers_live.py::test_bench_routers_live",
    "bench_book_views.py": "test_bench_book_views.py::test_bench_book_views",
    "bench_sim.py": "test_bench_sim",
    "bench_spec.py": "test_bench_spec.py::test_bench_spec",
    "bench_straggler.py": "test_smoke_live.py::test_bench_straggler",
    "bench_tail_signal.py": "test_bench_tail_signal",
    "check_spec_live.py": "test_bench_acceptance.py::test_check_spec_live_*",
    "check_priority_live.py": "test_check_priority_live.py::test_check_priority_live_emulated",
    "bench_trace_io.py": "test_bench_trace_io_defaults_outside_the_repo",
    "bench_verl_router_scale.py": "test_bench_verl_router_scale.py::test_bench_verl_router_scale",
    "grounded_suite.py": "test_grounded_suite",
    "run_all.py": "test_run_all",
    "soak_proxy.py": "test_soak_proxy.py::test_soak_proxy_short",
    "paper/length_blind_bound.py": "test_paper_module_mains",
    "paper/spread_ablation.py": "test_paper_module_mains",
}
# modules that are not scripts: helpers and the items the suites above run
NOT_SCRIPTS = {"outdir.py", "live_routers.py", "live_serve.py", "live_workloads.py"}
PACKAGES = ("paper", "grounded", "real_engine")


def test_every_script_has_a_smoke_run() -> None:
    """A script added to ``benchmarks/`` without a smoke run here fails this test."""
    found = {p.name for p in BENCH.glob("*.py")} - NOT_SCRIPTS
    found |= {str(p.relative_to(BENCH)) for pkg in PACKAGES for p in (BENCH / pkg).glob("*.py")
              if "__main__" in p.read_text()}
    assert found == set(SCRIPTS), sorted(found ^ set(SCRIPTS))


def test_bench_sim(tmp_path: Path) -> None:
    out = tmp_path / "sim.json"
    with repo_unchanged():
        assert importlib.import_module("bench_sim").cli(
            ["--out", str(out), "--steps", "3", "--groups", "16"]) == 0
    data = json.loads(out.read_text())
    assert data["num_steps"] == 3 and data["num_groups"] == 16
    assert data["delivered_requests"] == 3 * 16 * 8
    assert data["decision_ms_max"] >= data["decision_ms_mean"] > 0


def test_bench_tail_signal(tmp_path: Path) -> None:
    with repo_unchanged():
        payload = importlib.import_module("bench_tail_signal").main(
            ["--out", str(tmp_path), "--quick"])
    assert set(payload["workloads"]) == {"smollm2-math", "paper-math", "aime"}
    real = payload["workloads"]["smollm2-math"]
    assert real["shape"]["rows"] >= 128 * 8 * 2 and real["shape"]["max"] <= 1024
    assert 0 < real["signal"]["prompt_share"] < 1 and 0 <= real["signal"]["tail_auc"] <= 1
    assert [round(c["rho"], 2) for c in real["capture"]] == [0.05, 0.1, 0.25]
    assert real["sim"]["policies"]["uniform"]["vs_uniform"] == 1.0
    # the shipped trace is named package-relative, never by this machine's absolute path
    assert payload["trace"] == "tailsieve/workload/data/smollm2-135m-math.jsonl.gz"
    assert real["sim"]["workload"] == real["sim_cpu"]["workload"] == "smollm2-math"
    levels = real["levels"]
    assert [r["level"] for r in levels] == [1, 2, 3, 4, 5, "all"]
    assert sum(r["responses"] for r in levels[:-1]) == levels[-1]["responses"] == 2048
    assert real["sibling_copies"]["num_responses"] == 2048
    assert "Partial-rollout cutoff capture" in (tmp_path / "tail_signal.md").read_text()


def test_bench_trace_io_defaults_outside_the_repo(tmp_path: Path) -> None:
    """Run as a user would (a subprocess, no ``--out``): the result lands in the system temp
    dir (here ``TMPDIR=tmp_path``), nothing inside the repository."""
    env = {**os.environ, "TMPDIR": str(tmp_path),
           "PYTHONPATH": os.pathsep.join([str(ROOT / "src"), os.environ.get("PYTHONPATH", "")])}
    with repo_unchanged():
        subprocess.run([sys.executable, str(BENCH / "bench_trace_io.py"), "--rows", "800",
                        "--repeats", "1"], cwd=ROOT, env=env, check=True, capture_output=True,
                       timeout=120)
    data = json.loads((tmp_path / "tailsieve-bench" / "trace_io.json").read_text())
    assert data["rows"] == 800
    assert {"jsonl", "csv"} <= set(data["formats"])
    assert data["formats"]["csv"]["read_python_s"] > 0


def test_bench_oracle(tmp_path: Path) -> None:
    out = tmp_path / "oracle.json"
    with repo_unchanged():
        assert importlib.import_module("bench_oracle").main(
            ["--out", str(out), "--profiles", "cpu", "--n100-draws", "1", "--gap-draws", "1",
             "--time-limit-s", "1", "--scaling-budget-s", "1"]) == 0
    data = json.loads(out.read_text())
    assert [r["profile"] for r in data["n100"]] == ["cpu"]
    assert data["appendix_a4"][0]["gap_median"] >= 0


def test_bench_grounded(tmp_path: Path) -> None:
    out = tmp_path / "grounded.json"
    with repo_unchanged():
        payload = importlib.import_module("bench_grounded").main(
            ["--out", str(out), "--seeds", "1", "--steps", "2"])
    data = json.loads(out.read_text())
    assert data["settings"]["seeds"] == [0] and data["settings"]["steps"] == 2
    assert {r["policy"] for r in data["table1"]} >= {"uniform", "uniform-oracle"}
    assert payload["aime_preemption"]


def test_grounded_suite(tmp_path: Path) -> None:
    md = tmp_path / "B.md"
    md.write_text("# Bench\n")
    with repo_unchanged():
        rc = importlib.import_module("grounded_suite").main(
            ["--smoke", "--out", str(tmp_path / "g"), "--markdown", str(md)])
    assert rc == 0
    for name in ("headline", "table4", "fig6b", "table2"):
        assert json.loads((tmp_path / "g" / f"{name}.json").read_text())["name"] == name
    assert json.loads((tmp_path / "g" / "sim_decision.json").read_text())["num_steps"] == 3
    assert "Grounded" in md.read_text()
    assert "step / fluid bound" in (tmp_path / "g" / "grounded.md").read_text()


def test_run_all(tmp_path: Path) -> None:
    """The suite's driver and report, with two items (every item has its own tiny run in
    ``test_paper_suite.py``); the report lands in ``<out>/REPORT.md`` by default."""
    with repo_unchanged():
        rc = importlib.import_module("run_all").main(
            ["--smoke", "--only", "fig3_capture,protocol_ceiling", "--out", str(tmp_path)])
    assert rc == 0
    suite = json.loads((tmp_path / "paper" / "suite.json").read_text())
    assert suite["mode"] == "smoke" and suite["failed"] == []
    assert (tmp_path / "paper" / "protocol_ceiling.json").is_file()
    text = (tmp_path / "REPORT.md").read_text()
    assert "Figure 3" in text and "Real engines" in text


@pytest.mark.parametrize(("module", "argv"), [
    ("paper.length_blind_bound", ["--seeds", "1", "--steps", "2"]),
    ("paper.spread_ablation", ["--smoke"]),
])
def test_paper_module_mains(module: str, argv: list[str], tmp_path: Path) -> None:
    """The paper modules that have a command line of their own (``python -m
    benchmarks.paper.<name>``)."""
    name = module.split(".")[1]
    with repo_unchanged():
        importlib.import_module(module).main([*argv, "--out", str(tmp_path)])
    assert json.loads((tmp_path / f"{name}.json").read_text())


def test_bench_balancer(tmp_path: Path) -> None:
    with repo_unchanged():
        assert importlib.import_module("bench_balancer").main(
            ["--out", str(tmp_path), "--seeds", "1", "--steps", "7", "--groups", "16",
             "--cases", "4b-paper-math-r8", "--smoke"]) == 0
    data = json.loads((tmp_path / "balancer.json").read_text())
    (row,) = data["cases"]
    assert row["speedup_mean"] > 0 and row["moves_per_step"] >= 0
    assert data["decision_timing"]["p99_ms"] >= data["decision_timing"]["p50_ms"] >= 0
    for timing in (data["decision_timing"], data["decision_timing_in_sim_64x4096"]):
        assert 0 < timing["max_moves_in_a_decision"] <= timing["max_moves_per_decision"] == 2
    assert data["decision_timing"]["decisions"] > data["decision_timing"]["calls"]
    assert "| 4b-paper-math-r8 |" in (tmp_path / "balancer.md").read_text()


def test_bench_drain(tmp_path: Path) -> None:
    with repo_unchanged():
        assert importlib.import_module("bench_drain").main(
            ["--out", str(tmp_path), "--smoke", "--cases", "4b-paper-math-r8"]) == 0
    data = json.loads((tmp_path / "drain.json").read_text())
    (row,) = data["cases"]
    for name in ("none", "lpt", "priority", "both", "seer-oracle"):
        assert row[name]["speedup_mean"] > 0
    assert data["target"]["case"] == "4b-paper-math-r8"
    assert "| 4b-paper-math-r8 |" in (tmp_path / "drain.md").read_text()


def test_bench_agentic(tmp_path: Path) -> None:
    with repo_unchanged():
        assert importlib.import_module("bench_agentic").main(
            ["--out", str(tmp_path), "--smoke", "--workers", "2", "--first-seed", "3"]) == 0
    data = json.loads((tmp_path / "agentic.json").read_text())
    (cell,) = data["cells"]
    assert cell["preset"] == "search-agent" and cell["replicas"] == 2
    assert cell["first_seed"] == 3 and "seeds from 3" in (tmp_path / "agentic.md").read_text()
    assert cell["policies"]["verl-sticky"]["speedup"] == 1.0
    assert {"tailsieve", "length-informed", "cache-aware", "verl-rebalance",
            "group-colocate"} <= set(cell["policies"])
    assert cell["bound"]["speedup"] >= cell["policies"]["tailsieve"]["speedup"] * (1 - 1e-9)
    md = (tmp_path / "agentic.md").read_text()
    assert "| search-agent | 2 |" in md and "| tailsieve |" in md
    assert (tmp_path / "cells" / "qwen3-4b-h100_search-agent_r2.json").exists()
    assert len(data["gate"]["moves_on"]) == 4 and "## The balance gate" in md
    path = tmp_path / "cells" / "qwen3-4b-h100_search-agent_r2.json"
    cell["policies"]["tailsieve"]["speedup"] = -1.0  # --update must replace this row alone
    path.write_text(json.dumps(cell))
    with repo_unchanged():
        assert importlib.import_module("bench_agentic").main(
            ["--out", str(tmp_path), "--smoke", "--first-seed", "3",
             "--update", "tailsieve"]) == 0
    (again,) = json.loads((tmp_path / "agentic.json").read_text())["cells"]
    assert again["policies"]["tailsieve"]["speedup"] > 0
    assert again["policies"]["cache-aware"] == cell["policies"]["cache-aware"]
    assert again["best_other"] == cell["best_other"]


def test_bench_faults(tmp_path: Path) -> None:
    """One replica killed mid-step: no group starts again whole; its responses go on elsewhere,
    and in pieces they regenerate at most a piece each."""
    out = tmp_path / "faults.json"
    with repo_unchanged():
        importlib.import_module("bench_faults").main(
            ["--groups", "3", "--group-size", "4", "--median", "60", "--time-scale", "0.02",
             "--out", str(out)])
    rows = {r["variant"]: r for r in json.loads(out.read_text())["rows"][1:]}
    assert set(rows) == {"restart", "continue-pieces", "continue-stream"}
    assert all(r["groups_regenerated"] == 0 and r["delivered_tokens"] > 0 for r in rows.values())
    pieces = rows["continue-pieces"]
    assert pieces["relocations"] >= 1
    assert pieces["regenerated_tokens"] <= 128 * pieces["relocations"]
