"""When a re-balance check is due: the live step's rebalancer (``runtime.step.rebalancer``) and the
session gateway's mid-turn moves (``runtime.sessions.gateway_moves``) both wait by it.

A check is due ``interval_s`` after the last one. The step's rebalancer also pokes the timer
at each response's completion, which brings the check to half an interval after the last one,
as the single-turn simulator checks (``sim.movepath``); the gateway does not, as the agentic
simulator checks on the interval alone (``sim.agentic.step``). The interval is in ``clock``
seconds; a wait lasts ``time_scale`` real seconds per clock second (a ``ModelClock``'s).
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable

__all__ = ["CheckTimer"]


class CheckTimer:
    """The time of the last check (``last_s``, on ``clock``; the owner sets it at each check)
    and whether a completion poked since."""

    __slots__ = ("_wake", "clock", "last_s", "poked", "time_scale")

    def __init__(self, clock: Callable[[], float], last_s: float = 0.0,
                 time_scale: float = 1.0) -> None:
        self.clock = clock
        self.last_s = last_s
        self.time_scale = time_scale  # real seconds per clock second
        self.poked = False
        self._wake: asyncio.Event | None = None  # set by ``poke`` while ``until_due`` waits

    def poke(self) -> None:
        """A completion: the next check is due half an interval after the last one."""
        self.poked = True
        if self._wake is not None:
            self._wake.set()

    async def until_due(self, interval_s: float) -> None:
        """Return once a check is due (a poke while waiting may bring it on); the poke is
        then spent."""
        wake = self._wake = asyncio.Event()
        while True:
            due = self.last_s + (interval_s / 2 if self.poked else interval_s)
            wait = due - self.clock()
            if wait <= 0:
                break
            wake.clear()
            # ``asyncio.wait``, not ``wait_for``: on 3.11 that can lose a cancel (a step's end,
            # a gateway's close) that arrives with a poke
            waiter = asyncio.ensure_future(wake.wait())
            try:
                await asyncio.wait({waiter}, timeout=wait * self.time_scale)
            finally:
                waiter.cancel()
        self.poked = False
