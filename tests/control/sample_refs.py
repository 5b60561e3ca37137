"""Per-sample reference for the controller tests (what ``SampleStack`` stacks)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tailsieve.control.step_sample import RUNNING_TOKENS, StepSample
from tailsieve.model.replica_time import sorted_segment_completion_times
from tailsieve.model.throughput import ThroughputModel

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def pool_times(
    sample: StepSample,
    slot_of_group: IntArray,
    num_replicas: int,
    model: ThroughputModel,
    extra: int = 0,
    spread: bool = False,
) -> tuple[FloatArray, IntArray]:
    """Completion time and slot of every request placed by ``placement``, both sorted by
    (replica, length)."""
    length, rep, slot, prompt = sample.placement(slot_of_group, num_replicas, extra, spread)
    running = length >= RUNNING_TOKENS
    if running.any():  # same completions, no huge phase times (see ``SampleStack``)
        length = np.where(running, length[~running].max(initial=0.0) + 1.0, length)
    order = np.lexsort((length, rep))
    sorted_prompt = None if prompt is None else prompt[order]
    times = sorted_segment_completion_times(length[order], rep[order], model, sorted_prompt)
    return times, slot[order]
