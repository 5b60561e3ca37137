"""Smoke run of ``bench_proxy.py``: two emulated replicas, a tiny step, everything in
``tmp_path``."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from smoke_helpers import repo_unchanged


def test_bench_proxy(tmp_path: Path) -> None:
    out = tmp_path / "proxy.json"
    argv = ["--replicas", "2", "--groups", "4", "--group-size", "2", "--steps", "1",
            "--time-scale", "0.01", "--profile", "cpu", "--piece-tokens", "64", "--out", str(out)]
    with repo_unchanged():
        importlib.import_module("bench_proxy").main(argv)
    data = json.loads(out.read_text())
    assert [r["step"] for r in data["steps"]] == [0, 1]
    for r in data["steps"]:
        assert r["num_requests"] == 8 and r["proxy_cpu_s"] > 0
        assert r["delivered_tokens"] > 0 and r["direct_wall_s"] > 0
        assert r["num_pieces"] >= 8
    assert not (tmp_path / "proxy.profile.json").exists()
