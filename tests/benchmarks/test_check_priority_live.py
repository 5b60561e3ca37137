"""Smoke run of ``benchmarks/check_priority_live.py`` against an emulated vLLM server under the
priority policy (one running slot): the short requests finish in priority order."""

from __future__ import annotations

import asyncio
import importlib
import sys
from pathlib import Path

from smoke_helpers import BENCH

from tailsieve.runtime.emulator import EmulatorConfig, EmulatorServer


def test_priorities_differ_from_arrival_order() -> None:
    sys.path.insert(0, str(BENCH))
    mod = importlib.import_module("check_priority_live")
    prios = mod.priorities(4)
    assert prios == [2, -2, 1, -1]
    assert sorted(range(4), key=lambda i: (prios[i], i)) != list(range(4))


async def test_check_priority_live_emulated(tmp_path: Path) -> None:
    sys.path.insert(0, str(BENCH))
    mod = importlib.import_module("check_priority_live")
    cfg = EmulatorConfig.from_profile("qwen3-4b-h100", time_scale=1.0, max_num_seqs=1,
                                      scheduling_policy="priority")
    async with EmulatorServer(cfg) as srv:
        out = tmp_path / "p.json"
        rc = await asyncio.to_thread(mod.main, ["--url", srv.url, "--requests", "4",
                                                "--blocker-tokens", "300", "--out", str(out)])
    assert rc == 0 and out.exists()
