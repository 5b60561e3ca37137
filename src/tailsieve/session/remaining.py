"""Expected remaining work of a running trajectory, from what the step has shown so far (pure).

A router never knows how many turns a trajectory will still take or how long they will be.
It does see, while the step runs, every trajectory's turns so far, their outputs, and which
trajectories (and which of a group's siblings) have finished. ``RemainingWork`` is fed those
events and estimates, for a session, the output tokens it will still generate:

- **Turns left.** The turn counts of the step's trajectories form a survival curve, fitted
  online by Kaplan-Meier: finished trajectories are events at their turn count, running ones
  are censored at the turns they have started (they run at least that many). A session that
  has started ``m`` turns is expected to run ``E[N - m | N >= m] = sum_{k >= m} S(k) / S(m-1)``
  more. Past the largest count seen, the curve is unknown; a trajectory that has survived to
  ``K`` turns is expected to run about ``K`` more (the rule ``place_turn`` uses without this
  estimate), so the tail adds ``S(K) K``. Before any trajectory has finished every session
  has the same curve, so the estimate only orders sessions by how far they have come.
- **Its group.** A group's trajectories share their prompt, and their turn counts correlate.
  When ``k`` siblings have finished, the session's expected total ``m + E[N - m | N >= m]`` is
  scaled by ``(G / P)^w``, with ``G`` the geometric mean of the finished siblings' counts,
  ``P`` that of every finished trajectory, and ``w = k rho / (1 + (k - 1) rho)`` the weight a
  group mean of ``k`` members earns when a share ``rho`` of the variance is the group's
  (``RemainingSettings.group_share``).
- **Tokens per turn.** The session's own mean turn output, shrunk towards the step's mean by
  ``RemainingSettings.prior_turns`` pseudo-turns (one turn's output is noisy; a trajectory's
  level is not).

The remaining tokens of a session are ``(turns left + 1) x tokens per turn`` at a turn
boundary (the coming turn included), less what its running turn has generated so far (never
below the rest of one turn's expected output at half its level). No future length is read:
only ``start``, ``turn_ended`` and ``session_ended`` events.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from dataclasses import dataclass

from tailsieve.errors import ConfigError

__all__ = ["RemainingSettings", "RemainingWork"]


@dataclass(frozen=True, slots=True)
class RemainingSettings:
    """The knobs of ``RemainingWork``."""

    group_share: float = 0.5  # rho: share of a trajectory's log turn count its group explains
    prior_turns: float = 8.0  # pseudo-turns of the step's mean output in a session's own mean
    default_turn_tokens: float = 512.0  # a turn's output before any turn has ended

    def __post_init__(self) -> None:
        if not 0 <= self.group_share <= 1:
            raise ConfigError(f"group_share must be in [0, 1], got {self.group_share!r}")
        for name in ("prior_turns", "default_turn_tokens"):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, (int, float)) or not math.isfinite(v) \
                    or v < 0:
                raise ConfigError(f"{name} must be a finite number >= 0, got {v!r}")
        if self.default_turn_tokens <= 0:
            raise ConfigError("default_turn_tokens must be > 0")


@dataclass(slots=True)
class _Traj:
    group: Hashable | None
    turns: int = 0  # turns ended
    output: int = 0  # their output tokens
    finished: bool = False


class RemainingWork:
    """Online estimate of every session's remaining output (see the module docstring)."""

    def __init__(self, settings: RemainingSettings | None = None) -> None:
        self.settings = settings or RemainingSettings()
        self._trajs: dict[Hashable, _Traj] = {}
        self._groups: dict[Hashable, list[int]] = {}  # group -> finished siblings' counts
        self._finished_log = 0.0  # sum of log turn counts of finished trajectories
        self._num_finished = 0
        self._sum_output = 0
        self._num_turns = 0
        self._tail: list[float] | None = None  # tail[m] = E[N - m | N >= m] (m >= 1)

    # ----- events --------------------------------------------------------------------
    def start(self, session: Hashable, group: Hashable | None = None) -> None:
        """A session's first turn arrives (idempotent)."""
        if session not in self._trajs:
            self._trajs[session] = _Traj(group)
            self._tail = None

    def turn_ended(self, session: Hashable, output_tokens: int) -> None:
        """A turn of ``session`` ended with ``output_tokens``."""
        t = self._get(session)
        if output_tokens < 0:
            raise ConfigError(f"session {session!r}: output_tokens must be >= 0")
        t.turns += 1
        t.output += output_tokens
        self._sum_output += output_tokens
        self._num_turns += 1
        self._tail = None

    def session_ended(self, session: Hashable) -> None:
        """``session`` finished after the turns it ended (an unknown one is ignored)."""
        t = self._trajs.get(session)
        if t is None or t.finished:
            return
        t.finished = True
        n = max(t.turns, 1)
        self._num_finished += 1
        self._finished_log += math.log(n)
        if t.group is not None:
            self._groups.setdefault(t.group, []).append(n)
        self._tail = None

    # ----- estimates -----------------------------------------------------------------
    @property
    def turn_tokens(self) -> float:
        """Mean output of the turns ended so far (the default before any)."""
        return self._sum_output / self._num_turns if self._num_turns else (
            self.settings.default_turn_tokens)

    def turns_left(self, session: Hashable) -> float:
        """Expected turns after the one running or coming (``>= 0``)."""
        t = self._get(session)
        m = t.turns + 1
        total = (m + self._tail_at(m)) * self._group_factor(t.group)
        return max(total - m, 0.0)

    def tokens_per_turn(self, session: Hashable) -> float:
        """The session's expected output per turn (its own mean, shrunk to the step's)."""
        t = self._get(session)
        w = self.settings.prior_turns
        if t.turns + w <= 0:
            return self.turn_tokens
        return (t.output + w * self.turn_tokens) / (t.turns + w)

    def tokens_left(self, session: Hashable, generated_tokens: int = 0) -> float:
        """Expected output tokens ``session`` still generates, its running (or coming) turn
        included, of which ``generated_tokens`` are already out."""
        per = self.tokens_per_turn(session)
        this_turn = max(per - generated_tokens, per / 2.0)
        return this_turn + self.turns_left(session) * per

    # ----- internals -----------------------------------------------------------------
    def _get(self, session: Hashable) -> _Traj:
        t = self._trajs.get(session)
        if t is None:
            raise ConfigError(f"unknown session {session!r} (start() it first)")
        return t

    def _group_factor(self, group: Hashable | None) -> float:
        sibs = self._groups.get(group) if group is not None else None
        if not sibs or not self._num_finished:
            return 1.0
        k, rho = len(sibs), self.settings.group_share
        w = k * rho / (1.0 + (k - 1) * rho)
        g = sum(math.log(n) for n in sibs) / k
        p = self._finished_log / self._num_finished
        return math.exp(w * (g - p))

    def _tail_at(self, m: int) -> float:
        tail = self._tail if self._tail is not None else self._fit()
        if m < len(tail):
            return tail[m]
        return float(m)  # past every count seen: about as many more (Lindy)

    def _fit(self) -> list[float]:
        """``tail[m] = E[N - m | N >= m]`` for ``m = 1 .. K``, ``K`` the largest count of a
        finished trajectory (Kaplan-Meier, running ones censored; past ``K`` nothing has
        ended, so the curve says nothing there)."""
        k_max = max((max(t.turns, 1) for t in self._trajs.values() if t.finished), default=0)
        events = [0] * (k_max + 2)
        exits = [0] * (k_max + 2)  # leave the risk set after k (event or censored at k)
        for t in self._trajs.values():
            n = max(t.turns, 1) if t.finished else t.turns + 1
            if t.finished:
                events[n] += 1
            exits[min(n, k_max + 1)] += 1
        at_risk = len(self._trajs)
        surv = [1.0] * (k_max + 1)  # surv[k] = S(k) = P(N > k)
        for k in range(1, k_max + 1):
            s = surv[k - 1]
            if at_risk > 0:
                s *= 1.0 - events[k] / at_risk
            surv[k] = s
            at_risk -= exits[k]
        # suffix sums: sum_{k >= m} S(k) over the fitted range, plus the tail S(K) K
        tail = [0.0] * (k_max + 1)
        acc = surv[k_max] * k_max
        for m in range(k_max, 0, -1):
            acc += surv[m]
            prev = surv[m - 1]
            tail[m] = acc / prev if prev > 0 else float(m)
        self._tail = tail
        return tail
