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

A destination's ``room_tokens`` (KV a reservation budget leaves it) bounds the contexts it
takes: only the top's responses that fit are weighed there, and each move made counts against
the destination's room (and gives the source its room back). A destination with less room than
the top's largest context is weighed on its own (no plateau), and its gain bounds no other.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import islice
from operator import itemgetter

from tailsieve.core.balance_scan import (
    Best,
    Groups,
    HitsOn,
    best_for,
    dest_bound,
    most_cached,
    no_hits,
    plateau_len,
)
from tailsieve.core.drain import DrainSettings
from tailsieve.core.replica_load import ReplicaLoad, Running
from tailsieve.errors import ConfigError

__all__ = ["BalanceSettings", "Move", "ReplicaLoad", "Running", "iter_moves", "plan_moves"]

_INDEX = itemgetter(1)


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
    if len(loads) < 2 or horizon_s <= 0:
        return
    state = _Planner.of(loads, horizon_s, seam_s, cached, cached_on)
    while (top := state.top()) is not None:
        best = state.best_move(top)
        if best is None:
            return
        yield state.make(top, best)


@dataclass(slots=True)
class _Top:
    """The costliest replica, the one a move leaves, as one move's search reads it."""

    index: int
    cost: float  # c_top: its decode iteration cost, seconds
    k: float  # its context_s_per_token
    without: float | None  # its cost without one response (``A``; None: it runs only one)
    cands: list[tuple[Hashable, int]]  # its movable responses, by context (stable)
    scale: float  # the size of a gain's rounding (the slack below which a gain is lower)
    prune: float | None  # ``scale`` where the scan may stop early, else None
    pool: int


@dataclass(slots=True)
class _Planner:
    """One call's state: each replica's count, context and cost as the moves made so far
    leave them, the destination groups by base, and what the call has learnt per replica."""

    loads: Sequence[ReplicaLoad]
    horizon_s: float
    seam_s: float
    cached: Callable[[Hashable, int], int] | None
    hit_on: Callable[[Hashable], Mapping[int, int]] | None  # key -> the destinations
    # (indices) where it may have a cached prefix (None: unknown)
    prunable: bool  # no negative rate: a destination's bound (the filter value) is never
    # below its moves' gains and falls as its base grows within a group, so a scan by base
    # can stop early
    b: list[int]
    ctx: list[float]
    ks: list[float]
    taus: list[Callable[[int], float]]
    cost: list[float]
    groups: Groups
    sorted_run: dict[int, list[tuple[Hashable, int]]]  # replica -> by context, stable
    most_hit: dict[int, float]  # replica -> most cached tokens of its responses anywhere
    room: list[float]  # context tokens each replica may still take (``room_tokens``, less
    # the moves made into it, plus those made out of it)
    bounded: bool  # some replica's room is finite (else no room check is needed)

    @classmethod
    def of(cls, loads: Sequence[ReplicaLoad], horizon_s: float, seam_s: float,
           cached: Callable[[Hashable, int], int] | None,
           cached_on: Callable[[Hashable], Mapping[int, int]] | None) -> _Planner:
        b = [ld.num_running for ld in loads]
        ctx = [float(ld.context_tokens) for ld in loads]
        ks = [ld.context_s_per_token for ld in loads]
        taus = [ld.tau for ld in loads]
        cost = [t(n) + k * c if n > 0 else 0.0 for t, n, k, c in zip(taus, b, ks, ctx,
                                                                      strict=True)]
        groups = Groups(loads, b, ctx, taus, ks)
        room = [ld.room_tokens for ld in loads]
        prunable = min(ks) >= 0 and min([ld.prefill_s_per_token for ld in loads]) >= 0
        hit_on: Callable[[Hashable], Mapping[int, int]] | None = None
        if cached is None:
            hit_on = no_hits
        elif cached_on is not None:
            hit_on = HitsOn(loads, cached_on)
        return cls(loads, horizon_s, seam_s, cached, hit_on, prunable, b, ctx, ks, taus, cost,
                   groups, {}, {}, room, any(r < math.inf for r in room))

    def top(self) -> _Top | None:
        """The costliest replica, or None where it has no response it may shed."""
        cost, b = self.cost, self.b
        c_top = max(cost)
        top = cost.index(c_top)
        if b[top] < 1 or c_top <= 0:
            return None
        lt = self.loads[top]
        k_top = self.ks[top]
        a = lt.tau(b[top] - 1) + k_top * self.ctx[top] if b[top] > 1 else None
        cands = self.sorted_run.get(top)
        if cands is None:
            cands = self.sorted_run[top] = sorted(lt.running(), key=_INDEX)
        if not cands:
            return None
        scale = self.horizon_s * (1.0 + abs(a or 0.0) / c_top) + self.seam_s
        return _Top(top, c_top, k_top, a, cands, scale, scale if self.prunable else None,
                    lt.pool)

    def best_move(self, top: _Top) -> Best | None:
        """The best move off ``top`` (None: no move gains): in each group of destinations of
        its pool, the plateau's few, then the rest by base until none could gain more."""
        best: Best | None = None
        for grp in self.groups.by_pool.get(top.pool, ()):
            start, reps = self._plateau(top, grp)
            for d in reps:
                cands = self._fitting(top, d)
                if cands:
                    best, _ = best_for(best, cands, top.without, self.groups.base[d],
                                       top.cost, top.k, self.loads[d], d, self.horizon_s,
                                       self.seam_s, self.cached, self.hit_on, top.prune)
            best = self._scan(top, grp[start:], best)
        return best

    def _fitting(self, top: _Top, d: int) -> list[tuple[Hashable, int]]:
        """The top's responses (by context) whose context fits ``d``'s room: all of them, or
        the leading ones."""
        room, cands = self.room[d], top.cands
        if not self.bounded or room >= cands[-1][1]:
            return cands
        return cands[:bisect.bisect_right(cands, room, key=_INDEX)]

    def _plateau(self, top: _Top, grp: list[tuple[float, int]]) -> tuple[int, list[int]]:
        """How many of ``grp``'s leading destinations give one same gain without a cached
        prefix (``plateau_len``), and of them those to weigh: the lowest-numbered one and
        those where the smallest or the largest candidate has a cached prefix."""
        if not (grp and self.prunable and top.without is not None and self.hit_on is not None):
            return 0, []
        start = plateau_len(grp, top.cands, top.without, top.cost, top.k,
                            self.loads[grp[0][1]], self.horizon_s, self.seam_s)
        if not start:
            return 0, []
        if self.bounded:
            largest, room = top.cands[-1][1], self.room
            if any(room[d] < largest for _, d in grp[:start]):
                return 0, []
        lead = min(map(_INDEX, grp[:start]))
        if lead == top.index:
            lead = min((d for _, d in grp[:start] if d != top.index), default=-1)
        if lead < 0:
            return start, []
        last, of, base, hit_on = grp[start - 1], self.groups.of, self.groups.base, self.hit_on
        hit = {d for key in {top.cands[0][0], top.cands[-1][0]} for d in hit_on(key)
               if d != top.index and 0 <= d < len(self.loads) and of[d] is grp
               and (base[d], d) <= last}
        return start, sorted(hit | {lead}) if hit else [lead]

    def _scan(self, top: _Top, dests: list[tuple[float, int]], best: Best | None) -> Best | None:
        """The better of ``best`` and the moves to ``dests`` (a group's destinations by base),
        stopping where no destination further on could gain more."""
        loads, ks, prunable, cached, hit_on = (self.loads, self.ks, self.prunable, self.cached,
                                               self.hit_on)
        c_top, a, k_top, cands, scale = top.cost, top.without, top.k, top.cands, top.scale
        horizon_s, seam_s = self.horizon_s, self.seam_s
        plain = None  # the last destination's best gain were nothing cached
        for bd, d in dests:
            if d == top.index:
                continue
            if bd >= c_top:
                break
            ld = loads[d]
            bound = dest_bound(a, bd, c_top, k_top, ks[d], horizon_s, seam_s, ld.prefill_s)
            if not bound > 0:
                if prunable:
                    break
                continue
            slack = 1e-9 * (scale + abs(best[0] if best else 0.0) + abs(ld.prefill_s))
            if prunable and best is not None and bound < best[0] - slack:
                break
            if prunable and plain is not None and self._out_of_reach(top, plain, ld, best,
                                                                     slack):
                break
            fit = self._fitting(top, d)
            if len(fit) == len(cands):
                best, plain = best_for(best, cands, a, bd, c_top, k_top, ld, d, horizon_s,
                                       seam_s, cached, hit_on, top.prune)
            elif fit:
                best, _ = best_for(best, fit, a, bd, c_top, k_top, ld, d, horizon_s, seam_s,
                                   cached, hit_on, top.prune)
        return best

    def _out_of_reach(self, top: _Top, plain: float, ld: ReplicaLoad, best: Best | None,
                      slack: float) -> bool:
        """No move to a destination of larger base than the last one weighed gains more than
        that one's plain gain (nothing cached) plus the most a cached prefix can save: whether
        that stays below ``best`` (and 0)."""
        if plain == -math.inf:
            return True  # no response could move to the last one
        floor = max(best[0] if best else 0.0, 0.0) - slack
        rate = ld.prefill_s_per_token
        if self.cached is None:
            most = 0.0
        elif plain + rate * top.cands[-1][1] < floor:
            return True  # not even a whole context cached would do
        else:
            if top.index not in self.most_hit:
                self.most_hit[top.index] = most_cached(top.cands, self.hit_on)
            most = self.most_hit[top.index]
        return plain + rate * most < floor

    def make(self, top: _Top, best: Best) -> Move:
        """Make move ``best`` off ``top``: the counts, costs and groups after it."""
        net, j, d, uncached = best
        key, x = top.cands.pop(j)
        b, ctx, taus, ks, t = self.b, self.ctx, self.taus, self.ks, top.index
        b[t] -= 1
        ctx[t] -= x
        b[d] += 1
        ctx[d] += x
        self.room[t] += x
        self.room[d] -= x
        for r in (t, d):
            self.cost[r] = taus[r](b[r]) + ks[r] * ctx[r] if b[r] > 0 else 0.0
            self.groups.update(r, taus[r](b[r] + 1) + ks[r] * ctx[r])
        return Move(key, self.loads[t].replica, self.loads[d].replica, x, uncached, net)

