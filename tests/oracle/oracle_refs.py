"""References for the oracle tests: brute force (independent of the DP) and the Lagrangian
bound one weight at a time (what ``split_bound.LagrangianBound`` stacks)."""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt

from tailsieve.model.throughput import ThroughputModel

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


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


def min_remaining_work(
    ls: FloatArray, marg: FloatArray, weight: float = 0.5, ctx: FloatArray | None = None
) -> list[FloatArray]:
    """``W[k][a]``: least weighted work ``weight * X + (1 - weight) * Y`` (seconds) of placing
    requests ``k..n-1`` (sorted descending), where ``X`` is what they add to a replica already
    holding ``a`` requests and ``Y`` what they add to the other (holding ``k - a``). Exact by
    backward recursion. For any completion, ``max(T_A + X, T_B + Y) >= weight * (T_A + X) +
    (1 - weight) * (T_B + Y) >= weight * T_A + (1 - weight) * T_B + W[k][a]``."""
    n = ls.size
    c = np.zeros(n) if ctx is None else ctx
    out: list[FloatArray] = [np.zeros(0)] * (n + 1)
    nxt = np.zeros(n + 1)
    out[n] = nxt
    for k in range(n - 1, -1, -1):
        a = np.arange(k + 1)
        cur = np.minimum(
            weight * (ls[k] * marg[a] + c[k]) + nxt[a + 1],
            (1.0 - weight) * (ls[k] * marg[k - a] + c[k]) + nxt[a],
        )
        out[k] = cur
        nxt = cur
    return out


def lagrangian_bounds(
    k: int,
    a: IntArray,
    ta: FloatArray,
    tb: FloatArray,
    tables: list[tuple[float, list[FloatArray]]],
) -> FloatArray:
    """Best Lagrangian bound over the weight grid (weights 0 and 1 give ``T_B`` and ``T_A``)."""
    lb = np.maximum(ta, tb)
    for weight, table in tables:
        lb = np.maximum(lb, weight * ta + (1.0 - weight) * tb + table[k][a])
    return lb
