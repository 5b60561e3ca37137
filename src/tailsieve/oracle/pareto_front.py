"""Pareto filter of DP states: per group (request count on replica A), the ``(T_A, T_B)``
pairs that no other pair of the group matches or beats in both coordinates."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def pareto_indices(a: IntArray, ta: FloatArray, tb: FloatArray) -> IntArray:
    """Indices of the Pareto-non-dominated ``(ta, tb)`` points within each group of ``a``.

    Points are ordered by ``(a, rank of ta)`` and kept when their ``tb`` rank is below every
    earlier one in their group (exact integer ranks; a later group is offset below all
    earlier ones). Ties in ``ta`` or ``tb`` get distinct ranks in arbitrary order, which can
    only keep a weakly dominated duplicate, never drop a non-dominated point."""
    n = a.size
    if n == 0:
        return np.zeros(0, dtype=np.int64)
    span = n + 1
    idx = np.arange(n, dtype=np.int64)
    rank_ta = np.empty(n, dtype=np.int64)
    rank_ta[np.argsort(ta)] = idx
    order = np.argsort(a * span + rank_ta)
    a_s = a[order]
    key = np.empty(n, dtype=np.int64)
    key[np.argsort(tb[order])] = idx
    key += (int(a_s[-1]) - a_s) * span
    run_min = np.minimum.accumulate(key)
    prev_min = np.empty_like(run_min)
    prev_min[0] = np.iinfo(np.int64).max
    prev_min[1:] = run_min[:-1]
    result: IntArray = order[key < prev_min]
    return result
