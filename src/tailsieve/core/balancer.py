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

    while the replica ``top`` with the highest cost can shed one running response ``x`` to
    another replica ``d`` such that ``new = max(c_top - x, c_d + x) < c_top`` and the predicted
    time saved over the horizon, ``horizon_s * (c_top - new) / c_top``, exceeds the move's cost
    (``prefill_s(uncached prefix of x on d) + seam_s``), make the best such move.

Moves stay within a pool (``ReplicaLoad.pool``). ``horizon_s`` is how much longer the step is expected to run (the caller's estimate: the
controller's from its measurements). Moves per call are capped; a response just moved is not
moved again in the same call. Everything is a few passes over the running responses.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from dataclasses import dataclass

from tailsieve.errors import ConfigError

__all__ = ["BalanceSettings", "Move", "ReplicaLoad", "RunningResponse", "plan_moves"]


@dataclass(frozen=True, slots=True)
class BalanceSettings:
    """How a step re-balances (chosen by the controller from its measurements and profile)."""

    interval_s: float  # seconds between re-balance checks (also checked at completions)
    horizon_s: float  # expected remaining step time used to price a move's gain, seconds
    seam_s: float = 0.05  # round trip + one scheduling iteration per move, seconds
    max_moves_per_check: int = 64  # moves one check may make
    expected_step_s: float = 0.0  # the controller's step-time estimate (0: unknown)

    def __post_init__(self) -> None:
        if not self.interval_s > 0:
            raise ConfigError(f"interval_s must be > 0, got {self.interval_s}")
        if self.horizon_s < 0 or self.seam_s < 0 or self.expected_step_s < 0:
            raise ConfigError("horizon_s, seam_s and expected_step_s must be >= 0")
        if self.max_moves_per_check < 0:
            raise ConfigError("max_moves_per_check must be >= 0")

    def horizon_at(self, elapsed_s: float) -> float:
        """Expected remaining time at ``elapsed_s`` into the step: the controller's estimate
        less the time spent, never below the time spent so far (a heavy-tailed step that has
        run for ``t`` is expected to run on for about as long) nor below ``horizon_s``'s
        floor of one interval."""
        left = self.expected_step_s - elapsed_s if self.expected_step_s > 0 else self.horizon_s
        return max(left, elapsed_s, self.interval_s)


@dataclass(frozen=True, slots=True)
class RunningResponse:
    """One response running on a replica."""

    key: Hashable  # the caller's id of the response
    context_tokens: int  # prompt + tokens generated so far (what a continuation must prefill)
    cached_on: tuple[tuple[int, int], ...] = ()  # (replica, leading tokens of this
    # response's prefix already in that replica's prefix cache)
    movable: bool = True  # False: counted in its replica's load, never moved (e.g. it has not
    # progressed since its last move)

    def cached_tokens(self, replica: int) -> int:
        """Prefix tokens of this response cached on ``replica`` (at most its context)."""
        got = max((n for r, n in self.cached_on if r == replica), default=0)
        return min(got, self.context_tokens)


@dataclass(frozen=True, slots=True)
class ReplicaLoad:
    """One replica's running responses and its decode/prefill cost model."""

    replica: int
    running: tuple[RunningResponse, ...]
    tau: Callable[[int], float]  # seconds per decode iteration at b running (effective)
    context_s_per_token: float  # k: seconds per iteration per context token held
    prefill_s_per_token: float  # seconds to prefill one uncached prefix token (recompute rate)
    prefill_s: float = 0.0  # fixed cost per admitted continuation, seconds
    accepts: bool = True  # may receive moves (False: e.g. a replica with queued requests)
    pool: int = 0  # moves stay within a pool (the tail pool and the bulk pool differ)

    def cost_s(self, b: int, context: float) -> float:
        return self.tau(b) + self.context_s_per_token * context if b > 0 else 0.0


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
    loads: Sequence[ReplicaLoad], horizon_s: float, seam_s: float, max_moves: int = 64
) -> list[Move]:
    """Greedy moves for one re-balance check (see the module docstring)."""
    if max_moves <= 0 or len(loads) < 2 or horizon_s <= 0:
        return []
    b = [len(ld.running) for ld in loads]
    ctx = [float(sum(x.context_tokens for x in ld.running)) for ld in loads]
    resp: list[list[RunningResponse]] = [list(ld.running) for ld in loads]
    cost = [ld.cost_s(b[i], ctx[i]) for i, ld in enumerate(loads)]
    moved: set[Hashable] = set()
    out: list[Move] = []
    while len(out) < max_moves:
        top = max(range(len(loads)), key=lambda i: cost[i])
        c_top = cost[top]
        if b[top] < 1 or c_top <= 0:
            break
        best: tuple[float, int, int, int] | None = None  # (net gain, index in top, dst, uncached)
        lt = loads[top]
        for d, ld in enumerate(loads):
            if d == top or not ld.accepts or ld.pool != lt.pool:
                continue
            base_d = ld.tau(b[d] + 1) + ld.context_s_per_token * ctx[d]
            if base_d >= c_top:
                continue  # even an empty-context response would make d the new top
            t_shed = lt.cost_s(b[top] - 1, 0.0)
            for j, x in enumerate(resp[top]):
                if x.key in moved or not x.movable:
                    continue
                c_src = t_shed + lt.context_s_per_token * (ctx[top] - x.context_tokens) \
                    if b[top] > 1 else 0.0
                c_dst = base_d + ld.context_s_per_token * x.context_tokens
                new = max(c_src, c_dst)
                if new >= c_top:
                    continue
                uncached = x.context_tokens - x.cached_tokens(ld.replica)
                move_cost = ld.prefill_s + ld.prefill_s_per_token * uncached + seam_s
                net = horizon_s * (c_top - new) / c_top - move_cost
                if net > 0 and (best is None or net > best[0]):
                    best = (net, j, d, uncached)
        if best is None:
            break
        net, j, d, uncached = best
        x = resp[top].pop(j)
        moved.add(x.key)
        b[top] -= 1
        ctx[top] -= x.context_tokens
        b[d] += 1
        ctx[d] += x.context_tokens
        resp[d].append(x)
        cost[top] = lt.cost_s(b[top], ctx[top])
        cost[d] = loads[d].cost_s(b[d], ctx[d])
        out.append(Move(x.key, lt.replica, loads[d].replica, x.context_tokens, uncached, net))
    return out
