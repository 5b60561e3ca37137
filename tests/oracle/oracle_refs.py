"""Brute-force reference for the oracle tests (independent of the DP)."""

from __future__ import annotations

import itertools

import numpy as np

from tailsieve.model.throughput import ThroughputModel


def brute_force_makespan(
    lengths: np.ndarray, model: ThroughputModel, prompt_tokens: np.ndarray | None = None
) -> float:
    """Min over all 2^n assignments of max replica all-admit time (independent of the DP).
    The context term: every step reads the context its running requests hold, which sums to
    ``k * (P * L + L^2 / 2)`` per request (integrated, tokens as a continuum)."""
    raw = np.asarray(lengths, dtype=np.float64)
    order = np.argsort(-raw, kind="stable")
    ls = raw[order]
    ps = np.zeros(ls.size) if prompt_tokens is None else np.asarray(prompt_tokens, float)[order]
    k = model.context_s_per_token
    own = k * (ps * ls + ls * ls / 2.0)
    n = ls.size
    if n == 0:
        return 0.0
    taus = np.array([model.tau(b) for b in range(n + 1)])
    bits = np.array(list(itertools.product((0, 1), repeat=n)), dtype=np.int64)
    best = np.inf
    for on in (bits, 1 - bits):
        rank = np.cumsum(on, axis=1)  # rank of each request on its replica (when on it)
        inc = np.where(on == 1, taus[rank] - taus[np.maximum(rank - 1, 0)], 0.0)
        times = inc @ ls + on @ own
        if on is bits:
            t_a = times
        else:
            best = float(np.min(np.maximum(t_a, times)))
    return best
