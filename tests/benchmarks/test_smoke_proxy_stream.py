"""Smoke run of ``bench_proxy_stream.py``: two emulated replicas, a few short streamed requests
straight and through the proxy, everything in ``tmp_path``."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from smoke_helpers import repo_unchanged


def test_bench_proxy_stream(tmp_path: Path) -> None:
    out = tmp_path / "stream.json"
    argv = ["--replicas", "2", "--requests", "2", "--max-tokens", "40", "--time-scale", "0.01",
            "--out", str(out)]
    with repo_unchanged():
        importlib.import_module("bench_proxy_stream").main(argv)
    data = json.loads(out.read_text())
    assert set(data["modes"]) == {"direct", "proxy", "proxy_no_moves"}
    for mode in data["modes"].values():
        assert [r["tokens"] for r in mode["requests"]] == [40, 40]
        assert mode["chunks_p50"] > 1 and mode["ttft_p50_s"] > 0
    assert {"proxy", "proxy_no_moves", "pass"} <= set(data["targets"])
    assert not (tmp_path / "stream.profile.json").exists()
