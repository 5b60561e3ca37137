"""Closed-form replica times under the all-admit decode model (docs/design.md, "Execution model").

With lengths sorted ``L1 >= ... >= Ln`` all starting at time 0,
``T = sum_j L_j * (tau(j) - tau(j-1))``. A request shorter than the ``c`` already on a replica
adds ``Delta T(L, c) = L * (tau(c+1) - tau(c))``. With a running-request cap or a prefill cost
the closed form no longer holds; ``replica_completion_times`` then runs the event engine.

With a context-length term ``k`` (``ThroughputModel.context_s_per_token``) a step also costs
``k`` per token of generated context held by the running requests. Integrated over the decode
(tokens as a continuum), a phase in which ``r`` requests advance from ``a`` to ``b`` tokens adds
``k * r * (b^2 - a^2) / 2``, so a replica's time gains ``k * sum_i L_i^2 / 2``, a cost per
request that does not depend on its neighbours. Prompt tokens ``P_i`` held as context add
``k * P_i * L_i`` (also per request). The closed forms hold while nothing queues: no running cap
reached, no prefill stall and a KV capacity that never binds (``peak_kv_slots``, at most
``sum_i (P_i + L_i)``); otherwise ``replica_run`` runs the event engine (preemption and
recompute included).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailsieve.model.replica_engine import ReplicaConfig, ReplicaEngine
from tailsieve.model.throughput import ThroughputModel

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


def all_admit_time(
    lengths: npt.ArrayLike, model: ThroughputModel, prompt_tokens: npt.ArrayLike | None = None
) -> float:
    """Completion time of the last request when all ``lengths`` start together at 0."""
    raw = np.asarray(lengths, dtype=np.float64)
    arr = np.sort(raw)[::-1]
    n = arr.size
    if n == 0:
        return 0.0
    taus = model.taus(n)
    return float(np.dot(arr, np.diff(taus))) + context_cost(raw, model, prompt_tokens)


def context_cost(
    lengths: npt.ArrayLike, model: ThroughputModel, prompt_tokens: npt.ArrayLike | None = None
) -> float:
    """The context-length term's share of a replica's time:
    ``k * sum_i (P_i * L_i + L_i^2 / 2)`` (``P_i = 0`` without prompts)."""
    return float(np.sum(context_costs(lengths, model, prompt_tokens)))


def context_costs(
    lengths: npt.ArrayLike, model: ThroughputModel, prompt_tokens: npt.ArrayLike | None = None
) -> FloatArray:
    """Per request, ``k * (P * L + L^2 / 2)``: what it adds to its replica's time through the
    context term, wherever it runs (additive, so the exact DP and top-k sweep keep working)."""
    arr = np.asarray(lengths, dtype=np.float64)
    k = model.context_s_per_token
    if k == 0:
        return np.zeros(arr.shape)
    out = arr * arr / 2.0
    if prompt_tokens is not None:
        out = out + np.asarray(prompt_tokens, dtype=np.float64) * arr
    return np.asarray(k * out, dtype=np.float64)


def all_admit_completion_times(
    lengths: npt.ArrayLike, model: ThroughputModel, prompt_tokens: npt.ArrayLike | None = None
) -> FloatArray:
    """Completion time of every request (in input order) when all start together at 0;
    ``prompt_tokens`` (per request) count as context held from the start."""
    arr = np.asarray(lengths, dtype=np.float64)
    n = arr.size
    if n == 0:
        return np.zeros(0)
    order = np.argsort(arr, kind="stable")
    asc = arr[order]
    prev = np.concatenate(([0.0], asc[:-1]))
    running = n - np.arange(n, dtype=np.int64)  # requests still running during gap k
    held = None
    if prompt_tokens is not None and model.has_context_term:
        ptoks = np.asarray(prompt_tokens, dtype=np.float64)[order]
        held = np.cumsum(ptoks[::-1])[::-1]  # prompt tokens of the requests running in gap k
    done = np.cumsum(_phase_times(prev, asc, running, model, held))
    out = np.empty(n)
    out[order] = done
    return out


def capacity_cannot_bind(
    lengths: npt.ArrayLike, config: ReplicaConfig, prompt_tokens: npt.ArrayLike | None = None
) -> bool:
    """True when the closed forms are exact for these requests on this replica: all are
    admitted at once (``max_num_seqs`` not reached, no prefill stall) and the KV capacity
    never binds (``peak_kv_slots <= capacity``; aborts and survivors after a cutoff only
    lower the need)."""
    arr = np.asarray(lengths, dtype=np.int64)
    if config.max_num_seqs is not None and arr.size > config.max_num_seqs:
        return False
    if config.prefill_s > 0 or (config.prefill_s_per_token > 0 and prompt_tokens is not None):
        return False
    cap = config.kv_capacity_tokens
    return cap is None or peak_kv_slots(arr, prompt_tokens) <= cap


def peak_kv_slots(lengths: npt.ArrayLike, prompt_tokens: npt.ArrayLike | None = None) -> int:
    """Most KV slots an all-admit run of these requests ever needs: before each decode step the
    running requests hold their prompt plus generated tokens and need one slot each for the
    next token, ``C + b``. It peaks at the last step of some request, so it is
    ``max_j (sum of P over requests still running + b_j * L_j)`` over the requests sorted by
    length (``L_j`` the j-th shortest, ``b_j`` the requests at least as long). Capacity binds
    in that run if and only if this exceeds it."""
    arr = np.asarray(lengths, dtype=np.int64)
    if arr.size == 0:
        return 0
    order = np.argsort(arr, kind="stable")
    asc = arr[order]
    running = arr.size - np.arange(arr.size, dtype=np.int64)
    held = running * asc
    if prompt_tokens is not None:
        held = held + np.cumsum(np.asarray(prompt_tokens, dtype=np.int64)[order][::-1])[::-1]
    return int(held.max())


@dataclass(frozen=True, slots=True)
class ReplicaRun:
    """One replica's run of a set of requests started at time 0."""

    done_s: FloatArray  # completion time per request (input order)
    num_preemptions: int  # requests preempted for lack of KV capacity
    recomputed_tokens: int  # tokens prefilled again after those preemptions


def replica_run(
    lengths: Sequence[int] | npt.ArrayLike,
    config: ReplicaConfig,
    prompt_tokens: Sequence[int] | npt.ArrayLike | None = None,
) -> ReplicaRun:
    """Completion times (input order, FCFS in input order) with every replica feature: the
    closed form where it is exact (``capacity_cannot_bind``), else the event engine."""
    arr = np.asarray(lengths, dtype=np.int64)
    if capacity_cannot_bind(arr, config, prompt_tokens):
        return ReplicaRun(all_admit_completion_times(arr, config.throughput, prompt_tokens), 0, 0)
    engine = ReplicaEngine(config)
    ptoks = np.zeros(arr.size, dtype=np.int64) if prompt_tokens is None else np.asarray(
        prompt_tokens, dtype=np.int64)
    for i, n in enumerate(arr.tolist()):
        engine.submit(i, n, int(ptoks[i]))
    out = np.zeros(arr.size)
    while engine.has_work():
        for c in engine.pop_next():
            out[int(c.request_id)] = c.time_s  # type: ignore[call-overload]
    return ReplicaRun(out, engine.num_preemptions, engine.recomputed_tokens)


def replica_completion_times(
    lengths: Sequence[int] | npt.ArrayLike,
    config: ReplicaConfig,
    prompt_tokens: Sequence[int] | npt.ArrayLike | None = None,
) -> FloatArray:
    """Completion times (input order) with a running cap (FCFS in input order), prefill and
    KV capacity (see ``replica_run``)."""
    return replica_run(lengths, config, prompt_tokens).done_s


def replica_time(
    lengths: Sequence[int] | npt.ArrayLike,
    config: ReplicaConfig,
    prompt_tokens: Sequence[int] | npt.ArrayLike | None = None,
) -> float:
    """Makespan of one replica (0 when it has no requests)."""
    times = replica_completion_times(lengths, config, prompt_tokens)
    return float(times.max()) if times.size else 0.0


def sorted_segment_completion_times(
    sorted_lengths: FloatArray,
    sorted_replicas: npt.NDArray[np.integer],
    model: ThroughputModel,
    sorted_prompts: FloatArray | None = None,
) -> FloatArray:
    """All-admit completion times of requests on several replicas at once, for input sorted by
    (replica, length) and in that order.

    ``sorted_replicas[i]`` is the replica of request ``i``; every replica starts all its
    requests at time 0. One vectorised pass, equal to ``all_admit_completion_times`` per
    replica; ``sorted_prompts`` (same order) count as context under the context term."""
    n = sorted_lengths.size
    if n == 0:
        return np.zeros(0)
    starts = np.flatnonzero(np.concatenate(([True], sorted_replicas[1:] != sorted_replicas[:-1])))
    sizes = np.diff(np.concatenate((starts, [n])))
    seg_start = np.repeat(starts, sizes)
    pos = np.arange(n) - seg_start
    prev = np.concatenate(([0.0], sorted_lengths[:-1]))
    prev[starts] = 0.0
    held = None
    if sorted_prompts is not None and model.has_context_term and np.any(sorted_prompts):
        # prompt tokens of the requests still running in each phase: a suffix sum per replica
        suffix = np.cumsum(sorted_prompts[::-1])[::-1]
        seg_end = np.repeat(np.concatenate((starts[1:], [n])), sizes)
        tail = np.concatenate((suffix, [0.0]))[seg_end]
        held = suffix - tail
    inc = _phase_times(prev, sorted_lengths, np.repeat(sizes, sizes) - pos, model, held)
    csum = np.cumsum(inc)
    return csum - np.concatenate(([0.0], csum))[seg_start]


def _phase_times(
    start: FloatArray,
    end: FloatArray,
    running: npt.NDArray[np.integer],
    model: ThroughputModel,
    held_prompt: FloatArray | None = None,
) -> FloatArray:
    """Seconds for ``running`` requests to advance from ``start`` to ``end`` tokens each
    (``held_prompt``: prompt tokens those requests hold as context)."""
    out = (end - start) * model.tau_at(running)
    k = model.context_s_per_token
    if k > 0:
        out = out + k * running * (end * end - start * start) / 2.0
        if held_prompt is not None:
            out = out + k * held_prompt * (end - start)
    return out


def progress_in(dt_s: float, running: int, model: ThroughputModel, held_tokens: float) -> float:
    """Tokens each of ``running`` requests emits in ``dt_s`` seconds when together they hold
    ``held_tokens`` of context at the start (the inverse of ``_phase_times``: the root of its
    quadratic)."""
    rate = model.tau(running) + model.context_s_per_token * held_tokens
    curv = model.context_s_per_token * running
    if curv == 0:
        return dt_s / rate
    return 2.0 * dt_s / (rate + float(np.sqrt(rate * rate + 2.0 * curv * dt_s)))
