"""Smoke run of ``bench_routers_live.py``: tailsieve and round-robin in front of three emulated
replicas, a tiny workload, a single-turn and a straggler agentic scenario, everything in ``tmp_path``. The external routers
(smg, vllm-router) are optional: a router whose venv is missing is skipped with the reason,
and CI never depends on them."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from smoke_helpers import repo_unchanged

TINY = ["--requests", "8", "--sessions", "4", "--group-size", "2", "--min-turns", "2",
        "--max-turns", "2", "--median-tokens", "16", "--turn-median-tokens", "8",
        "--max-tokens", "64", "--tool-s", "0.05", "--time-scale", "0.05", "--repeats", "2",
        "--warmup", "1"]


def test_bench_routers_live(tmp_path: Path) -> None:
    out = tmp_path / "routers_live"
    argv = [*TINY, "--scenarios", "single", "agentic-straggler",
            "--routers", "tailsieve", "round-robin", "smg-cache_aware",
            "--routers-venv", str(tmp_path / "no-venv"), "--out", str(out)]
    with repo_unchanged():
        importlib.import_module("bench_routers_live").main(argv)
    data = json.loads((out / "routers_live.json").read_text())
    assert data["routers"] == ["tailsieve", "round-robin"]
    assert "setup_routers.sh" in data["skipped"]["smg-cache_aware"]
    order = [(r["scenario"], r["repeat"], r["router"]) for r in data["runs"]]
    assert order[:6] == [("single", -1, "tailsieve"), ("single", -1, "round-robin"),
                         ("single", 0, "round-robin"), ("single", 0, "tailsieve"),
                         ("single", 1, "tailsieve"), ("single", 1, "round-robin")]  # rotated
    assert data["warmup"] == 1
    assert {s for s, _, _ in order} == {"single", "agentic-straggler"}
    for r in data["runs"]:  # every token the client got was served by a replica
        assert sum(r["tokens_per_replica"]) >= r["tokens_client"] > 0
        assert r["router_cpu_s"] >= 0
        assert (r["router"] == "tailsieve") == ("proxy" in r) or r["router"] == "round-robin"
    ts = [r for r in data["runs"] if r["router"] == "tailsieve"]
    assert all(r["proxy"]["turns"] > 0 and r["proxy"]["pieces"] >= r["proxy"]["turns"]
               for r in ts)
    for cell in data["summary"].values():
        assert cell["best_other"] == "round-robin"
        assert cell["ratio_to_best"]["n"] == 2
        assert cell["routers"]["tailsieve"]["wall_s"]["n"] == 2
    assert data["summary"]["agentic-straggler"]["target_ratio"] == 1.2
    assert data["summary"]["single"]["target_ratio"] == 1.0


def test_router_names_and_commands() -> None:
    live = importlib.import_module("live_routers")
    spec = live.RouterSpec.parse("vllm-router-sticky_least_loaded")
    assert (spec.family, spec.policy) == ("vllm-router", "sticky_least_loaded")
    cmd = live.command(live.RouterSpec.parse("smg-consistent_hashing"), ["http://a", "http://b"],
                       9000, Path("/v"), "p.json")
    assert cmd[:2] == ["/v/bin/smg", "launch"]
    assert cmd[cmd.index("--policy") + 1] == "consistent_hashing"
    assert cmd[cmd.index("--host") + 1] == "127.0.0.1"
    rr = live.command(live.RouterSpec.parse("round-robin"), ["http://a"], 9000, Path("/v"), "p")
    assert "--no-moves" in rr and rr[rr.index("--policy") + 1] == "turn-round-robin"


def test_tailsieve_ablations_are_never_the_best_other() -> None:
    live = importlib.import_module("live_routers")
    spec = live.RouterSpec.parse("tailsieve-always-pieces")
    assert (spec.family, spec.policy) == ("tailsieve", "tailsieve")
    cmd = live.command(spec, ["http://a"], 9000, Path("/v"), "p")
    assert cmd[cmd.index("--piece-tokens") + 1] == "512"
    bench = importlib.import_module("bench_routers_live")
    rows = [{"scenario": "single", "repeat": rep, "router": name, "wall_s": wall,
             "tokens_per_replica": [1, 1], "router_cpu_s": 0.1}
            for rep in (-1, 0, 1)
            for name, wall in (("tailsieve", 2.0), ("tailsieve-no-moves", 1.0),
                               ("round-robin", 3.0 if rep >= 0 else 0.5))]
    cell = bench.summary(rows, 1.2)["single"]
    assert cell["best_other"] == "round-robin"  # not the faster ablation
    assert cell["ratio_to_best"]["mean"] == 1.5 and cell["ratio_to_best"]["n"] == 2  # no warm-up
