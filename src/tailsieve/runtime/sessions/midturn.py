"""Mid-turn moves: the pure balancer (``core.balancer``) over the session book's running turns.

Every ``BalanceSettings.interval_s`` (and at a turn's end once half an interval has passed
since the last check, as the single-turn rebalancer does) the gateway's running turns are read
from the book as one ``ReplicaLoad`` per replica (``SessionBook.balance_loads``, built by
``session.midturn.move_loads`` exactly as the agentic simulator builds its planner's: running
turns keyed by session id with their contexts, tool waits in their home's load, no move into a
replica without KV room, replicas with waiting turns left out), priced over the same horizon
as the simulator's (``session.midturn.move_horizon_s`` with ``SessionBook.session_horizon_s``);
``plan_moves`` picks the moves that save more than they cost (the uncached prefix's prefill on
the destination plus a seam; ``SessionBook.cached`` / ``cached_on`` say what is cached where),
and each is handed to the gateway (``mover``), which moves the turn. A turn whose last move
has not taken effect yet is no candidate (``waiting``). Only the I/O-side glue lives here; the
decision is the balancer's.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Mapping
from dataclasses import dataclass, replace
from typing import Protocol

from tailsieve.core.balancer import BalanceSettings, ReplicaLoad, Running, plan_moves
from tailsieve.runtime.check_timer import CheckTimer
from tailsieve.session.midturn import move_horizon_s


class LoadSource(Protocol):
    """What the rebalancer reads of a ``SessionBook``."""

    def balance_loads(self, now_s: float) -> list[ReplicaLoad]: ...

    def session_horizon_s(self, now_s: float) -> float: ...

    def cached(self, key: Hashable, replica: int) -> int: ...

    def cached_on(self, key: Hashable) -> Mapping[int, int]: ...


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check: the moves planned and how many the gateway made."""

    num_planned: int
    num_made: int


class MidTurnRebalancer:
    """Plans mid-turn moves over ``book``; ``mover(session_id, dst)`` makes one (False when
    the turn cannot move now), ``waiting(session_id)`` says a turn may not move now (its last
    move has not taken effect yet), ``clock()`` the book's time and ``elapsed()`` the seconds
    since the step began (the horizon's origin); ``before_check(now_s)`` runs first at every
    check. Replicas out of service take no move (the book knows their health)."""

    def __init__(
        self,
        book: LoadSource,
        settings: BalanceSettings,
        mover: Callable[[Hashable, int], bool],
        waiting: Callable[[Hashable], bool],
        clock: Callable[[], float],
        elapsed: Callable[[], float],
        before_check: Callable[[float], None] | None = None,
    ) -> None:
        self.book = book
        self.settings = settings
        self._mover = mover
        self._waiting = waiting
        self._clock = clock
        self._elapsed = elapsed
        self._before = before_check  # e.g. the gateway's progress estimate of running pieces
        self.num_checks = 0
        self._timer = CheckTimer(clock, float("-inf"))

    def poke(self) -> None:
        """A turn ended: check soon (half an interval after the last check)."""
        self._timer.poke()

    def check(self) -> CheckResult:
        """One check: plan moves over the book's loads and hand each to the mover."""
        now = self._timer.last_s = self._clock()
        self.num_checks += 1
        if self._before is not None:
            self._before(now)
        loads = [replace(ld, running=_without(ld.running, self._waiting))
                 for ld in self.book.balance_loads(now)]
        s = self.settings
        horizon = move_horizon_s(s, self._elapsed(), self.book.session_horizon_s(now))
        moves = plan_moves(loads, horizon, s.seam_s, s.max_moves_per_check,
                           cached=self.book.cached, cached_on=self.book.cached_on)
        made = sum(1 for mv in moves if self._mover(mv.key, mv.dst))
        return CheckResult(len(moves), made)

    async def loop_once(self) -> CheckResult:
        """Wait until a check is due (``interval_s`` after the last one, half that after a
        poke), then make it. An exception from the check propagates (the gateway logs it,
        counts it and turns moves off)."""
        await self._timer.until_due(self.settings.interval_s)
        return self.check()


def _without(running: Callable[[], Running],
             waiting: Callable[[Hashable], bool]) -> Callable[[], Running]:
    got: list[Running] = []

    def read() -> Running:
        if not got:
            got.append([(k, n) for k, n in running() if not waiting(k)])
        return got[0]

    return read
