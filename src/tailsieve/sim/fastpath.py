"""Closed-form step simulation (nothing queues: docs/design.md, "Execution model").

Used when on every replica all requests are admitted at once and the KV capacity cannot bind
(``replica_time.capacity_cannot_bind``). All requests of a replica start at t = 0 and advance
together, so completion times follow from ``all_admit_completion_times`` (context term and
prompt context included). Nothing changes before the cutoff, so those times are exact up to it.
At the cutoff every request still running has emitted the same number of tokens ``P`` (the
replica's progress, from the closed-form inverse of the phase time); aborted requests keep
``P`` tokens as waste, survivors (pinned groups) restart the closed form from the cutoff with
``L - P`` left and ``prompt + P`` tokens of context held.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from tailsieve.model.replica_engine import ReplicaConfig
from tailsieve.model.replica_time import all_admit_completion_times, progress_in
from tailsieve.model.throughput import ThroughputModel
from tailsieve.sim.layout import RequestLayout, SimResult, choose_fresh


def progress_at(
    lengths: npt.NDArray[np.int64],
    done_s: npt.NDArray[np.float64],
    t_s: float,
    model: ThroughputModel,
    prompt_tokens: npt.NDArray[np.int64] | None = None,
) -> float:
    """Tokens emitted per running request by time ``t_s`` on an all-admit replica."""
    order = np.argsort(lengths, kind="stable")
    asc = lengths[order].astype(np.float64)
    times = np.sort(done_s)
    j = int(np.searchsorted(times, t_s, side="right"))
    prev_len = float(asc[j - 1]) if j > 0 else 0.0
    prev_t = float(times[j - 1]) if j > 0 else 0.0
    running = asc.size - j
    if running == 0:
        return prev_len
    held = running * prev_len
    if prompt_tokens is not None:
        held += float(prompt_tokens[order][j:].sum())
    p = prev_len + progress_in(t_s - prev_t, running, model, held)
    return min(p, float(asc[j]))


def simulate_closed_form(
    layout: RequestLayout, configs: Sequence[ReplicaConfig], k: int
) -> SimResult:
    """Simulate one plan analytically; ``k`` fresh groups are delivered."""
    n = layout.group_size
    lens, ptoks = layout.lengths, layout.prompt_tokens
    done = np.zeros(lens.size)
    for r, idx in enumerate(layout.replica_requests):
        if idx.size:
            done[idx] = all_admit_completion_times(lens[idx], configs[r].throughput, ptoks[idx])
    group_done = done.reshape(layout.num_groups, n).max(axis=1) if layout.num_groups else done
    chosen, cutoff = choose_fresh(group_done, layout, k)
    so_far = np.zeros(lens.size, dtype=np.int64)
    aborted_req = np.repeat(layout.fresh & ~chosen, n)
    if aborted_req.any():
        for r, idx in enumerate(layout.replica_requests):
            ab = aborted_req[idx]
            if not ab.any():
                continue
            model = configs[r].throughput
            rep_len, rep_done, rep_prompt = lens[idx], done[idx], ptoks[idx]
            p = progress_at(rep_len, rep_done, cutoff, model, rep_prompt)
            unfinished = rep_done > cutoff
            cut = ab & unfinished
            so_far[idx[cut]] = np.minimum(rep_len[cut], int(p))
            survive = ~ab & unfinished
            if survive.any():
                left = np.maximum(rep_len[survive] - p, 0.0)
                held = rep_prompt[survive] + p
                rep_done[survive] = cutoff + all_admit_completion_times(left, model, held)
            rep_done[cut] = np.inf
            done[idx] = rep_done
    return SimResult(done_s=done, tokens_so_far=so_far, delivered_fresh=chosen, cutoff_s=cutoff)
