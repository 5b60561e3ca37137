"""Exact completion of the last ``M`` requests for the exact DP (``pareto_dp.py``).

Once the forward DP has placed all but the last ``M`` requests, the best completion of a state
``(a, T_A, T_B)`` depends on ``a`` (the counts) and on the offsets ``T_A``, ``T_B`` only
through ``min over (X, Y) of max(T_A + X, T_B + Y)``, where ``(X, Y)`` ranges over what the
``2^M`` assignments of the tail add to each replica. Only the Pareto front of those ``(X, Y)``
matters, and on a front sorted by ``X`` (``Y`` falling) ``max(T_A + X, T_B + Y)`` falls and
then rises, with the turn where ``X - Y`` crosses ``T_B - T_A``: a binary search finds it.
Joining every state of the layer against the front of its count gives each state's exact
optimum, so the forward DP stops ``M`` layers early; the tail front is built once per count.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailsieve.oracle.pareto_front import pareto_indices

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True, slots=True)
class TailFront:
    """Pareto front of what the tail adds to (A, B), ``X`` strictly rising, ``Y`` falling."""

    x_s: FloatArray  # time added to replica A, seconds
    y_s: FloatArray  # time added to replica B, seconds
    to_b_bits: IntArray  # bit j set: tail request j goes to B
    num_states: int  # DP states built for this front


def tail_front(
    ls_tail: FloatArray,
    ctx_tail: FloatArray,
    marg: FloatArray,
    count_a: int,
    count_b: int,
    cap_x_s: float,
    cap_y_s: float,
    join_states: tuple[FloatArray, FloatArray, float] | None = None,
) -> TailFront:
    """Front over all assignments of the tail (lengths sorted descending, each shorter than
    every placed request) to replicas already running ``count_a`` and ``count_b`` requests.

    Partial assignments adding ``>= cap_x_s`` to A or ``>= cap_y_s`` to B are dropped (added
    time only grows, so they cannot complete below the caps); the front may then be empty.
    With ``join_states = (ta, tb, cap)``, the offsets of the states it will be joined with, a
    partial assignment is also dropped when no single state has both ``ta + X < cap`` and
    ``tb + Y < cap``: the front then serves exactly every state whose best is below ``cap``."""
    compatible = None if join_states is None else _compatibility(*join_states)
    x = np.zeros(1)
    y = np.zeros(1)
    ca = np.full(1, count_a, dtype=np.int64)
    bits = np.zeros(1, dtype=np.int64)
    states = 1
    placed = count_a + count_b
    for j in range(ls_tail.size):
        length, own = ls_tail[j], ctx_tail[j]
        cb = placed + j - ca
        nx = np.concatenate((x + length * marg[ca] + own, x))
        ny = np.concatenate((y, y + length * marg[cb] + own))
        nca = np.concatenate((ca + 1, ca))
        nbits = np.concatenate((bits, bits | (1 << j)))
        ok = (nx < cap_x_s) & (ny < cap_y_s)
        if compatible is not None:
            ok &= compatible(nx, ny)
        keep = np.flatnonzero(ok)
        if keep.size > 1:
            keep = keep[pareto_indices(nca[keep], nx[keep], ny[keep])]
        x, y, ca, bits = nx[keep], ny[keep], nca[keep], nbits[keep]
        states += int(keep.size)
        if keep.size == 0:
            break
    order = np.lexsort((y, x))
    x, y, bits = x[order], y[order], bits[order]
    if y.size:
        prev_min = np.concatenate(([np.inf], np.minimum.accumulate(y)[:-1]))
        front = y < prev_min
        x, y, bits = x[front], y[front], bits[front]
    return TailFront(x, y, bits, states)


def _compatibility(
    ta: FloatArray, tb: FloatArray, cap: float
) -> Callable[[FloatArray, FloatArray], npt.NDArray[np.bool_]]:
    """Test of added ``(X, Y)``: some state has ``ta + X < cap`` and ``tb + Y < cap``.

    On the states' strict Pareto front (``ta`` rising, ``tb`` falling) the first condition
    holds on a prefix and the second on a suffix; they meet when the prefix reaches past the
    suffix's start. Dropping dominated states changes nothing: their dominator passes too."""
    order = np.lexsort((tb, ta))
    ta_s, tb_s = ta[order], tb[order]
    prev_min = np.concatenate(([np.inf], np.minimum.accumulate(tb_s)[:-1]))
    front = tb_s < prev_min
    ta_f, neg_tb_f = ta_s[front], -tb_s[front]  # both strictly rising

    def test(x: FloatArray, y: FloatArray) -> npt.NDArray[np.bool_]:
        prefix_end = np.searchsorted(ta_f, cap - x, side="left")  # ta < cap - x
        suffix_start = np.searchsorted(neg_tb_f, y - cap, side="right")  # tb < cap - y
        result: npt.NDArray[np.bool_] = suffix_start < prefix_end
        return result

    return test


def join_front(ta: FloatArray, tb: FloatArray, front: TailFront) -> tuple[FloatArray, IntArray]:
    """Per state, the least ``max(T_A + X, T_B + Y)`` over the front and the point reaching
    it (``inf`` and ``-1`` when the front is empty)."""
    size = front.x_s.size
    if size == 0:
        return np.full(ta.size, np.inf), np.full(ta.size, -1, dtype=np.int64)
    turn = np.searchsorted(front.x_s - front.y_s, tb - ta)
    # the crossing and its neighbours: rounding of X - Y can move the turn by one point
    cand = np.clip(turn[:, None] + np.arange(-1, 2)[None, :], 0, size - 1)
    vals = np.maximum(ta[:, None] + front.x_s[cand], tb[:, None] + front.y_s[cand])
    best = np.argmin(vals, axis=1)
    rows = np.arange(ta.size)
    return vals[rows, best], cand[rows, best]

