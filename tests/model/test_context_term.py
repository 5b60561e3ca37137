"""The throughput model's context-length term: step = tau(b) + k * (context held by the batch)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.errors import ProfileError
from tailsieve.model.profiles import builtin_profile
from tailsieve.model.replica_engine import ReplicaConfig, ReplicaEngine
from tailsieve.model.replica_time import (
    all_admit_completion_times,
    all_admit_time,
    capacity_cannot_bind,
    context_cost,
    replica_completion_times,
    sorted_segment_completion_times,
)
from tailsieve.model.speculative import SpecConfig
from tailsieve.model.throughput import ThroughputModel

K = 3e-6  # seconds per decode step per token of context
CPU = builtin_profile("cpu")
CPU_K = CPU.with_context(K)


def engine_times(lengths: list[int], cfg: ReplicaConfig, prompts: list[int] | None = None):  # type: ignore[no-untyped-def]
    eng = ReplicaEngine(cfg)
    for i, n in enumerate(lengths):
        eng.submit(i, n, 0 if prompts is None else prompts[i])
    out = np.zeros(len(lengths))
    while eng.has_work():
        for c in eng.pop_next():
            out[int(c.request_id)] = c.time_s  # type: ignore[call-overload]
    return out


def token_by_token(lengths: list[int], model: ThroughputModel, prompts: list[int]) -> np.ndarray:
    """Literal decode: each step costs tau(b) + k * (prompt + generated) summed over the batch."""
    left = np.array(lengths, dtype=np.int64)
    ctx = np.array(prompts, dtype=np.float64)
    done = np.zeros(len(lengths))
    t = 0.0
    while (left > 0).any():
        run = left > 0
        t += model.tau(int(run.sum())) + model.context_s_per_token * float(ctx[run].sum())
        ctx[run] += 1
        left[run] -= 1
        done[run & (left == 0)] = t
    return done


@settings(max_examples=50, deadline=None)
@given(st.lists(st.integers(0, 4_000), min_size=0, max_size=30))
def test_closed_form_equals_event_engine(lengths: list[int]) -> None:
    closed = all_admit_completion_times(lengths, CPU_K)
    assert closed == pytest.approx(engine_times(lengths, ReplicaConfig(CPU_K)), rel=1e-9, abs=1e-12)
    expect = float(closed.max()) if lengths else 0.0
    assert all_admit_time(lengths, CPU_K) == pytest.approx(expect, rel=1e-9, abs=1e-12)
    order = np.argsort(lengths, kind="stable")
    asc = np.asarray(lengths, dtype=np.float64)[order]
    seg = sorted_segment_completion_times(asc, np.zeros(len(lengths), dtype=np.int64), CPU_K)
    assert seg == pytest.approx(closed[order], rel=1e-9, abs=1e-12)


def test_term_adds_k_sum_of_squares_over_two() -> None:
    lengths = [100, 2000, 350, 7]
    extra = all_admit_time(lengths, CPU_K) - all_admit_time(lengths, CPU)
    assert extra == pytest.approx(K * sum(x * x for x in lengths) / 2)


@settings(max_examples=40, deadline=None)
@given(st.lists(st.integers(1, 3_000), min_size=0, max_size=25), st.integers(1, 3_000))
def test_marginal_cost_identity_with_context(lengths: list[int], extra: int) -> None:
    shorter = min([extra, *lengths])
    gain = all_admit_time([*lengths, shorter], CPU_K) - all_admit_time(lengths, CPU_K)
    n = len(lengths)  # the shorter one adds one step per token at n + 1, plus its context
    marginal = shorter * (CPU_K.tau(n + 1) - CPU_K.tau(n)) + float(context_cost([shorter], CPU_K))
    assert gain == pytest.approx(marginal, rel=1e-9)


@settings(max_examples=15, deadline=None)
@given(st.lists(st.integers(50, 400), min_size=1, max_size=8),
       st.lists(st.integers(0, 300), min_size=8, max_size=8))
def test_engine_with_prompts_matches_token_by_token(lengths: list[int], prompts: list[int]) -> None:
    """Generated tokens as a continuum (the engine) versus whole steps: within 1%."""
    p = prompts[: len(lengths)]
    model = ThroughputModel(CPU.points, "k", context_s_per_token=2e-5)
    exact = token_by_token(lengths, model, p)
    got = engine_times(lengths, ReplicaConfig(model), p)
    assert got == pytest.approx(exact, rel=0.01)
    # the closed form with prompt context agrees with the engine
    assert replica_completion_times(lengths, ReplicaConfig(model), p) == pytest.approx(got)
    assert all_admit_completion_times(lengths, model, p) == pytest.approx(got, rel=1e-9)


def test_engine_abort_and_cap_keep_context_sums_consistent() -> None:
    cfg = ReplicaConfig(CPU_K, max_num_seqs=2)
    eng = ReplicaEngine(cfg)
    for i, n in enumerate([500, 400, 300, 200]):
        eng.submit(i, n, prompt_tokens=50)
    eng.advance(0.5)
    wasted = eng.abort(0)
    assert 0 < wasted < 500
    times = {}
    while eng.has_work():
        for c in eng.pop_next():
            times[c.request_id] = c.time_s
    assert set(times) == {1, 2, 3}
    # once everything has finished the engine is idle: the step cost is back to zero
    assert eng.step_s() == 0.0


def test_context_term_is_validated_saved_scaled_and_spec_applied(tmp_path: Path) -> None:
    with pytest.raises(ProfileError, match="context_s_per_token"):
        CPU.with_context(-1e-6)
    with pytest.raises(ProfileError, match="context_s_per_token"):
        CPU.with_context(float("nan"))
    path = tmp_path / "k.json"
    CPU_K.save(path)
    assert json.loads(path.read_text())["context_s_per_token"] == K
    assert ThroughputModel.load(path) == CPU_K
    assert "context_s_per_token" not in CPU.to_dict()
    bad = {"points": [{"batch_size": 1, "step_s": 0.01}], "context_s_per_token": "fast"}
    with pytest.raises(ProfileError, match="context_s_per_token must be a number"):
        ThroughputModel.from_dict(bad, where="x.json")
    assert CPU_K.scaled(0.5).context_s_per_token == pytest.approx(K / 2)
    spec = SpecConfig.parse("mtp:3")
    assert spec.apply(CPU_K).context_s_per_token == pytest.approx(K / spec.tokens_per_step)


def test_context_term_keeps_the_closed_form_but_capacity_leaves_it() -> None:
    lengths = [300, 200, 100]
    assert capacity_cannot_bind(lengths, ReplicaConfig(CPU))
    assert capacity_cannot_bind(lengths, ReplicaConfig(CPU_K))
    assert not capacity_cannot_bind(lengths, ReplicaConfig(CPU_K, kv_capacity_tokens=100))


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 400), st.integers(0, 300)), min_size=1, max_size=12),
       st.lists(st.floats(0.0, 3.0), min_size=1, max_size=6), st.sampled_from([None, 3]))
def test_running_contexts_are_prompt_plus_tokens_so_far(
    reqs: list[tuple[int, int]], times: list[float], cap: int | None,
) -> None:
    """What a re-balance check reads of a replica, at any moment (queued requests, finished
    ones, requests admitted later: none of them is listed, every running one is)."""
    cfg = ReplicaConfig.from_profile(CPU_K, max_num_seqs=cap)
    e = ReplicaEngine(cfg)
    for i, (n, p) in enumerate(reqs):
        e.submit(i, n, p)
    for t in sorted(times):
        e.advance(t)
        got = e.running_contexts()
        assert len(got) == e.num_running
        assert got == [(i, reqs[i][1] + e.tokens_so_far(i)) for i, _ in got]
        assert sum(c for _, c in got) == pytest.approx(e.kv_tokens(), abs=len(got) + 1e-6)
