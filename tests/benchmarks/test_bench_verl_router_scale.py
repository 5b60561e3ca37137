"""Smoke runs of ``bench_verl_router_scale.py``: a few fake servers and trajectories for a
couple of seconds, every router, every answer checked token-exact, results in ``tmp_path``."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from smoke_helpers import repo_unchanged

TINY = ["--servers", "4", "--in-flight", "32", "--turns", "2", "--median-tokens", "64",
        "--time-scale", "0.05", "--warmup-s", "0.5", "--duration-s", "2"]


def test_bench_verl_router_scale(tmp_path: Path) -> None:
    out = tmp_path / "scale.json"
    with repo_unchanged():
        importlib.import_module("bench_verl_router_scale").main([*TINY, "--out", str(out)])
    data = json.loads(out.read_text())
    rows = {r["router"]: r for r in data["rows"]}
    assert list(rows) == ["direct", "verl", "tailsieve"]
    for r in rows.values():
        assert r["turns_in_window"] > 0 and r["wrong_turns"] == 0
        assert r["cpu_per_turn_ms"] > 0 and r["overhead_ms_p99"] >= r["overhead_ms_p50"]
    assert "verl 0.9.1" in rows["verl"]["implementation"]
    assert rows["tailsieve"]["gateway"]["num_turns"] > 0
    assert rows["tailsieve"]["server_calls_per_turn"] >= 1.0
    s = data["summary"]
    assert s["tailsieve"]["actors"] == 1 and s["turns_per_s_at_gpu_speed"] > 0


def test_bench_verl_router_scale_one_shard_of_two(tmp_path: Path) -> None:
    out = tmp_path / "shard.json"
    with repo_unchanged():
        importlib.import_module("bench_verl_router_scale").main(
            [*TINY, "--shards", "2", "--routers", "direct,tailsieve", "--out", str(out)])
    data = json.loads(out.read_text())
    assert data["shape"]["shards"] == 2
    assert [r["router"] for r in data["rows"]] == ["direct", "tailsieve"]
    assert all(r["wrong_turns"] == 0 for r in data["rows"])
    assert data["summary"]["tailsieve"]["actors"] == 2
