"""Top-k isolation sweep for 2 replicas (docs/design.md, "Offline oracle").

The ``k`` longest requests go to the *tail* replica, the other ``n - k`` to the *bulk*
replica; every ``k`` in ``0..n`` is evaluated with the all-admit closed form in ``O(n^2)``
total (one correlation), which is fast for ``n`` up to several thousands. The context term
adds each request's own ``k * (P * L + L^2 / 2)`` to whichever replica runs it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailsieve.model.replica_time import context_costs
from tailsieve.model.throughput import ThroughputModel

FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class TopKSweep:
    """Tail, bulk and makespan for every ``k`` (index = k, length n + 1)."""

    tail_s: FloatArray  # all-admit time of the tail replica holding the k longest, seconds
    bulk_s: FloatArray  # all-admit time of the bulk replica holding the rest, seconds
    makespan_s: FloatArray  # max(tail_s, bulk_s)
    best_k: int  # smallest k attaining the minimum makespan
    best_makespan_s: float  # makespan at best_k, seconds

    @property
    def num_requests(self) -> int:
        return int(self.tail_s.size - 1)


def topk_sweep(
    lengths: npt.ArrayLike, model: ThroughputModel, prompt_tokens: npt.ArrayLike | None = None
) -> TopKSweep:
    """Evaluate top-k isolation for ``k = 0..n`` (lengths in tokens, any order; ``prompt_tokens``
    per request count as context)."""
    raw = np.asarray(lengths, dtype=np.float64).ravel()
    order = np.argsort(-raw, kind="stable")
    ls = raw[order]
    ctx = context_costs(ls, model, None if prompt_tokens is None
                        else np.asarray(prompt_tokens, dtype=np.float64).ravel()[order])
    n = ls.size
    if n == 0:
        z = np.zeros(1)
        return TopKSweep(z, z.copy(), z.copy(), 0, 0.0)
    marg = np.diff(model.taus(n))  # marg[c] = tau(c+1) - tau(c)
    tail = np.concatenate(([0.0], np.cumsum(ls * marg)))  # tail[k] = sum_{j<k} L_j marg[j]
    padded = np.concatenate((ls, np.zeros(n)))
    # bulk[k] = sum_{i>=0, k+i<n} L_{k+i} marg[i]
    bulk = np.correlate(padded, marg, mode="valid")[: n + 1]
    if np.any(ctx):
        csum = np.concatenate(([0.0], np.cumsum(ctx)))
        tail = tail + csum
        bulk = bulk + (csum[-1] - csum)
    makespan = np.maximum(tail, bulk)
    best = int(np.argmin(makespan))
    return TopKSweep(tail, bulk, makespan, best, float(makespan[best]))
