"""Workload models: replay, resampling, synthetic, prompt streams, load_workload."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from tailsieve.errors import ConfigError, TraceError
from tailsieve.workload import (
    ReplayWorkload,
    ResampleWorkload,
    SyntheticWorkload,
    Trace,
    Workload,
    load_workload,
    preset,
    prompt_stream,
    write_trace,
)


def _multi() -> Trace:
    rows = [
        (p, s, k, 100 * (i + 1) + 10 * s + k)
        for i, p in enumerate("abc")
        for s in (0, 5)
        for k in range(3)
    ]
    return Trace.from_columns(
        prompt_id=[r[0] for r in rows],
        step=[r[1] for r in rows],
        sample=[r[2] for r in rows],
        response_tokens=[r[3] for r in rows],
    )


def test_replay_returns_exact_samples() -> None:
    wl = ReplayWorkload(_multi())
    rng = np.random.default_rng(0)
    assert isinstance(wl, Workload)
    assert wl.prompt_ids() == ("a", "b", "c")
    assert wl.group_lengths("b", 0, 3, rng).tolist() == [200, 201, 202]
    assert wl.group_lengths("b", 1, 2, rng).tolist() == [250, 251]  # step index 1 = checkpoint 5
    assert wl.group_lengths("b", 2, 3, rng).tolist() == [200, 201, 202]  # wraps
    with pytest.raises(ConfigError, match="has 3 samples, 4 requested"):
        wl.group_lengths("a", 0, 4, rng)
    with pytest.raises(TraceError, match="'zz'"):
        wl.group_lengths("zz", 0, 1, rng)
    with pytest.raises(ConfigError):
        ReplayWorkload(_multi(), wrap_steps=False).group_lengths("a", 2, 1, rng)


def test_resample_draws_from_own_samples_with_drift() -> None:
    tr = _multi().select(_multi().step == 0)
    wl = ResampleWorkload(tr)
    rng = np.random.default_rng(1)
    draws = np.concatenate([wl.group_lengths("c", s, 50, rng) for s in range(3)])
    assert set(draws.tolist()) <= {300, 301, 302} and draws.size == 150
    drift = ResampleWorkload(tr, drift_sigma_log=0.2, drift_seed=4)
    assert drift.drift_log(0) == 0.0
    d3 = drift.drift_log(3)
    assert d3 == ResampleWorkload(tr, drift_sigma_log=0.2, drift_seed=4).drift_log(3) != 0.0
    got = drift.group_lengths("a", 3, 20, rng)
    base = np.array([100, 101, 102]) * np.exp(d3)
    assert set(got.tolist()) <= set(np.rint(base).astype(int).tolist())
    halves = ResampleWorkload(_multi(), halves="alternate")  # pools 6 samples: 100..102, 150..152
    assert set(halves.group_lengths("a", 0, 30, rng).tolist()) <= {100, 101, 102}
    assert set(halves.group_lengths("a", 1, 30, rng).tolist()) <= {150, 151, 152}


def test_synthetic_is_seeded_and_truncates() -> None:
    params = preset("paper-math")
    a, b = SyntheticWorkload(params, 50, seed=7), SyntheticWorkload(params, 50, seed=7)
    ra, rb = np.random.default_rng(3), np.random.default_rng(3)
    pid = a.prompt_ids()[4]
    assert np.array_equal(a.group_lengths(pid, 2, 8, ra), b.group_lengths(pid, 2, 8, rb))
    tr = a.generate_trace(3, 8, seed=1)
    assert tr.num_rows == 50 * 3 * 8 and tr.is_multi_checkpoint
    assert tr.response_tokens.max() <= params.max_tokens
    at_cap = tr.response_tokens == params.max_tokens
    assert tr.finish_reason is not None
    assert np.array_equal(tr.finish_reason == "length", at_cap)
    assert tr.same_rows(SyntheticWorkload(params, 50, seed=7).generate_trace(3, 8, seed=1))


def test_prompt_stream_orders_and_cycles() -> None:
    wl = SyntheticWorkload(preset("aime-r1"), 5, seed=0)
    ids = wl.prompt_ids()
    assert prompt_stream(wl, 12) == list(ids) * 2 + list(ids[:2])
    s1 = prompt_stream(wl, 15, np.random.default_rng(9))
    assert s1 == prompt_stream(wl, 15, np.random.default_rng(9))
    for epoch in range(3):
        assert sorted(s1[5 * epoch : 5 * epoch + 5]) == sorted(ids)


def test_load_workload_dispatch(tmp_path: Path, aime_path: Path) -> None:
    assert isinstance(load_workload("paper-math", num_prompts=10), SyntheticWorkload)
    assert isinstance(load_workload(aime_path), ResampleWorkload)
    path = tmp_path / "m.jsonl"
    write_trace(_multi(), path)
    assert isinstance(load_workload(path), ReplayWorkload)
    with pytest.raises(ConfigError, match="unknown workload"):
        load_workload("nonsense")
