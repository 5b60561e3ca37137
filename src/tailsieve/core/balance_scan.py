"""The balancer's destination scan: groups of destinations by base, the plateau, candidates.

Helpers of ``core.balancer.plan_moves`` (pure, no I/O). Destinations that share a pool and
a cost model (context, prefill and per-token prefill rates) form a group kept sorted by
``base`` (``tau(b + 1) + k C``, the destination's cost with one more response); a move
changes the base of two replicas only, so the groups are updated, not rebuilt. Beside them:
a destination's filter value (``dest_bound``) and where, and how much, the top's responses
have cached (``HitsOn``, ``most_cached``).
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Hashable, Mapping, Sequence
from operator import itemgetter

from tailsieve.core.replica_load import ReplicaLoad

__all__ = ["Best", "Groups", "HitsOn", "best_for", "dest_bound", "most_cached", "no_hits",
           "plateau_len"]

Best = tuple[float, int, int, int]  # (net gain, index in the top's sorted list, dst, uncached)
_CONTEXT = itemgetter(1)


class Groups:
    """The accepting replicas, grouped by (pool, cost model), each group sorted by base."""

    def __init__(self, loads: Sequence[ReplicaLoad], b: list[int], ctx: list[float],
                 taus: list[Callable[[int], float]], ks: list[float]) -> None:
        accepts = [ld.accepts for ld in loads]
        self.base = [t(n + 1) + k * c if ok else 0.0
                     for t, n, k, c, ok in zip(taus, b, ks, ctx, accepts, strict=True)]
        keys = [(ld.pool, ld.context_s_per_token, ld.prefill_s, ld.prefill_s_per_token)
                for ld in loads]
        groups: dict[tuple[int, float, float, float], list[tuple[float, int]]] = {}
        self.of: list[list[tuple[float, int]] | None] = [None] * len(loads)
        if keys.count(keys[0]) == len(keys):  # one cost model and pool: one group
            one = groups[keys[0]] = [(self.base[d], d) for d, ok in enumerate(accepts) if ok]
            self.of = [one if ok else None for ok in accepts]
        else:
            for d, ld in enumerate(loads):
                if ld.accepts:
                    grp = self.of[d] = groups.setdefault(keys[d], [])
                    grp.append((self.base[d], d))
        self.by_pool: dict[int, list[list[tuple[float, int]]]] = {}
        for (pool, *_), grp in groups.items():
            grp.sort()
            self.by_pool.setdefault(pool, []).append(grp)

    def update(self, d: int, base: float) -> None:
        """Replica ``d``'s base is now ``base`` (nothing for a replica that does not accept)."""
        grp = self.of[d]
        if grp is None:
            return
        old = (self.base[d], d)
        i = bisect.bisect_left(grp, old)
        if i < len(grp) and grp[i] == old:
            del grp[i]
        else:
            grp.remove(old)
        self.base[d] = base
        bisect.insort(grp, (base, d))


def plateau_len(
    grp: list[tuple[float, int]], cands: list[tuple[Hashable, int]], a: float, c_top: float,
    k_top: float, ld: ReplicaLoad, horizon_s: float, seam_s: float,
) -> int:
    """How many of a group's destinations (sorted by base) lead it such that each passes
    the filter and both its candidates (the smallest and the largest context: ``x*`` lies
    beyond every context) leave the top's side the costlier. Moving either to any of them
    gives the same new top cost, so without a cached prefix their gains are equal and the
    lowest-numbered one wins: only it and those with a cached prefix need evaluating. Every
    condition holds for a prefix of the group (monotone in base, no rate negative)."""
    k_d = ld.context_s_per_token
    ksum = k_top + k_d
    if not ksum > 0:
        return 0
    xn = cands[-1][1]
    srcn = a - k_top * xn  # the top without its largest (so without x0: at least this)

    def fails(e: tuple[float, int]) -> bool:
        bd = e[0]
        if bd >= c_top or not (a - bd) / ksum > xn or bd + k_d * xn > srcn:
            return True
        ideal = max(bd, (a * k_d + bd * k_top) / ksum)
        return not horizon_s * (c_top - ideal) / c_top - seam_s - ld.prefill_s > 0

    return bisect.bisect_left(grp, True, key=fails)


def best_for(
    best: Best | None, cands: list[tuple[Hashable, int]], a: float | None, base: float,
    c_top: float, k_top: float, ld: ReplicaLoad, d: int, horizon_s: float, seam_s: float,
    cached: Callable[[Hashable, int], int] | None,
    hit_on: Callable[[Hashable], Mapping[int, int]] | None, scale: float | None,
) -> tuple[Best | None, float]:
    """The better of ``best`` and the best move of one of the top's responses (``cands``,
    sorted by context) to ``d``: only the smallest context and the two around ``x*`` can be
    best. Ties go as in a scan of destinations by number (the first on equal gains), then
    candidates in the original order. ``hit_on(key)``: the destinations where ``cached`` may
    be above 0 (None: anywhere). ``scale`` (None: no pruning) sizes the rounding slack below
    ``best`` under which a candidate, even fully cached, is not asked about. Also returns
    the best gain of ``d``'s candidates were nothing cached (-inf: no response can move)."""
    k_d = ld.context_s_per_token
    if a is None or k_top + k_d <= 0:
        star = len(cands)
    else:
        star = bisect.bisect_left(cands, (a - base) / (k_top + k_d), key=_CONTEXT)
    floor = -float("inf") if best is None or scale is None else (
        best[0] - 1e-9 * (scale + abs(best[0]) + abs(ld.prefill_s)))
    mine: Best | None = None
    plain = -float("inf")
    for j in {0, star - 1, min(star, len(cands) - 1)}:
        if j < 0:
            continue
        key, x = cands[j]
        c_src = a - k_top * x if a is not None else 0.0
        new = max(c_src, base + k_d * x)
        if new >= c_top:
            continue
        gain = horizon_s * (c_top - new) / c_top
        net = gain - (ld.prefill_s + ld.prefill_s_per_token * x + seam_s)  # nothing cached
        if net > plain:
            plain = net
        if cached is not None and (hit_on is None or d in hit_on(key)):
            if gain - (ld.prefill_s + seam_s) < floor:
                continue  # could not reach ``best`` even fully cached
            hit = min(cached(key, ld.replica), x)
            uncached = x - hit
            net = gain - (ld.prefill_s + ld.prefill_s_per_token * uncached + seam_s)
        else:
            uncached = x
        if net > 0 and (mine is None or net > mine[0]):
            mine = (net, j, d, uncached)
    if mine is None or (best is not None and (
            mine[0] < best[0] or (mine[0] == best[0] and d > best[2]))):
        return best, plain
    return mine, plain


def no_hits(key: Hashable) -> Mapping[int, int]:
    """``cached_on`` where nothing is cached."""
    return {}


def most_cached(cands: list[tuple[Hashable, int]],
                hit_on: Callable[[Hashable], Mapping[int, int]] | None) -> float:
    """The most tokens a cached prefix takes off any of ``cands``' prefills, anywhere."""
    if not isinstance(hit_on, HitsOn):
        return math.inf
    most, fill = hit_on.most_of, hit_on.fill
    m = 0  # from the longest context down: none shorter than ``m`` can raise it
    for key, x in reversed(cands):
        if x <= m:
            break
        h = most[key] if key in most else fill(key)[1]
        if h > m:
            m = min(h, x)
    return float(m)


class HitsOn:
    """``cached_on`` by destination index, asked once per key in a check."""

    def __init__(self, loads: Sequence[ReplicaLoad],
                 cached_on: Callable[[Hashable], Mapping[int, int]]) -> None:
        self.index_of = {ld.replica: d for d, ld in enumerate(loads)}
        self.same = all(r == d for r, d in self.index_of.items())  # replica numbers = indices
        self.cached_on = cached_on
        self.hits: dict[Hashable, Mapping[int, int]] = {}
        self.most_of: dict[Hashable, int] = {}  # the most tokens of a key cached anywhere

    def fill(self, key: Hashable) -> tuple[Mapping[int, int], int]:
        """Ask ``cached_on`` about ``key`` (once)."""
        hits = self.cached_on(key)
        if not self.same:
            index_of = self.index_of
            hits = {index_of[r]: n for r, n in hits.items() if r in index_of}
        most = self.most_of[key] = max(hits.values(), default=0)
        self.hits[key] = hits
        return hits, most

    def __call__(self, key: Hashable) -> Mapping[int, int]:
        got = self.hits.get(key)
        return self.fill(key)[0] if got is None else got


def dest_bound(a: float | None, bd: float, c_top: float, k_top: float, k_d: float,
               horizon_s: float, seam_s: float, prefill_s: float) -> float:
    """The filter value of a destination of base ``bd``: the gain at the best new top cost
    any response could reach, with nothing to prefill (no move to it gains more)."""
    if a is None:
        ideal = bd
    elif k_top + k_d > 0:
        ideal = max(bd, (a * k_d + bd * k_top) / (k_top + k_d))
    else:
        ideal = max(a, bd)
    return horizon_s * (c_top - ideal) / c_top - seam_s - prefill_s
