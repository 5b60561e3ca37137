"""Smoke run of ``bench_proxy_imbalance.py``: both scenarios on three emulated replicas, a
few tiny turns, everything in ``tmp_path``."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from smoke_helpers import repo_unchanged


def test_bench_proxy_imbalance(tmp_path: Path) -> None:
    out = tmp_path / "imbalance.json"
    argv = ["--sessions", "3", "--idle-sessions", "1", "--rounds", "1", "--turn-tokens", "16",
            "--short-tokens", "4", "--prompt-tokens", "16", "--tool-s", "0.01",
            "--time-scale", "0.01", "--profile", "cpu", "--out", str(out)]
    with repo_unchanged():
        importlib.import_module("bench_proxy_imbalance").main(argv)
    data = json.loads(out.read_text())
    modes = [(r["scenario"], r["mode"]) for r in data["runs"]]
    assert modes == [("sticky", m) for m in ("tailsieve", "finish", "pinned", "no-moves")] + [
        ("slow", "tailsieve"), ("slow", "no-moves")]
    sticky = {r["mode"]: r for r in data["runs"] if r["scenario"] == "sticky"}
    assert sticky["tailsieve"]["tool_waits_before_rounds"] == [3, 1, 1]  # quiet sessions
    assert sticky["finish"]["tool_waits_before_rounds"] == [3, 0, 0]  # ended by the client
    assert sticky["pinned"]["tool_wait_horizon_s"] == 14400.0
    assert set(data["summary"]) == {"sticky", "slow"}
    for s in data["summary"].values():
        assert s["no-moves"]["speedup_vs_no_moves"] == 1.0
        assert s["no-moves"]["moves_at_boundary"] == 0
