"""The controller's vectorised prediction equals placing and simulating each remembered step on
its own (``sample_refs.pool_times``), with and without spread dealing, cutoff stand-ins and
prompt-token context."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from sample_refs import pool_times

from tailsieve.control.predictor import PoolTimePredictor, StepSample, StepWork
from tailsieve.model.profiles import load_profile

MODEL = load_profile("qwen3-4b-h100")


def reference(s: StepSample, q: int, m: int, num_groups: int, num_replicas: int,
              spread: bool) -> tuple[float, float]:
    """One step, placed and simulated on its own."""
    g = s.num_groups
    q_eff = 0 if m <= 0 or q <= 0 else min(g - 1, max(1, round(q * g / num_groups)))
    m_eff = m if q_eff else 0
    tail_idx = s.by_work[:q_eff]
    tail = 0.0
    if q_eff:
        slot = np.full(g, -1, dtype=np.int64)
        slot[tail_idx] = np.arange(q_eff)
        tail = float(pool_times(s, slot, m_eff, MODEL, spread=spread)[0].max())
    in_tail = np.zeros(g, dtype=bool)
    in_tail[tail_idx] = True
    slot = np.full(g, -1, dtype=np.int64)
    slot[~in_tail] = np.arange(g - q_eff)
    times, slots = pool_times(s, slot, num_replicas - m_eff, MODEL, extra=q_eff, spread=spread)
    return tail, float(times[slots < g - q_eff].max())


@settings(max_examples=40, deadline=None)
@given(
    seed=st.integers(0, 2**31 - 1),
    num_steps=st.integers(1, 4),
    q=st.integers(0, 12),
    m=st.integers(0, 5),
    spread=st.booleans(),
    cutoff=st.booleans(),
    prompts=st.booleans(),
)
def test_stacked_prediction_equals_per_step(
    seed: int, num_steps: int, q: int, m: int, spread: bool, cutoff: bool, prompts: bool
) -> None:
    rng = np.random.default_rng(seed)
    n, num_groups, num_replicas = 4, 16, 6
    history = []
    for i in range(num_steps):
        g = num_groups if i else int(rng.integers(4, num_groups + 1))  # one shorter step
        groups = [rng.integers(1, 5000, n).tolist() for _ in range(g)]
        aborted = [(int(rng.integers(0, n)), int(rng.integers(0, 9000))) for _ in range(3)] \
            if cutoff else []
        # prompt context on some steps only (a stack may mix steps with and without)
        ptoks = rng.integers(0, 3000, g).tolist() if prompts and i % 2 == 0 else None
        history.append(StepWork(groups, int(rng.integers(0, 4)), ptoks, aborted))
    pred = PoolTimePredictor(num_groups, num_replicas, MODEL, MODEL, spread=spread)
    samples = pred.samples(history)
    got = pred.predict_samples(samples, q, m)
    want = [reference(s, q, m, num_groups, num_replicas, spread) for s in samples]
    assert [t for t, _ in got.per_step] == pytest.approx([t for t, _ in want], rel=1e-9)
    assert [b for _, b in got.per_step] == pytest.approx([b for _, b in want], rel=1e-9)
    assert got.makespan() == pytest.approx(np.mean([max(t, b) for t, b in want]), rel=1e-9)
