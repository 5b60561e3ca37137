"""Exact optimum for routing n requests onto 2 identical replicas (docs/design.md, "Execution model" to "Offline oracle").

Objective: minimise ``max(T_A, T_B)`` where each replica's all-admit time is
``T = sum_j L_j * (tau(j) - tau(j-1)) + sum_j c_j`` over its requests sorted longest-first, with
``c_j = k * (P_j * L_j + L_j^2 / 2)`` the context term's cost of request ``j`` (``k`` the
profile's ``context_s_per_token``, ``P_j`` its prompt tokens; 0 without the term).

Algorithm (longest-first Bellman DP):

* Requests are processed in descending length. Adding request ``k+1`` (length ``L``) to a
  replica already holding ``c`` requests adds exactly ``L * (tau(c+1) - tau(c)) + c_{k+1}``,
  because every earlier request is at least as long (the context cost is its own).
* A state after ``k`` requests is ``(a, T_A, T_B)`` with ``a`` requests on A and ``k - a`` on B.
  Future costs depend only on the counts, and the final makespan is non-decreasing in
  ``(T_A, T_B)``, so for each ``(k, a)`` only Pareto-non-dominated pairs are kept.
* Replica symmetry: a state is stored in the canonical frame ``a <= b`` (and ``T_A <= T_B``
  when ``a == b``); the frame swap is recorded for reconstruction.
* Incumbent pruning: the best of the top-k sweep and a longest-first greedy gives an upper
  bound ``U`` with a known assignment. A state is dropped when a valid lower bound on every
  completion of it is ``>= U`` -- it cannot beat the incumbent strictly, so the optimum is
  either ``U`` (incumbent returned) or still reachable.
  Lower bound (Lagrangian): for weights ``w`` in a grid,
  ``max(T_A, T_B, w T_A + (1-w) T_B + W_w(k, a))`` with ``W_w(k, a)`` the exact least
  ``w``-weighted work of the remaining requests given the counts (a backward DP, ``O(n^2)``
  per weight, all weights stacked). The grid is fine around 0.5 (``WEIGHT_OFFSETS``): with
  the context term the best weight of nearly every state lies within 1e-2 of 0.5, and a
  coarse grid there leaves orders of magnitude more states alive.
* For moderate n a stronger bound conditions on how many remaining requests go to A
  (``split_bound.py``); it is evaluated only on states that pass the cheap bound.
* Beam passes of the same DP run first; their best solution tightens the incumbent. The first
  keeps the states with the lowest bound; the next ones spread the beam evenly over
  ``T_A - T_B`` (partial sums the later requests can still balance). Only the incumbent's
  value and assignment are carried over.
* The last ``TAIL_REQUESTS`` requests are not layered: each state of the layer before them is
  joined exactly against the Pareto front of what the tail can add (``tail_join.py``).

Exact up to floating-point rounding of the sums (relative ~1e-15).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from tailsieve.errors import TailSieveError, TraceError
from tailsieve.model.replica_time import context_costs
from tailsieve.model.throughput import ThroughputModel
from tailsieve.oracle.pareto_front import pareto_indices
from tailsieve.oracle.split_bound import CountSplitBound, LagrangianBound
from tailsieve.oracle.tail_join import TailFront, join_front, tail_front
from tailsieve.oracle.topk import topk_sweep

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

# Lagrangian weights 0.5 +- offset, most useful first. With the context term nearly every
# state's bound peaks within 1e-2 of 0.5 (the cost of balancing the replicas is small next to
# the total), so a fine grid there prunes orders of magnitude more than a coarse one.
WEIGHT_OFFSETS: tuple[float, ...] = (3e-3, 3e-2, 0.2, 1e-3, 1e-2, 0.1, 3e-4, 0.05)
WEIGHT_TABLE_FLOATS = 32_000_000  # memory budget of the Lagrangian tables (256 MB)
SPLIT_WEIGHTS: tuple[float, ...] = (0.4, 0.5, 0.6)
BEAM_PHASES: tuple[float | None, ...] = (None, 0.5, 0.0, 0.75, 0.25, 0.625, 0.125, 0.875, 0.375)
BEAM_MAX_PASSES = len(BEAM_PHASES)
TAIL_REQUESTS = 16  # the exact pass joins the last this many requests (tail_join.py)
SPLIT_MIN_PRUNED = 0.1  # the split bound must prune this share of a layer to stay on ...
SPLIT_IDLE_LAYERS = 8  # ... else it is skipped for this many layers (skipping is always sound)


class OracleTimeoutError(TailSieveError, TimeoutError):
    """The exact solve did not finish within its time limit."""


@dataclass(frozen=True, slots=True)
class OptimalSplit:
    """The exact 2-replica optimum."""

    makespan_s: float  # max of the two replica times, seconds
    assignment: IntArray  # per request in input order: 0 = replica A, 1 = replica B
    replica_times_s: tuple[float, float]  # all-admit time of replica A and B, seconds
    retained_states: int  # states kept over all layers of all DP passes and tail fronts
    solve_s: float  # wall-clock solve time, seconds
    incumbent_makespan_s: float  # upper bound the exact pass started from (top-k/greedy/beam)
    incumbent_was_optimal: bool  # the exact pass found nothing strictly better


def lagrangian_weights(n: int) -> tuple[float, ...]:
    """0.5 and as many ``0.5 +- WEIGHT_OFFSETS`` pairs as the table budget allows for ``n``."""
    per_weight = max(1, (n + 1) * (n + 2) // 2)
    pairs = max(1, (WEIGHT_TABLE_FLOATS // per_weight - 1) // 2)
    offs = WEIGHT_OFFSETS[:pairs]
    return tuple(sorted({0.5, *(0.5 - d for d in offs), *(0.5 + d for d in offs)}))


def validate_lengths(lengths: npt.ArrayLike) -> FloatArray:
    """Lengths as a float array; raise ``TraceError`` naming the bad entry."""
    try:
        arr = np.asarray(lengths, dtype=np.float64).ravel()
    except (TypeError, ValueError):
        raise TraceError(f"lengths must be numbers, got {lengths!r:.80}") from None
    bad = np.flatnonzero(~np.isfinite(arr) | (arr < 0))
    if bad.size:
        i = int(bad[0])
        raise TraceError(f"request {i}: length must be a finite number >= 0, got {arr[i]!r}")
    return arr


def replica_time_s(sorted_desc: FloatArray, marg: FloatArray) -> float:
    """All-admit time of one replica from its lengths sorted descending (no context term)."""
    return float(np.dot(sorted_desc, marg[: sorted_desc.size]))


def _two_replica_times(
    lengths: FloatArray, assign: IntArray, marg: FloatArray, ctx: FloatArray
) -> tuple[float, float]:
    out = []
    for r in (0, 1):
        on = assign == r
        part = np.sort(lengths[on])[::-1]
        out.append(replica_time_s(part, marg) + float(ctx[on].sum()))
    return out[0], out[1]


def _greedy_assignment(ls: FloatArray, marg: FloatArray, ctx: FloatArray) -> IntArray:
    """Longest-first: each request to the replica whose resulting max time is smaller."""
    t = [0.0, 0.0]
    c = [0, 0]
    out = np.zeros(ls.size, dtype=np.int64)
    for i, (length, own) in enumerate(zip(ls.tolist(), ctx.tolist(), strict=True)):
        na = (t[0] + length * marg[c[0]] + own, t[1])
        nb = (t[0], t[1] + length * marg[c[1]] + own)
        r = 0 if (max(na), na[0]) <= (max(nb), nb[1]) else 1
        t[r] += length * marg[c[r]] + own
        c[r] += 1
        out[i] = r
    return out


def solve_two_replicas(
    lengths: npt.ArrayLike,
    model: ThroughputModel,
    beam_width: int = 256,
    weights: tuple[float, ...] | None = None,
    time_limit_s: float | None = None,
    split_bound_max_n: int = 600,
    prompt_tokens: npt.ArrayLike | None = None,
    tail_requests: int = TAIL_REQUESTS,
    beam_tail: int = TAIL_REQUESTS,
) -> OptimalSplit:
    """Exact min-makespan split of ``lengths`` (tokens) onto 2 identical replicas; with the
    profile's context term, ``prompt_tokens`` (per request, optional) count as context.

    ``beam_width`` sizes the heuristic passes that seed the incumbent (0 disables them);
    ``weights`` are the Lagrangian weights of the lower bound (any values in [0, 1] are
    valid; default ``lagrangian_weights(n)``, a fine grid around 0.5 within a 256 MB table
    budget); the exact pass joins the last ``tail_requests`` requests exactly, the beam
    passes the last ``beam_tail``. All of these affect speed only, never the result. With ``time_limit_s`` the solve raises
    ``OracleTimeoutError`` once that much wall time has passed (checked per layer). Up to
    ``split_bound_max_n`` requests the stronger count-split bound (``split_bound.py``) also
    prunes; its tables take ``n^3 / 2`` floats (about 110 MB at n = 300, 860 MB at 600)."""
    t0 = time.perf_counter()
    deadline = None if time_limit_s is None else t0 + time_limit_s
    arr = validate_lengths(lengths)
    n = arr.size
    if n == 0:
        return OptimalSplit(
            0.0, np.zeros(0, dtype=np.int64), (0.0, 0.0), 0, time.perf_counter() - t0, 0.0, True
        )
    ptoks = None
    if prompt_tokens is not None:
        ptoks = validate_lengths(prompt_tokens)
        if ptoks.size != n:
            raise TraceError(f"{ptoks.size} prompt lengths for {n} requests")
    order = np.argsort(-arr, kind="stable")
    ls = arr[order]
    ctx_in = context_costs(arr, model, ptoks)  # per request, input order
    ctx = ctx_in[order]
    marg = np.diff(model.taus(n))  # marg[c] = tau(c+1) - tau(c), c = 0..n-1
    if weights is None:
        weights = lagrangian_weights(n)
    tables = LagrangianBound(ls, marg, weights, ctx)
    split = CountSplitBound(ls, marg, SPLIT_WEIGHTS, ctx) if n <= split_bound_max_n else None

    # Incumbent: best top-k split or the greedy split (sorted order).
    sweep = topk_sweep(ls, model, None if ptoks is None else ptoks[order])
    topk_assign = (np.arange(n) >= sweep.best_k).astype(np.int64)  # tail = 0 (k longest)
    greedy_assign = _greedy_assignment(ls, marg, ctx)
    cands = [topk_assign, greedy_assign]
    cand_ms = [max(_two_replica_times(ls, a, marg, ctx)) for a in cands]
    best_c = int(np.argmin(cand_ms))
    incumbent = float(cand_ms[best_c])
    inc_assign = cands[best_c]

    # Narrow beam passes of the same DP usually end close to the optimum; as incumbent that
    # lets the exact pass prune almost everything that cannot reach it. The first keeps the
    # lowest bounds; the next ones prune with the best value so far and spread the beam
    # over T_A - T_B on a shifted grid, until two passes in a row bring nothing.
    beam_states = 0
    stale = 0
    for p in range(BEAM_MAX_PASSES if beam_width > 0 else 0):
        beam_ms, beam_assign, states = _layered_dp(
            ls, marg, ctx, tables, split, incumbent, beam_width, deadline, BEAM_PHASES[p],
            tail=min(beam_tail, n - 1),
        )
        beam_states += states
        if beam_assign is not None and beam_ms < incumbent:
            incumbent, inc_assign, stale = beam_ms, beam_assign, 0
        else:
            stale += 1
            if stale >= 2:
                break
    best_ms, dp_assign, exact_states = _layered_dp(
        ls, marg, ctx, tables, split, incumbent, None, deadline, tail=min(tail_requests, n - 1)
    )
    if dp_assign is not None and best_ms < incumbent:
        sorted_assign, from_incumbent = dp_assign, False
    else:
        sorted_assign, from_incumbent = inc_assign, True
    if sorted_assign[0] == 1:  # present the longest request on replica A
        sorted_assign = 1 - sorted_assign
    assign = np.empty(n, dtype=np.int64)
    assign[order] = sorted_assign
    times = _two_replica_times(arr, assign, marg, ctx_in)
    return OptimalSplit(
        makespan_s=max(times),
        assignment=assign,
        replica_times_s=times,
        retained_states=exact_states + beam_states,
        solve_s=time.perf_counter() - t0,
        incumbent_makespan_s=incumbent,
        incumbent_was_optimal=from_incumbent,
    )


def _layered_dp(
    ls: FloatArray,
    marg: FloatArray,
    ctx: FloatArray,
    tables: LagrangianBound,
    split: CountSplitBound | None,
    incumbent: float,
    beam_width: int | None,
    deadline: float | None,
    phase: float | None = None,
    tail: int = 0,
) -> tuple[float, IntArray | None, int]:
    """Run the longest-first DP; return (best makespan < incumbent or inf, its assignment in
    sorted order or None, states retained). With ``beam_width`` only that many states survive
    each layer (a heuristic, so the result is an upper bound): those with the lowest lower
    bound, or with ``phase`` in [0, 1) states spread evenly over ``T_A - T_B`` (the grid
    offset by ``phase``). Spreading keeps partial sums that later requests can still balance;
    lower bounds are nearly all equal when the context term dominates. With ``tail`` > 0 the
    last ``tail`` requests are not layered but joined exactly (``tail_join.py``)."""
    n = ls.size
    head = n - tail
    a = np.zeros(1, dtype=np.int64)  # root: k=0, a=0, T_A=T_B=0
    ta = np.zeros(1)
    tb = np.zeros(1)
    parents: list[IntArray] = []
    moves: list[npt.NDArray[np.bool_]] = []  # True: request went to B in the parent's frame
    swaps: list[npt.NDArray[np.bool_]] = []  # True: child frame swapped vs parent frame
    retained = 0
    split_idle_until = 0
    for k in range(head):
        if deadline is not None and time.perf_counter() > deadline:
            raise OracleTimeoutError(f"exact 2-replica solve of {n} requests ran out of time")
        length, own = ls[k], ctx[k]
        size = a.size
        ca = np.concatenate((a + 1, a))  # first half: to A; second half: to B
        cta = np.concatenate((ta + length * marg[a] + own, ta))
        ctb = np.concatenate((tb, tb + length * marg[k - a] + own))
        par = np.concatenate((np.arange(size), np.arange(size)))
        mv = np.concatenate((np.zeros(size, dtype=bool), np.ones(size, dtype=bool)))
        cb = (k + 1) - ca
        sw = (ca > cb) | ((ca == cb) & (cta > ctb))  # canonical frame: a <= b
        ca = np.where(sw, cb, ca)
        cta, ctb = np.where(sw, ctb, cta), np.where(sw, cta, ctb)
        lb = tables(k + 1, ca, cta, ctb)
        keep = np.flatnonzero(lb < incumbent)
        if keep.size:
            keep = keep[pareto_indices(ca[keep], cta[keep], ctb[keep])]
            # the split bound is monotone in (T_A, T_B), so applying it after the Pareto
            # filter removes the same states; skipped for a while when it stops paying off
            if split is not None and k >= split_idle_until:
                before = keep.size
                keep = keep[split(k + 1, ca[keep], cta[keep], ctb[keep]) < incumbent]
                if before - keep.size < SPLIT_MIN_PRUNED * before:
                    split_idle_until = k + SPLIT_IDLE_LAYERS
            if beam_width is not None and keep.size > beam_width:
                if phase is None:
                    keep = keep[np.argpartition(lb[keep], beam_width - 1)[:beam_width]]
                else:
                    keep = _stratified(keep, cta[keep] - ctb[keep], beam_width, phase)
        a, ta, tb = ca[keep], cta[keep], ctb[keep]
        parents.append(par[keep])
        moves.append(mv[keep])
        swaps.append(sw[keep])
        retained += int(keep.size)
        if keep.size == 0:
            return float("inf"), None, retained
    if tail == 0:
        final = np.maximum(ta, tb)
        best = int(np.argmin(final))
        return float(final[best]), _backtrack(best, parents, moves, swaps)[0], retained
    vals = np.full(a.size, np.inf)
    points = np.full(a.size, -1, dtype=np.int64)
    fronts: dict[int, TailFront] = {}
    for count in np.unique(a).tolist():
        rows = np.flatnonzero(a == count)
        front = tail_front(
            ls[head:], ctx[head:], marg, count, head - count,
            incumbent - float(ta[rows].min()), incumbent - float(tb[rows].min()),
            (ta[rows], tb[rows], incumbent),
        )
        retained += front.num_states
        fronts[count] = front
        vals[rows], points[rows] = join_front(ta[rows], tb[rows], front)
    best = int(np.argmin(vals))
    if not vals[best] < incumbent:
        return float("inf"), None, retained
    head_assign, flipped = _backtrack(best, parents, moves, swaps)
    bits = int(fronts[int(a[best])].to_b_bits[points[best]])
    tail_assign = (bits >> np.arange(tail)) & 1
    if flipped:
        tail_assign = 1 - tail_assign
    return float(vals[best]), np.concatenate((head_assign, tail_assign)), retained


def _stratified(keep: IntArray, diff: FloatArray, width: int, phase: float) -> IntArray:
    """``width`` of ``keep`` at evenly spaced ranks of ``diff`` (``phase`` shifts the grid)."""
    order = np.argsort(diff, kind="stable")
    step = keep.size / width
    picks = np.minimum((phase + np.arange(width)) * step, keep.size - 1).astype(np.int64)
    return keep[order[picks]]


def _backtrack(
    index: int,
    parents: list[IntArray],
    moves: list[npt.NDArray[np.bool_]],
    swaps: list[npt.NDArray[np.bool_]],
) -> tuple[IntArray, bool]:
    """Assignment (sorted order, in the root frame) of a state of the last layer, and whether
    that state's frame is swapped relative to the root."""
    n = len(parents)
    move = np.zeros(n, dtype=bool)
    swap = np.zeros(n, dtype=bool)
    i = index
    for k in range(n - 1, -1, -1):
        move[k] = moves[k][i]
        swap[k] = swaps[k][i]
        i = int(parents[k][i])
    # frame of the parent of request k relative to the root = xor of swaps of layers < k
    frame = np.concatenate(([False], np.logical_xor.accumulate(swap)[:-1]))
    flipped = bool(np.logical_xor.reduce(swap)) if n else False
    return np.logical_xor(move, frame).astype(np.int64), flipped
