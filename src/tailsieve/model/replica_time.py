"""Closed-form replica times under the all-admit decode model (DESIGN.md section 2).

With lengths sorted ``L1 >= ... >= Ln`` all starting at time 0,
``T = sum_j L_j * (tau(j) - tau(j-1))``. A request shorter than the ``c`` already on a replica
adds ``Delta T(L, c) = L * (tau(c+1) - tau(c))``. With a running-request cap or a prefill cost
the closed form no longer holds; ``replica_completion_times`` then runs the event engine.

With a context-length term ``k`` (``ThroughputModel.context_s_per_token``) a step also costs
``k`` per token of generated context held by the running requests. Integrated over the decode
(tokens as a continuum), a phase in which ``r`` requests advance from ``a`` to ``b`` tokens adds
``k * r * (b^2 - a^2) / 2``, so a replica's time gains ``k * sum_i L_i^2 / 2``, a cost per
request that does not depend on its neighbours. The closed forms count generated tokens only
(prompt context is the event engine's, when prompt lengths are given).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tailsieve.model.replica_engine import ReplicaConfig, ReplicaEngine
from tailsieve.model.throughput import ThroughputModel

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def all_admit_time(lengths: npt.ArrayLike, model: ThroughputModel) -> float:
    """Completion time of the last request when all ``lengths`` start together at 0."""
    arr = np.sort(np.asarray(lengths, dtype=np.float64))[::-1]
    n = arr.size
    if n == 0:
        return 0.0
    taus = model.taus(n)
    return float(np.dot(arr, np.diff(taus))) + context_cost(arr, model)


def context_cost(lengths: npt.ArrayLike, model: ThroughputModel) -> float:
    """The context-length term's share of a replica's time: ``k * sum_i L_i^2 / 2``."""
    k = model.context_s_per_token
    if k == 0:
        return 0.0
    arr = np.asarray(lengths, dtype=np.float64)
    return float(k * np.dot(arr, arr) / 2.0)


def marginal_cost(length: float, num_running: int, model: ThroughputModel) -> float:
    """Extra replica time from adding a request shorter than the ``num_running`` already there."""
    step = model.tau(num_running + 1) - model.tau(num_running)
    return float(length) * step + context_cost([length], model)


def all_admit_completion_times(lengths: npt.ArrayLike, model: ThroughputModel) -> FloatArray:
    """Completion time of every request (in input order) when all start together at 0."""
    arr = np.asarray(lengths, dtype=np.float64)
    n = arr.size
    if n == 0:
        return np.zeros(0)
    order = np.argsort(arr, kind="stable")
    asc = arr[order]
    prev = np.concatenate(([0.0], asc[:-1]))
    running = n - np.arange(n, dtype=np.int64)  # requests still running during gap k
    done = np.cumsum(_phase_times(prev, asc, running, model))
    out = np.empty(n)
    out[order] = done
    return out


def replica_completion_times(
    lengths: Sequence[int] | npt.ArrayLike,
    config: ReplicaConfig,
    prompt_tokens: Sequence[int] | None = None,
) -> FloatArray:
    """Completion times (input order) with a running cap (FCFS in input order) and prefill."""
    arr = np.asarray(lengths, dtype=np.int64)
    prompt_matters = config.prefill_s_per_token > 0 or config.throughput.has_context_term
    if (
        config.max_num_seqs is None
        and config.prefill_cost_s(0) == 0
        and (prompt_tokens is None or not prompt_matters)
    ):
        return all_admit_completion_times(arr, config.throughput)
    engine = ReplicaEngine(config)
    for i, n in enumerate(arr.tolist()):
        engine.submit(i, n, 0 if prompt_tokens is None else int(prompt_tokens[i]))
    out = np.zeros(arr.size)
    while engine.has_work():
        for c in engine.pop_next():
            out[int(c.request_id)] = c.time_s  # type: ignore[call-overload]
    return out


def replica_time(
    lengths: Sequence[int] | npt.ArrayLike,
    config: ReplicaConfig,
    prompt_tokens: Sequence[int] | None = None,
) -> float:
    """Makespan of one replica (0 when it has no requests)."""
    times = replica_completion_times(lengths, config, prompt_tokens)
    return float(times.max()) if times.size else 0.0


def segmented_completion_times(
    lengths: npt.ArrayLike, replica_ids: npt.ArrayLike, model: ThroughputModel
) -> FloatArray:
    """All-admit completion times (input order) of requests on several replicas at once.

    ``replica_ids[i]`` is the replica of request ``i``; every replica starts all its requests
    at time 0. One vectorised pass, equal to ``all_admit_completion_times`` per replica.
    """
    arr = np.asarray(lengths, dtype=np.float64)
    rep = np.asarray(replica_ids, dtype=np.int64)
    if arr.size == 0:
        return np.zeros(0)
    order = np.lexsort((arr, rep))
    out = np.empty(arr.size)
    out[order] = sorted_segment_completion_times(arr[order], rep[order], model)
    return out


def sorted_segment_completion_times(
    sorted_lengths: FloatArray, sorted_replicas: npt.NDArray[np.integer], model: ThroughputModel
) -> FloatArray:
    """Like ``segmented_completion_times`` for input already sorted by (replica, length)."""
    n = sorted_lengths.size
    if n == 0:
        return np.zeros(0)
    starts = np.flatnonzero(np.concatenate(([True], sorted_replicas[1:] != sorted_replicas[:-1])))
    sizes = np.diff(np.concatenate((starts, [n])))
    seg_start = np.repeat(starts, sizes)
    pos = np.arange(n) - seg_start
    prev = np.concatenate(([0.0], sorted_lengths[:-1]))
    prev[starts] = 0.0
    inc = _phase_times(prev, sorted_lengths, np.repeat(sizes, sizes) - pos, model)
    csum = np.cumsum(inc)
    return csum - np.concatenate(([0.0], csum))[seg_start]


def _phase_times(
    start: FloatArray, end: FloatArray, running: npt.NDArray[np.integer], model: ThroughputModel
) -> FloatArray:
    """Seconds for ``running`` requests to advance from ``start`` to ``end`` tokens each."""
    out = (end - start) * model.tau_at(running)
    k = model.context_s_per_token
    if k > 0:
        out = out + k * running * (end * end - start * start) / 2.0
    return out
