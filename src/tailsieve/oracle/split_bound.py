"""Lower bounds for the exact DP (``pareto_dp.py``).

``LagrangianBound``: the cheap Lagrangian bound (see below).
``CountSplitBound``: a stronger bound that conditions on how many remaining requests go to A.

For a state after ``k`` of ``n`` requests (sorted descending) with ``a`` on replica A and
``b = k - a`` on B, let ``x`` of the ``m = n - k`` remaining requests go to A. Then, for every
completion with that ``x``:

* ``T_A' >= T_A + H[a, x]`` where ``H[a, x] = sum_r s_r * (tau(a+r+1) - tau(a+r))`` over the
  ``x`` shortest remaining lengths ``s`` (descending): any ``x`` requests are, rank by rank, at
  least as long, and marginal costs are ``>= 0`` because ``tau`` is non-decreasing;
  likewise ``T_B' >= T_B + H[b, m - x]``;
* ``w T_A' + (1 - w) T_B' >= w T_A + (1 - w) T_B + G_w[k][a, x]`` with ``G_w`` the exact least
  ``w``-weighted added work given the counts and ``x`` (a backward DP).

The makespan of every completion is therefore at least ``min_x`` of the largest of these.

With the context term each request also adds its own ``c_i = k * (P_i L_i + L_i^2 / 2)`` to
the replica it joins (``ctx``, in the same sorted order): the exact backward DPs add it to both
choices, and ``H`` gains ``Cmin[k][x]``, the sum of the ``x`` smallest ``c`` among requests
``k..n-1`` (any ``x`` of them cost at least that much; the two sums are bounded separately).
Tables take ``O(n^3)`` memory per weight, so the solver uses this bound only for moderate ``n``.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


class CountSplitBound:
    """Precomputed tables for ``ls`` (sorted descending) and marginal costs ``marg``."""

    def __init__(
        self,
        ls: FloatArray,
        marg: FloatArray,
        weights: tuple[float, ...],
        ctx: FloatArray | None = None,
    ) -> None:
        self.n = int(ls.size)
        self.weights = weights
        c = np.zeros(self.n) if ctx is None else ctx
        self._h = _shortest_work(ls, marg)
        self._cmin = _smallest_sums(c) if np.any(c) else None
        self._g = [_split_work(ls, marg, w, c) for w in weights]

    def __call__(self, k: int, a: IntArray, ta: FloatArray, tb: FloatArray) -> FloatArray:
        """Lower bound on the final makespan of each state ``(a, ta, tb)`` after ``k``."""
        m = self.n - k
        if m == 0 or a.size == 0:
            return np.maximum(ta, tb)
        x = np.arange(m + 1)
        b = k - a
        ha = self._h[a[:, None], x[None, :]]
        hb = self._h[b[:, None], (m - x)[None, :]]
        if self._cmin is not None:
            cm = self._cmin[k]
            ha = ha + cm[x][None, :]
            hb = hb + cm[m - x][None, :]
        bound = np.maximum(ta[:, None] + ha, tb[:, None] + hb)
        for w, g in zip(self.weights, self._g, strict=True):
            bound = np.maximum(bound, (w * ta + (1.0 - w) * tb)[:, None] + g[k][a])
        result: FloatArray = bound.min(axis=1)
        return result


def _shortest_work(ls: FloatArray, marg: FloatArray) -> FloatArray:
    """``H[a, x]``: work of the ``x`` shortest requests on a replica already running ``a``."""
    n = ls.size
    h = np.full((n + 1, n + 1), np.inf)
    h[:, 0] = 0.0
    for x in range(1, n + 1):
        small = ls[n - x :]
        # sum_r small[r] * marg[a + r] for a = 0..n-x
        h[: n - x + 1, x] = np.correlate(marg, small, mode="valid")
    return h


def _smallest_sums(ctx: FloatArray) -> list[FloatArray]:
    """``Cmin[k][x]``: sum of the ``x`` smallest of ``ctx[k:]`` (``x = 0..n-k``)."""
    n = ctx.size
    return [np.concatenate(([0.0], np.cumsum(np.sort(ctx[k:])))) for k in range(n + 1)]


def _split_work(ls: FloatArray, marg: FloatArray, w: float, ctx: FloatArray) -> list[FloatArray]:
    """``G[k][a, x]``: least ``w``-weighted added work of requests ``k..n-1`` when ``a`` are on
    the ``w``-weighted replica, ``k - a`` on the other, and exactly ``x`` more go to the first."""
    n = ls.size
    out: list[FloatArray] = [np.zeros((0, 0))] * (n + 1)
    nxt = np.zeros((n + 1, 1))
    out[n] = nxt
    for k in range(n - 1, -1, -1):
        m = n - k
        a = np.arange(k + 1)[:, None]
        cur = np.full((k + 1, m + 1), np.inf)
        cur[:, 1:] = w * (ls[k] * marg[a] + ctx[k]) + nxt[1 : k + 2, :]
        cur[:, :m] = np.minimum(
            cur[:, :m], (1.0 - w) * (ls[k] * marg[k - a] + ctx[k]) + nxt[0 : k + 1, :]
        )
        out[k] = cur
        nxt = cur
    return out


class LagrangianBound:
    """The Lagrangian bound over a whole weight grid at once: the tables of every weight are
    stacked per ``k`` (shape ``(weights, k + 1)``), built by one backward recursion. Memory:
    ``len(weights) * n^2 / 2`` floats."""

    def __init__(
        self, ls: FloatArray, marg: FloatArray, weights: tuple[float, ...],
        ctx: FloatArray | None = None,
    ) -> None:
        n = ls.size
        c = np.zeros(n) if ctx is None else ctx
        w = np.asarray(weights, dtype=np.float64).reshape(-1, 1)
        self._w = w
        self._tables: list[FloatArray] = [np.zeros((w.size, 0))] * (n + 1)
        nxt = np.zeros((w.size, n + 1))
        self._tables[n] = nxt
        for k in range(n - 1, -1, -1):
            a = np.arange(k + 1)
            cur = np.minimum(
                w * (ls[k] * marg[a] + c[k]) + nxt[:, 1 : k + 2],
                (1.0 - w) * (ls[k] * marg[k - a] + c[k]) + nxt[:, : k + 1],
            )
            self._tables[k] = cur
            nxt = cur

    def __call__(self, k: int, a: IntArray, ta: FloatArray, tb: FloatArray) -> FloatArray:
        """Lower bound on the final makespan of each state ``(a, ta, tb)`` after ``k``."""
        lb = np.maximum(ta, tb)
        if self._w.size == 0 or a.size == 0:
            return lb
        vals = self._w * ta + (1.0 - self._w) * tb + self._tables[k][:, a]
        result: FloatArray = np.maximum(lb, vals.max(axis=0))
        return result
