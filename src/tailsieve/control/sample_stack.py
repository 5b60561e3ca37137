"""Several remembered steps predicted in one vectorised pass (the controller's hot path).

``SampleStack`` flattens the ``StepSample`` objects of the history into one set of request
arrays; ``pool_maxima`` then places every step's requests on the tail and bulk pools of a
hypothetical (q, m) and simulates all steps' replicas at once (step ``i``'s replica ``r`` is
segment ``i * K + r``): group slot ``k`` runs on replica ``k % R`` (``spread``: response ``j``
of slot ``k`` on replica ``(k * n + j) % R``), and the stand-ins for a cutoff's groups
(``StepSample.extras``) take the slots after the last one. One pass removes the per-step
Python overhead (a decision evaluates some twenty (q, m) points).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from tailsieve.control.step_sample import (
    RUNNING_TOKENS,
    BoolArray,
    FloatArray,
    IntArray,
    StepSample,
)
from tailsieve.model.replica_time import sorted_segment_completion_times
from tailsieve.model.throughput import ThroughputModel


class SampleStack:
    """The requests of several remembered steps, concatenated."""

    def __init__(self, samples: Sequence[StepSample]) -> None:
        self.samples = list(samples)
        self.num_samples = len(self.samples)
        self.num_groups = np.array([s.num_groups for s in self.samples], dtype=np.int64)
        self.group_size = self.samples[0].group_size if self.samples else 1
        self.group_offset = np.concatenate(([0], np.cumsum(self.num_groups)[:-1])).astype(np.int64)
        self.group_sample = np.repeat(np.arange(self.num_samples), self.num_groups)
        total = int(self.num_groups.sum())
        self.rank = np.empty(total, dtype=np.int64)  # position in its step's priority order
        for s, off in zip(self.samples, self.group_offset.tolist(), strict=True):
            self.rank[off + s.by_work] = np.arange(s.num_groups)
        self.req_len = np.concatenate([s.asc_len for s in self.samples]) if total else np.zeros(0)
        self.req_group = np.concatenate(
            [s.asc_group + off for s, off in zip(self.samples, self.group_offset, strict=True)]
        ).astype(np.int64) if total else np.zeros(0, dtype=np.int64)
        self.req_resp = np.concatenate([s.asc_resp for s in self.samples]) if total \
            else np.zeros(0, dtype=np.int64)
        self.req_sample = self.group_sample[self.req_group]
        # per request, its prompt tokens (context); None when no remembered step reported any
        self.req_prompt: FloatArray | None = None
        if total and any(s.asc_prompt is not None for s in self.samples):
            self.req_prompt = np.concatenate([
                s.asc_prompt if s.asc_prompt is not None else np.zeros(s.asc_len.size)
                for s in self.samples
            ])

    def q_effective(self, q: int, m: int, num_groups: int) -> IntArray:
        """Tail groups per remembered step for a batch of ``num_groups`` (scaled to its size)."""
        if m <= 0 or q <= 0:
            return np.zeros(self.num_samples, dtype=np.int64)
        scaled = np.rint(q * self.num_groups / num_groups).astype(np.int64)
        return np.minimum(self.num_groups - 1, np.maximum(1, scaled))

    def pool_maxima(
        self,
        q_eff: IntArray,
        m: int,
        num_bulk: int,
        spread: bool,
        tail_model: ThroughputModel,
        bulk_model: ThroughputModel,
    ) -> tuple[list[float], list[float]]:
        """Per remembered step: the tail pool's last completion and the bulk pool's last
        delivered completion (its ``N - q`` groups, with ``q`` stand-ins for the cutoff's
        groups still running)."""
        n = self.group_size
        rank_req = self.rank[self.req_group]
        in_tail = rank_req < q_eff[self.req_sample]
        tails = [0.0] * self.num_samples
        if m > 0 and in_tail.any():
            slot = rank_req[in_tail]
            pos = slot * n + self.req_resp[in_tail] if spread else slot
            seg = self.req_sample[in_tail] * m + pos % m
            prompt = None if self.req_prompt is None else self.req_prompt[in_tail]
            tails = _segment_maxima(self.req_len[in_tail], seg, None, m, self.num_samples,
                                    tail_model, prompt)
        if num_bulk <= 0:
            return tails, [0.0] * self.num_samples
        not_tail = (self.rank >= q_eff[self.group_sample]).astype(np.int64)
        csum = np.cumsum(not_tail)
        before = csum[self.group_offset] - not_tail[self.group_offset]
        bulk_slot_of_group = csum - 1 - before[self.group_sample]
        keep = ~in_tail
        length = self.req_len[keep]
        slot = bulk_slot_of_group[self.req_group[keep]]
        resp = self.req_resp[keep]
        smp = self.req_sample[keep]
        prompt = None if self.req_prompt is None else self.req_prompt[keep]
        need = self.num_groups - q_eff
        ex = [(i, int(e)) for i, e in enumerate(q_eff.tolist()) if e > 0]
        if ex:
            length = np.concatenate([length, *(self.samples[i].extras(e) for i, e in ex)])
            slot = np.concatenate([slot, *(int(need[i]) + np.repeat(np.arange(e), n)
                                           for i, e in ex)])
            resp = np.concatenate([resp, *(np.tile(np.arange(n), e) for _, e in ex)])
            smp = np.concatenate([smp, *(np.full(e * n, i) for i, e in ex)])
            if prompt is not None:  # the stand-ins hold their step's mean prompt
                prompt = np.concatenate([prompt, *(np.full(e * n, self.samples[i].mean_prompt)
                                                   for i, e in ex)])
        pos = slot * n + resp if spread else slot
        seg = smp * num_bulk + pos % num_bulk
        bulks = _segment_maxima(length, seg, slot < need[smp], num_bulk, self.num_samples,
                                bulk_model, prompt)
        return tails, bulks


def _segment_maxima(
    length: FloatArray,
    seg: IntArray,
    counted: BoolArray | None,
    per_sample: int,
    num_samples: int,
    model: ThroughputModel,
    prompt: FloatArray | None = None,
) -> list[float]:
    """All-admit completion times of every segment (replica), ``prompt`` tokens (per request)
    held as context, then per remembered step the last completion among the counted requests
    (0 when it has none)."""
    running = length >= RUNNING_TOKENS
    if running.any():
        # an all-admit completion depends only on the shorter requests and how many are
        # longer: any length above every finite one gives the same times, and keeps the
        # running stand-ins' huge phase times out of the shared cumulative sum
        length = np.where(running, length[~running].max(initial=0.0) + 1.0, length)
    # one float key sorts by (segment, length)
    order = np.argsort(seg * 1e10 + length)
    seg_sorted = seg[order]
    times = sorted_segment_completion_times(
        length[order], seg_sorted, model, None if prompt is None else prompt[order]
    )
    if counted is not None:
        times = np.where(counted[order], times, 0.0)
    if num_samples == 1:
        return [float(times.max())]
    starts = np.searchsorted(seg_sorted, np.arange(num_samples) * per_sample)
    ends = np.append(starts[1:], seg_sorted.size)
    maxima = np.maximum.reduceat(times, np.minimum(starts, seg_sorted.size - 1))
    return [float(x) if e > b else 0.0 for x, b, e in zip(maxima, starts, ends, strict=True)]

