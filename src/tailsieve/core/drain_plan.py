"""LPT moves in the drain (pure, no I/O): the decision ``core.drain`` describes.

Moves are ``core.balancer.Move`` s, made exactly as the balancer's are (the simulator's
``sim.movepath``, the live rebalancer), so exactly-once delivery rests on the same path.
"""

from __future__ import annotations

import bisect
import heapq
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from itertools import accumulate, chain, islice

import numpy as np

from tailsieve.core.balancer import BalanceSettings, Move
from tailsieve.core.drain import RemainingModel
from tailsieve.core.replica_load import ReplicaLoad
from tailsieve.core.running_index import Entry

__all__ = ["DrainPrompts", "Remaining", "drain_decisions", "iter_drain"]

Remaining = Callable[[Sequence[tuple[Hashable, int]]], "Sequence[float] | np.ndarray"]
"""``running (key, context) pairs -> each one's expected remaining tokens``."""


def drain_decisions(
    loads: Sequence[ReplicaLoad], settings: BalanceSettings,
    prompt_tokens: Callable[[Hashable], int],
    cached: Callable[[Hashable, int], int] | None = None,
    model: RemainingModel | None = None,
) -> Iterator[list[Move]]:
    """A check's moves once the drain has begun (``DrainSettings.drains``; the caller asks
    for these instead of ``core.balance_check.plan_check``'s), in decisions of at most
    ``settings.max_moves_per_decision`` moves under the same contract as ``plan_check``'s
    (every one full but the last; the loads unchanged between two): ``iter_drain``'s moves,
    each running response's expected remaining tokens read from its context less
    ``prompt_tokens(key)`` over ``settings.drain``'s length sample (``model``: built from it
    once, by a caller that checks often)."""
    assert settings.drain is not None
    if model is None:
        model = settings.drain.remaining_model()

    def remaining(running: Sequence[tuple[Hashable, int]]) -> np.ndarray:
        return model.expected_many(np.fromiter(
            (x - prompt_tokens(key) for key, x in running), float, len(running)))

    per = max(1, settings.max_moves_per_decision)
    moves = iter_drain(loads, remaining, settings.seam_s, cached)
    left = settings.max_moves_per_check
    while left > 0:
        decision = list(islice(moves, min(per, left)))
        left -= len(decision)
        yield decision
        if len(decision) < per:
            return


class DrainPrompts(dict[Hashable, int]):
    """The prompt tokens of running responses (``drain_decisions``' ``prompt_tokens``), read
    from ``entries`` (a ``RunningIndex``'s). A live drain check lists them ahead
    (``list_slices``), so that its first decision, the hot path, reads each by a plain lookup."""

    def __init__(self, entries: Mapping[Hashable, Entry]) -> None:
        super().__init__()
        self._entries = entries

    def __missing__(self, key: Hashable) -> int:
        e = self._entries.get(key)
        return e.prompt_tokens if e is not None else 0

    def list_slices(self, loads: Sequence[ReplicaLoad], per_slice: int) -> Iterator[None]:
        """List the running responses of ``loads``, ``per_slice`` replicas at a time: one
        ``yield`` per slice (the caller lets its event loop run between them)."""
        entries = self._entries
        for i in range(0, len(loads), per_slice):
            for ld in loads[i:i + per_slice]:
                if ld.num_running:
                    for key, _ in ld.running():
                        e = entries.get(key)
                        self[key] = e.prompt_tokens if e is not None else 0
            yield


def iter_drain(
    loads: Sequence[ReplicaLoad], remaining: Remaining, seam_s: float,
    cached: Callable[[Hashable, int], int] | None = None, num_destinations: int = 3,
) -> Iterator[Move]:
    """LPT moves in the drain: while the replica of the longest expected finish time
    (``_finish_times``; ``remaining(running)``: each running ``(key, context)``'s expected
    remaining tokens, asked once for every replica's together) can hand one of its
    responses to one of the ``num_destinations`` replicas of its pool expected to finish
    first, so that both expect to finish sooner than it does now by more than the move costs
    (prefill of the uncached prefix + seam), make the best such move. A response moves at
    most once per call; a replica that does not accept moves receives none. Every replica's
    finish time is computed at once (vectorised); a replica's planner
    sums (``_Finish``) are built only once it is the top or a destination, and a response
    whose move cannot gain the seam, or more than the best move found, is not priced; each
    move then costs O(b + D log b) for ``b`` responses on the top replica."""
    runs = [ld.running() if ld.num_running else [] for ld in loads]
    flat = list(chain.from_iterable(runs))
    rem = np.asarray(remaining(flat) if flat else [], dtype=float)
    ctx = np.asarray([x for _, x in flat], dtype=float)
    times = _finish_times(loads, [len(run) for run in runs], ctx, rem)
    starts = list(accumulate((len(run) for run in runs), initial=0))
    reps: list[_Finish | None] = [None] * len(loads)

    def rep(r: int) -> _Finish:
        f = reps[r]
        if f is None:
            lo, hi = starts[r], starts[r + 1]
            f = reps[r] = _Finish(loads[r], list(zip(
                (k for k, _ in runs[r]), ctx[lo:hi].tolist(), rem[lo:hi].tolist(),
                strict=True)), times[r])
        return f

    moved: set[Hashable] = set()
    while True:
        top = max(range(len(loads)), key=times.__getitem__)
        t_top = times[top]
        if t_top <= 0:
            break
        dests = heapq.nsmallest(num_destinations, (
            d for d in range(len(loads)) if d != top and loads[d].accepts
            and loads[d].pool == loads[top].pool), key=times.__getitem__)
        best: tuple[float, int, int, float, int] | None = None  # gain, j, dst, new dst, uncached
        f_top = rep(top)
        for j, (key, x, r_) in enumerate(f_top.items):
            if key in moved:
                continue
            t_rest = f_top.without(x, r_)
            if t_top - t_rest <= seam_s or (best is not None and t_top - t_rest <= best[0]):
                continue  # no move of it gains more than the seam, nor more than the best
            for d in dests:
                ld = loads[d]
                hit = 0 if cached is None else min(int(x), cached(key, ld.replica))
                uncached = int(x) - hit
                price = seam_s + ld.prefill_s + ld.prefill_s_per_token * uncached
                t_d = rep(d).with_(x, r_) + price
                gain = t_top - max(t_rest, t_d)
                if gain > price and (best is None or gain > best[0]):
                    best = (gain, j, d, t_d, uncached)
        if best is None:
            break
        gain, j, d, _, uncached = best
        item = f_top.items.pop(j)
        times[top] = f_top.update()
        f_d = rep(d)
        f_d.items.append(item)
        times[d] = f_d.update()
        moved.add(item[0])
        yield Move(item[0], loads[top].replica, loads[d].replica, int(item[1]), uncached, gain)


def _finish_times(loads: Sequence[ReplicaLoad], sizes: Sequence[int], ctx: np.ndarray,
                  rem: np.ndarray) -> list[float]:
    """Every replica's expected finish time: seconds until the last of its responses
    (context ``x_i``, remaining ``r_i`` tokens) finishes when all run together, ``sum_j r_(j)
    (tau(j) - tau(j-1))`` over the remaining lengths in descending order plus the context term
    ``k sum_i (x_i r_i + r_i^2 / 2)``. ``sizes[r]`` consecutive entries of ``ctx`` / ``rem``
    (context, expected remaining tokens) are replica ``r``'s. The same sums
    in the same order as ``_Finish.update`` (so the same floats): ranked by remaining tokens,
    descending, within each replica; each rank's weight read from a table of ``tau`` per
    distinct cost model."""
    num = len(loads)
    if not len(rem):
        return [0.0] * num
    rep = np.repeat(np.arange(num), sizes)
    order = np.lexsort((-rem, rep))
    first = np.repeat(np.asarray(list(accumulate(sizes, initial=0))[:-1]), sizes)
    rank = np.arange(len(rem)) - first  # 0-based rank within its replica (rep is sorted)
    most: dict[int, tuple[Callable[[int], float], int]] = {}  # id(tau) -> (tau, largest b)
    for ld, b in zip(loads, sizes, strict=True):
        most[id(ld.tau)] = (ld.tau, max(b, most.get(id(ld.tau), (ld.tau, 0))[1]))
    dts, at, start = [], {}, 0
    for key, (tau, b) in most.items():
        dts.append(np.diff(np.asarray([0.0] + [tau(j) for j in range(1, b + 1)])))
        at[key] = start
        start += b
    offset = np.repeat(np.asarray([at[id(ld.tau)] for ld in loads]), sizes)
    w = np.concatenate(dts)[offset + rank]
    r_sorted = rem[order]
    decode = np.bincount(rep, weights=r_sorted * w, minlength=num)
    k = np.asarray([ld.context_s_per_token for ld in loads])
    hold = k * np.bincount(rep, weights=ctx * rem + rem * rem / 2.0, minlength=num)
    return (decode + hold).tolist()


class _Finish:
    """One replica's responses ``(key, context, expected remaining)`` and its expected finish
    time (as ``_finish_times``), with that time without one of them or with one more in O(1) /
    O(log b) from prefix sums over the remaining tokens in descending order: rank ``i``
    (0-based) weighs ``dt[i + 1] = tau(i + 1) - tau(i)``, so removing rank ``p`` shifts the
    ranks below it up one weight and inserting at rank ``q`` shifts them down one."""

    __slots__ = ("_ready", "ctx", "dt", "items", "k", "neg", "pre", "suf_dn", "suf_up", "tau",
                 "time_s")

    def __init__(self, ld: ReplicaLoad, items: list[tuple[Hashable, float, float]],
                 time_s: float | None = None) -> None:
        self.tau, self.k, self.items = ld.tau, ld.context_s_per_token, items
        self.update(time_s)

    def update(self, time_s: float | None = None) -> float:
        """The finish time of ``items`` (``time_s``: already known, as ``_finish_times``
        computes it), returned; the sums ``without`` / ``with_`` read are made when asked."""
        self.ctx = self.k * sum(x * r + r * r / 2.0 for _, x, r in self.items)
        if time_s is None:
            tau = self.tau
            t, prev = 0.0, 0.0
            for j, r in enumerate(sorted((r for _, _, r in self.items), reverse=True), 1):
                tj = tau(j)
                t += r * (tj - prev)
                prev = tj
            time_s = t + self.ctx
        self.time_s = time_s
        self._ready = False
        return self.time_s

    def _sums(self) -> None:
        rs = sorted((r for _, _, r in self.items), reverse=True)
        b = len(rs)
        taus = [0.0] + [self.tau(j) for j in range(1, b + 3)]
        dt = self.dt = [0.0] + [taus[j] - taus[j - 1] for j in range(1, b + 3)]
        self.neg = [-r for r in rs]  # ascending, for bisection
        pre = self.pre = [0.0] * (b + 1)  # pre[p] = sum_{i<p} rs_i dt[i+1]
        for i, r in enumerate(rs):
            pre[i + 1] = pre[i] + r * dt[i + 1]
        up = self.suf_up = [0.0] * (b + 2)  # up[q] = sum_{i>=q} rs_i dt[i]
        dn = self.suf_dn = [0.0] * (b + 1)  # dn[q] = sum_{i>=q} rs_i dt[i+2]
        for i in range(b - 1, -1, -1):
            up[i] = up[i + 1] + rs[i] * dt[i]
            dn[i] = dn[i + 1] + rs[i] * dt[i + 2]
        self._ready = True

    def without(self, x: float, r: float) -> float:
        """The finish time without one response of context ``x`` and remaining ``r``."""
        if not self._ready:
            self._sums()
        p = bisect.bisect_left(self.neg, -r)  # a rank holding r (equal ones are alike)
        return self.pre[p] + self.suf_up[p + 1] + self.ctx - self.k * (x * r + r * r / 2.0)

    def with_(self, x: float, r: float) -> float:
        """The finish time with one more response of context ``x`` and remaining ``r``."""
        if not self._ready:
            self._sums()
        q = bisect.bisect_right(self.neg, -r)
        return (self.pre[q] + r * self.dt[q + 1] + self.suf_dn[q] + self.ctx
                + self.k * (x * r + r * r / 2.0))
