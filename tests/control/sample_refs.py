"""Per-sample reference for the controller tests (what ``SampleStack`` stacks)."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from tailsieve.control.step_sample import RUNNING_TOKENS, StepSample
from tailsieve.model.replica_time import sorted_segment_completion_times
from tailsieve.model.throughput import ThroughputModel

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def placement(
    sample: StepSample,
    slot_of_group: IntArray,
    num_replicas: int,
    extra: int = 0,
    spread: bool = False,
) -> tuple[FloatArray, IntArray, IntArray, FloatArray | None]:
    """(length, replica, slot, prompt tokens or None) of every request of the groups given a
    slot (``-1`` = absent) by ``slot_of_group``; slot ``k`` runs on replica ``k % num_replicas``
    (``spread``: response ``j`` of slot ``k`` on replica ``(k * n + j) % num_replicas``).
    ``extra`` more groups (the slots after the last mapped one) stand for the groups a
    cutoff aborts: the step's own aborted groups (cycled) when it had a cutoff."""
    req = slot_of_group[sample.asc_group]
    keep = req >= 0
    length, slot, resp = sample.asc_len[keep], req[keep], sample.asc_resp[keep]
    prompt = None if sample.asc_prompt is None else sample.asc_prompt[keep]
    n = sample.group_size
    if extra > 0:
        first = int(slot.max()) + 1 if slot.size else 0
        length = np.concatenate((length, sample.extras(extra)))
        slot = np.concatenate((slot, np.repeat(np.arange(first, first + extra), n)))
        resp = np.concatenate((resp, np.tile(np.arange(n), extra)))
        if prompt is not None:
            prompt = np.concatenate((prompt, np.full(extra * n, sample.mean_prompt)))
    pos = slot * n + resp if spread else slot
    return length, pos % num_replicas, slot, prompt


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
    length, rep, slot, prompt = placement(sample, slot_of_group, num_replicas, extra, spread)
    running = length >= RUNNING_TOKENS
    if running.any():  # same completions, no huge phase times (see ``SampleStack``)
        length = np.where(running, length[~running].max(initial=0.0) + 1.0, length)
    order = np.lexsort((length, rep))
    sorted_prompt = None if prompt is None else prompt[order]
    times = sorted_segment_completion_times(length[order], rep[order], model, sorted_prompt)
    return times, slot[order]
