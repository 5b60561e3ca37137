"""The predictor's replica times take the context term, prompt context included."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.control.predictor import PoolTimePredictor, StepWork
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_time import (
    all_admit_completion_times,
    sorted_segment_completion_times,
)

QWEN = load_profile("qwen3-4b-h100")


@settings(max_examples=40, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3), st.integers(1, 20_000), st.integers(0, 5_000)),
                min_size=1, max_size=40))
def test_segmented_times_with_prompts_equal_per_replica_closed_form(
    reqs: list[tuple[int, int, int]],
) -> None:
    arr = np.array(reqs, dtype=np.float64)
    order = np.lexsort((arr[:, 1], arr[:, 0]))
    rep, lens, prompts = arr[order, 0].astype(np.int64), arr[order, 1], arr[order, 2]
    got = sorted_segment_completion_times(lens, rep, QWEN, prompts)
    for r in np.unique(rep):
        on = rep == r
        want = all_admit_completion_times(lens[on], QWEN, prompts[on])
        assert got[on] == pytest.approx(want, rel=1e-12)


def test_tail_prediction_counts_prompt_context() -> None:
    groups = [[9_000, 8_000], [500, 400], [450, 300], [200, 100]]
    pred = PoolTimePredictor(4, 2, QWEN, QWEN)
    plain = pred.predict([StepWork(groups, 1)], 1, 1)
    prompts = [3_000, 200, 200, 200]
    with_p = pred.predict([StepWork(groups, 1, prompts)], 1, 1)
    # the tail replica runs the first group alone: all-admit time with its prompts held
    want = float(all_admit_completion_times(groups[0], QWEN, [3_000, 3_000]).max())
    assert with_p.tail_s == pytest.approx(want, rel=1e-12)
    assert with_p.tail_s > plain.tail_s and with_p.bulk_s > plain.bulk_s
    assert StepWork.from_dict(StepWork(groups, 1, prompts).to_dict()).prompt_tokens == prompts
    assert StepWork.from_dict(StepWork(groups, 1).to_dict()).prompt_tokens is None
