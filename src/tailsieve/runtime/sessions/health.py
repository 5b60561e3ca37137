"""Which replicas are in service: taken out at a fault, probed until they answer again."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable

from tailsieve.errors import ReplicaError
from tailsieve.runtime.sessions.pieces import HealthProbe, PieceRunner

log = logging.getLogger(__name__)


class ReplicaHealth:
    """``healthy[r]`` per replica. ``down`` takes a replica out (``on_change`` is told) and,
    when the runner can probe, probes it every ``probe_interval_s`` until it answers, then
    returns it to service. ``since_s[r]`` (Unix time) is when ``r`` last went in or out,
    ``last_error[r]`` the fault that took it out last ("Type: message"; None: none yet)."""

    def __init__(self, num_replicas: int, runner: PieceRunner, probe_interval_s: float,
                 on_change: Callable[[int, bool], None]) -> None:
        self.healthy = [True] * num_replicas
        self.since_s = [time.time()] * num_replicas
        self.last_error: list[str | None] = [None] * num_replicas
        self._runner = runner
        self._interval_s = probe_interval_s
        self._on_change = on_change
        self._probes: dict[int, asyncio.Task[None]] = {}

    def set(self, replica: int, ok: bool) -> None:
        """Take ``replica`` out of service or return it."""
        if ok != self.healthy[replica]:
            self.since_s[replica] = time.time()
        self.healthy[replica] = ok
        self._on_change(replica, ok)

    def down(self, replica: int, exc: BaseException) -> None:
        """``replica`` failed with ``exc`` (a no-op when it is already out)."""
        if not self.healthy[replica]:
            return
        log.warning("session gateway: replica %d taken out: %s", replica, exc)
        self.last_error[replica] = f"{type(exc).__name__}: {exc}"
        self.set(replica, False)
        if isinstance(self._runner, HealthProbe) and replica not in self._probes:
            self._probes[replica] = asyncio.create_task(self._probe(replica, self._runner))

    async def wait_any(self, limit_s: float) -> None:
        """Return once a replica is in service; ``ReplicaError`` after ``limit_s``."""
        waited = 0.0
        step = min(self._interval_s, limit_s)
        while not any(self.healthy):
            if waited >= limit_s:
                raise ReplicaError(f"no healthy replica (waited {waited:.1f} s of {limit_s} s)")
            await asyncio.sleep(step)
            waited += step

    async def _probe(self, replica: int, probe: HealthProbe) -> None:
        try:
            while not await probe.probe(replica):
                await asyncio.sleep(self._interval_s)
            log.info("session gateway: replica %d back in service", replica)
            self.set(replica, True)
        finally:
            self._probes.pop(replica, None)

    async def aclose(self) -> None:
        """Stop the probes."""
        tasks = list(self._probes.values())
        for t in tasks:
            t.cancel()
        for t in tasks:
            with contextlib.suppress(asyncio.CancelledError):
                await t
        self._probes.clear()
