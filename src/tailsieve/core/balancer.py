"""The balancer: which running responses to move where, while a step runs (pure, no I/O).

Imbalance re-forms while a step runs: after each completion some replicas carry several long
contexts and others sit nearly idle. A running response can be moved by continuation (stop it,
send prompt + generated tokens as the new prompt elsewhere); the destination pays a prefill of
the uncached prefix plus a seam (round trip + one scheduling iteration).

Each replica's predicted decode iteration cost is ``c_r = tau_r(b_r) + k_r * C_r`` (``b_r``
running responses holding ``C_r`` context tokens; ``tau_r`` is the replica's *effective* curve,
speculative decoding already applied, so each replica's mode is priced). A response on replica
``r`` advances one token per ``c_r`` seconds, so the slowest-advancing responses are those on
the replica with the highest cost. Greedy rule (lengths are never read):

    while the replica ``top`` with the highest cost can shed one running response ``x``
    (context ``x`` tokens) to another replica ``d`` of its pool such that
    ``new = max(c_top without x, c_d with x) < c_top`` and the predicted time saved over the
    horizon, ``horizon_s * (c_top - new) / c_top``, exceeds the move's cost
    (``prefill_s(uncached prefix of x on d) + seam_s``), make the best such move.

``horizon_s`` is how much longer the step is expected to run (the caller's estimate: the
controller's from its measurements). A response moved in a call is not moved again in it.

Cost: ``new`` is ``max(A - k x, B + k x)`` for fixed ``A`` (top without any response) and ``B``
(``d`` with one more), and the move's cost grows with ``x``, so for each destination only three
responses can be best: the smallest context, and the two around ``x* = (A - B) / 2k``. A check
reads every replica's count and context sum (O(R)) and sorts a top replica's responses once.
Prefix-cache hits (``cached``) lower a candidate's cost but do not widen the search.

Each move weighs few destinations, and picks exactly the move a scan of every destination would
(``core.balance_scan``): destinations sharing a pool and cost model are kept sorted by ``B``
(a move changes two of them); a scan by ``B`` stops once the best gain any response could reach
there (nothing to prefill) falls below the best move found, or once the last destination's best
gain plus the most prefill a cached prefix of the top's responses could save does
(``cached_on`` tells where and how much is cached); destinations where ``x*`` lies beyond every
context and the top stays the costlier all give the same gain, so of those only the
lowest-numbered one and those with a cached prefix are weighed.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from operator import itemgetter

from tailsieve.core.balance_scan import Groups, best_for, plateau_len
from tailsieve.core.drain import DrainSettings
from tailsieve.core.replica_load import ReplicaLoad, Running
from tailsieve.errors import ConfigError

__all__ = ["BalanceSettings", "Move", "ReplicaLoad", "Running", "iter_moves", "plan_moves"]

@dataclass(frozen=True, slots=True)
class BalanceSettings:
    """How a step re-balances (chosen by the controller from its measurements and profile)."""

    interval_s: float  # seconds between re-balance checks (also checked at completions)
    horizon_s: float  # expected remaining step time used to price a move's gain, seconds
    seam_s: float = 0.05  # round trip + one scheduling iteration per move, seconds
    max_moves_per_check: int = 64  # moves one check may make
    max_moves_per_decision: int = 2  # a check plans in decisions of at most this many moves
    # (``core.balance_check``); the moves are the same whatever it is: it bounds the time of
    # one decision, not what a check does
    expected_step_s: float = 0.0  # the controller's step-time estimate (0: unknown)
    drain: DrainSettings | None = None  # the single-turn drain's levers (core.drain; None: off)

    def __post_init__(self) -> None:
        if not self.interval_s > 0:
            raise ConfigError(f"interval_s must be > 0, got {self.interval_s}")
        if self.horizon_s < 0 or self.seam_s < 0 or self.expected_step_s < 0:
            raise ConfigError("horizon_s, seam_s and expected_step_s must be >= 0")
        if self.max_moves_per_check < 0:
            raise ConfigError("max_moves_per_check must be >= 0")
        if self.max_moves_per_decision < 1:
            raise ConfigError("max_moves_per_decision must be >= 1")

    def horizon_at(self, elapsed_s: float) -> float:
        """Expected remaining time at ``elapsed_s`` into the step: the controller's estimate
        less the time spent (``horizon_s`` without an estimate), never below the time spent so
        far (a heavy-tailed step that has run for ``t`` is expected to run on for about as
        long) nor below one interval."""
        left = self.expected_step_s - elapsed_s if self.expected_step_s > 0 else self.horizon_s
        return max(left, elapsed_s, self.interval_s)


@dataclass(frozen=True, slots=True)
class Move:
    """Move ``key`` from replica ``src`` to replica ``dst``."""

    key: Hashable
    src: int
    dst: int
    prefix_tokens: int  # context tokens the continuation carries
    prefill_tokens: int  # of them, not cached on ``dst``
    predicted_gain_s: float  # predicted step time saved, net of the move cost


def plan_moves(
    loads: Sequence[ReplicaLoad], horizon_s: float, seam_s: float, max_moves: int = 64,
    cached: Callable[[Hashable, int], int] | None = None,
    cached_on: Callable[[Hashable], Mapping[int, int]] | None = None,
) -> list[Move]:
    """Greedy moves for one re-balance check (see the module docstring). ``cached(key,
    replica)``: prefix tokens of that response already in that replica's cache (default 0);
    ``cached_on(key)``: the same as ``{replica: cached(key, replica)}`` over the replicas
    where it is above 0 (others may be left out), which lets a check skip the others and
    bound what a cached prefix can save (same moves, less time)."""
    if max_moves <= 0:
        return []
    return list(islice(iter_moves(loads, horizon_s, seam_s, cached, cached_on), max_moves))


def iter_moves(
    loads: Sequence[ReplicaLoad], horizon_s: float, seam_s: float,
    cached: Callable[[Hashable, int], int] | None = None,
    cached_on: Callable[[Hashable], Mapping[int, int]] | None = None,
) -> Iterator[Move]:
    """``plan_moves``'s moves one at a time, each planned when asked for: the first ``n``
    are ``plan_moves(loads, horizon_s, seam_s, n, cached, cached_on)``, whenever they are
    asked for. So a caller may take a few, make them, and ask for more, provided the loads
    (and what their ``running`` return) and ``cached`` / ``cached_on`` for the responses not
    yet moved stay as they were (``core.balance_check``)."""
    nr = len(loads)
    if nr < 2 or horizon_s <= 0:
        return
    b = [ld.num_running for ld in loads]
    ctx = [float(ld.context_tokens) for ld in loads]
    ks = [ld.context_s_per_token for ld in loads]
    taus = [ld.tau for ld in loads]
    cost = [t(n) + k * c if n > 0 else 0.0 for t, n, k, c in zip(taus, b, ks, ctx, strict=True)]
    groups = Groups(loads, b, ctx, taus, ks)
    # no negative rate: a destination's bound (the filter value) is never below its moves'
    # gains and falls as its base grows within a group, so a scan by base can stop early
    prunable = min(ks) >= 0 and min([ld.prefill_s_per_token for ld in loads]) >= 0
    # key -> the destinations (indices) where it may have a cached prefix (None: unknown)
    hit_on: Callable[[Hashable], Mapping[int, int]] | None = None
    if cached is None:
        hit_on = _no_hits
    elif cached_on is not None:
        hit_on = _HitsOn(loads, cached_on)
    sorted_run: dict[int, list[tuple[Hashable, int]]] = {}  # replica -> by context, stable
    most_hit: dict[int, float] = {}  # replica -> most cached tokens of its responses anywhere
    while True:
        c_top = max(cost)
        top = cost.index(c_top)
        if b[top] < 1 or c_top <= 0:
            break
        lt = loads[top]
        k_top = ks[top]
        a = lt.tau(b[top] - 1) + k_top * ctx[top] if b[top] > 1 else None  # top without x
        cands = sorted_run.get(top)
        if cands is None:
            cands = sorted_run[top] = sorted(lt.running(), key=_INDEX)
        if not cands:
            break
        scale = horizon_s * (1.0 + abs(a or 0.0) / c_top) + seam_s  # of rounding in a gain
        best: tuple[float, int, int, int] | None = None  # (net gain, index, dst, uncached)
        for grp in groups.by_pool.get(lt.pool, ()):
            reps: list[int] = []  # of the plateau, the destinations to evaluate
            start = 0
            if grp and prunable and a is not None and hit_on is not None:
                start = plateau_len(grp, cands, a, c_top, k_top, loads[grp[0][1]], horizon_s,
                                    seam_s)
            if start:
                lead = min(map(_INDEX, grp[:start]))  # the lowest-numbered of the plateau
                if lead == top:
                    lead = min((d for _, d in grp[:start] if d != top), default=-1)
                if lead >= 0:
                    assert hit_on is not None
                    last = grp[start - 1]
                    hit = {d for key in {cands[0][0], cands[-1][0]} for d in hit_on(key)
                           if d != top and 0 <= d < nr and groups.of[d] is grp
                           and (groups.base[d], d) <= last}
                    reps = sorted(hit | {lead}) if hit else [lead]
            for d in reps:
                best, _ = best_for(best, cands, a, groups.base[d], c_top, k_top, loads[d], d,
                                   horizon_s, seam_s, cached, hit_on, scale if prunable else None)
            plain = None  # the last destination's best gain were nothing cached
            for bd, d in grp[start:]:
                if d == top:
                    continue
                if bd >= c_top:
                    break
                ld = loads[d]
                bound = _bound(a, bd, c_top, k_top, ks[d], horizon_s, seam_s, ld.prefill_s)
                if not bound > 0:
                    if prunable:
                        break
                    continue
                slack = 1e-9 * (scale + abs(best[0] if best else 0.0) + abs(ld.prefill_s))
                if prunable and best is not None and bound < best[0] - slack:
                    break
                if prunable and plain is not None:
                    # no move to a destination of larger base than the last one gains more
                    # than the last one's plain gain plus the most a cached prefix can save
                    if plain == -math.inf:
                        break  # no response could move to the last one
                    floor = max(best[0] if best else 0.0, 0.0) - slack
                    rate = ld.prefill_s_per_token
                    if cached is None:
                        most = 0.0
                    elif plain + rate * cands[-1][1] < floor:
                        break  # not even a whole context cached would do
                    else:
                        if top not in most_hit:
                            most_hit[top] = _most_hit(cands, hit_on)
                        most = most_hit[top]
                    if plain + rate * most < floor:
                        break
                best, plain = best_for(best, cands, a, bd, c_top, k_top, ld, d, horizon_s,
                                       seam_s, cached, hit_on, scale if prunable else None)
        if best is None:
            break
        net, j, d, uncached = best
        key, x = cands.pop(j)
        b[top] -= 1
        ctx[top] -= x
        b[d] += 1
        ctx[d] += x
        for r in (top, d):
            cost[r] = taus[r](b[r]) + ks[r] * ctx[r] if b[r] > 0 else 0.0
            groups.update(r, taus[r](b[r] + 1) + ks[r] * ctx[r])
        yield Move(key, lt.replica, loads[d].replica, x, uncached, net)


_INDEX = itemgetter(1)


def _no_hits(key: Hashable) -> Mapping[int, int]:
    return {}


def _most_hit(cands: list[tuple[Hashable, int]],
              hit_on: Callable[[Hashable], Mapping[int, int]] | None) -> float:
    """The most tokens a cached prefix takes off any of ``cands``' prefills, anywhere."""
    if not isinstance(hit_on, _HitsOn):
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


class _HitsOn:
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


def _bound(a: float | None, bd: float, c_top: float, k_top: float, k_d: float,
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
