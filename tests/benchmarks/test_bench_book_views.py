"""Smoke run of ``bench_book_views.py``: a few slots and sessions, results in ``tmp_path``."""

from __future__ import annotations

import importlib
import json
from pathlib import Path

from smoke_helpers import repo_unchanged


def test_bench_book_views(tmp_path: Path) -> None:
    out = tmp_path / "views.json"
    with repo_unchanged():
        importlib.import_module("bench_book_views").main(
            ["--slots", "8", "--pool", "4", "--sessions", "32", "--turns", "50",
             "--out", str(out)])
    data = json.loads(out.read_text())
    assert data["decisions"] == 32 + 50 and data["cpu_per_turn_ms"] > 0
    assert len(data["decisions_sha1"]) == 40
