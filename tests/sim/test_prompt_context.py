"""A trace's prompt tokens reach the simulator as context (and prefill) of every response."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.sim.driver import SimSettings, epoch_prompt_ids, run_policies
from tailsieve.sim.replicas import PoolConfigs
from tailsieve.sim.workloads import resolve_workload, trace_prompt_tokens


def _trace(tmp_path: Path, with_prompts: bool) -> Path:
    rng = np.random.default_rng(0)
    head = "prompt_id,sample,response_tokens" + (",prompt_tokens" if with_prompts else "")
    rows = [head]
    for p in range(40):
        for s in range(4):
            row = f"q{p},{s},{int(rng.integers(100, 6000))}"
            rows.append(row + (f",{500 + 100 * p}" if with_prompts else ""))
    path = tmp_path / ("p.csv" if with_prompts else "n.csv")
    path.write_text("\n".join(rows) + "\n")
    return path


def test_trace_prompts_count_as_context(tmp_path: Path) -> None:
    model = load_profile("qwen3-4b-h100")
    settings = SimSettings(num_replicas=2, num_groups=6, group_size=4, num_steps=3, seed=1)
    times = {}
    for with_prompts in (False, True):
        wl = resolve_workload(str(_trace(tmp_path, with_prompts)), seed=1)
        table = trace_prompt_tokens(wl)
        assert (table is not None) == with_prompts
        if table is not None:
            assert table["q3"] == 800
        for prefill in (0.0, 1e-5):
            pools = PoolConfigs.single(ReplicaConfig.from_profile(
                model, prefill_s_per_token=prefill))
            # the profile's prefill model: 2 x (active - lm_head) params / (0.64 x 989 TFLOP/s)
            assert pools.bulk.recompute_s_per_token == pytest.approx(1.14804e-5, rel=1e-3)
            assert pools.bulk.recompute_s_per_token_pair == pytest.approx(9.3185e-10, rel=1e-3)
            runs = run_policies(["uniform", "seer-oracle", "tailsieve"], settings,
                                lambda wl=wl: epoch_prompt_ids(wl.prompt_ids(), 1), wl, pools)
            times[(with_prompts, prefill)] = {k: r.run.mean_step_s for k, r in runs.items()}
    for policy in ("uniform", "seer-oracle", "tailsieve"):
        # lengths are the same draws; prompts add context reads, then also prefill stalls
        assert times[(True, 0.0)][policy] > times[(False, 0.0)][policy]
        assert times[(True, 1e-5)][policy] > times[(True, 0.0)][policy]
        assert times[(False, 1e-5)][policy] == times[(False, 0.0)][policy]
