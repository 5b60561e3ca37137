"""Mid-turn moves: the pure balancer (``core.balancer``) over the session book's running turns.

Every ``BalanceSettings.interval_s`` (and at a turn's end once half an interval has passed
since the last check, as the single-turn rebalancer does) the gateway's running turns are read
from the book as one ``ReplicaLoad`` per replica (``SessionBook.balance_loads``: running turns
keyed by session id, with their contexts and the replica's cost model), ``plan_moves`` picks the
moves that save more than they cost (the uncached prefix's prefill on the destination plus a
seam; ``SessionBook.cached`` / ``cached_on`` say what is cached where), and each is handed to
the gateway (``mover``), which makes the turn's next piece go to the destination. A turn whose
move is still waiting for its running piece to end is no candidate (``waiting``). Only the
I/O-side glue lives here; the decision is the balancer's.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Hashable, Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Protocol

from tailsieve.core.balancer import BalanceSettings, ReplicaLoad, Running, plan_moves


class LoadSource(Protocol):
    """What the rebalancer reads of a ``SessionBook``."""

    def balance_loads(self, now_s: float) -> list[ReplicaLoad]: ...

    def cached(self, key: Hashable, replica: int) -> int: ...

    def cached_on(self, key: Hashable) -> Mapping[int, int]: ...


@dataclass(frozen=True, slots=True)
class CheckResult:
    """One check: the moves planned and how many the gateway made."""

    num_planned: int
    num_made: int


class MidTurnRebalancer:
    """Plans mid-turn moves over ``book``; ``mover(session_id, dst)`` makes one (False when
    the turn cannot move now), ``waiting(session_id)`` says a turn's last move has not taken
    effect yet, ``healthy()`` which replicas may receive turns, ``clock()`` the book's time
    and ``elapsed()`` the seconds since the step began (the horizon's origin);
    ``before_check(now_s)`` runs first at every check."""

    def __init__(
        self,
        book: LoadSource,
        settings: BalanceSettings,
        mover: Callable[[Hashable, int], bool],
        waiting: Callable[[Hashable], bool],
        healthy: Callable[[], Sequence[bool]],
        clock: Callable[[], float],
        elapsed: Callable[[], float],
        before_check: Callable[[float], None] | None = None,
    ) -> None:
        self.book = book
        self.settings = settings
        self._mover = mover
        self._waiting = waiting
        self._healthy = healthy
        self._clock = clock
        self._elapsed = elapsed
        self._before = before_check  # e.g. the gateway's progress estimate of running pieces
        self.num_checks = 0
        self._last_s = float("-inf")
        self._poked = False
        self._wake = asyncio.Event()

    def poke(self) -> None:
        """A turn ended: check soon (half an interval after the last check)."""
        self._poked = True
        self._wake.set()

    def check(self) -> CheckResult:
        """One check: plan moves over the book's loads and hand each to the mover."""
        now = self._clock()
        self._last_s = now
        self.num_checks += 1
        if self._before is not None:
            self._before(now)
        ok = self._healthy()
        loads = [self._candidates(ld, ok) for ld in self.book.balance_loads(now)]
        s = self.settings
        moves = plan_moves(loads, s.horizon_at(self._elapsed()), s.seam_s,
                           s.max_moves_per_check, cached=self.book.cached,
                           cached_on=self.book.cached_on)
        made = sum(1 for mv in moves if self._mover(mv.key, mv.dst))
        return CheckResult(len(moves), made)

    def _candidates(self, ld: ReplicaLoad, healthy: Sequence[bool]) -> ReplicaLoad:
        """``ld`` without the turns waiting on a move; a replica taken out accepts none."""
        up = 0 <= ld.replica < len(healthy) and healthy[ld.replica]
        return replace(ld, running=_without(ld.running, self._waiting),
                       accepts=ld.accepts and up)

    async def loop_once(self) -> CheckResult:
        """Wait until a check is due (``interval_s`` after the last one, half that after a
        poke), then make it. An exception from the check propagates (the gateway logs it,
        counts it and turns moves off)."""
        interval = self.settings.interval_s
        while True:
            due = self._last_s + (interval / 2 if self._poked else interval)
            wait = due - self._clock()
            if wait <= 0:
                break
            self._wake.clear()
            # ``asyncio.wait``, not ``wait_for``: on 3.11 that can lose a cancel that arrives
            # with a poke (the gateway pokes at a turn's end, then may close)
            waiter = asyncio.ensure_future(self._wake.wait())
            try:
                await asyncio.wait({waiter}, timeout=wait)
            finally:
                waiter.cancel()
        self._poked = False
        return self.check()


def _without(running: Callable[[], Running],
             waiting: Callable[[Hashable], bool]) -> Callable[[], Running]:
    got: list[Running] = []

    def read() -> Running:
        if not got:
            got.append([(k, n) for k, n in running() if not waiting(k)])
        return got[0]

    return read
