"""Which replicas are in service, for every execution engine (the single-turn ``LiveExecutor``
and the session gateway under the proxy and the verl router): a replica is taken out at a
fault (``runtime.engine.faults``), probed every ``probe_interval_s`` until it answers, then returned
to service."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass

from tailsieve.errors import ReplicaError
from tailsieve.runtime.tasks import cancel_and_wait

log = logging.getLogger(__name__)

Probe = Callable[[int], Awaitable[str]]
"""Probes replica ``r``: "" when it answers (``transport.probe_health``), else why not."""


@dataclass(frozen=True, slots=True)
class ReplicaState:
    """One replica as the router sees it (a snapshot)."""

    url: str
    healthy: bool
    reason: str  # why it was taken out last ("": never)
    num_faults: int
    since_s: float  # Unix time it last went in or out


class ReplicaHealth:
    """``healthy[r]`` per replica, with ``urls[r]``, ``since_s[r]`` (Unix time it last went in
    or out), ``last_error[r]`` (the fault that took it out last, "Type: message"; None: none
    yet) and ``num_faults[r]``. ``down`` takes a replica out (``on_change`` is told) and, with a
    ``probe``, probes it every ``probe_interval_s`` (the first after one interval) until it
    answers, then returns it to service (``num_readmitted`` counts those)."""

    def __init__(self, urls: Sequence[str], probe: Probe | None, probe_interval_s: float,
                 on_change: Callable[[int, bool], None] | None = None) -> None:
        self.urls = [u.rstrip("/") for u in urls]
        n = len(self.urls)
        self.healthy = [True] * n
        self.since_s = [time.time()] * n
        self.last_error: list[str | None] = [None] * n
        self.num_faults = [0] * n
        self.num_readmitted = 0
        self._probe_fn = probe
        self.probe_interval_s = probe_interval_s
        self._on_change = on_change
        self._probes: dict[int, asyncio.Task[None]] = {}

    def __len__(self) -> int:
        return len(self.urls)

    def state(self, replica: int) -> ReplicaState:
        """A snapshot of ``replica``."""
        return ReplicaState(self.urls[replica], self.healthy[replica],
                            self.last_error[replica] or "", self.num_faults[replica],
                            self.since_s[replica])

    def set(self, replica: int, ok: bool) -> None:
        """Take ``replica`` out of service or return it."""
        if ok != self.healthy[replica]:
            self.since_s[replica] = time.time()
        self.healthy[replica] = ok
        if self._on_change is not None:
            self._on_change(replica, ok)

    def down(self, replica: int, exc: BaseException | str, fault: bool = True) -> bool:
        """``replica`` failed with ``exc``: take it out (counted in ``num_faults`` unless not
        its ``fault``) and probe it. False (a no-op) when it is already out."""
        if not self.healthy[replica]:
            return False
        why = exc if isinstance(exc, str) else f"{type(exc).__name__}: {exc}"
        log.warning("replica %d (%s) taken out: %s", replica, self.urls[replica], why)
        self.last_error[replica] = why
        self.num_faults[replica] += fault
        self.set(replica, False)
        self.watch(replica)
        return True

    def move(self, replica: int, url: str) -> None:
        """``replica`` now answers at ``url``: taken out (not its fault) to be probed there."""
        url = url.rstrip("/")
        old, self.urls[replica] = self.urls[replica], url
        self.healthy[replica] = True  # so that ``down`` takes it out afresh
        self.down(replica, f"moved from {old} to {url}", fault=False)

    def watch(self, replica: int) -> None:
        """Probe ``replica`` in the background until it answers (when there is a ``probe``)."""
        if self._probe_fn is None or replica in self._probes:
            return
        try:
            loop = asyncio.get_running_loop()
        except RuntimeError:  # no running loop: the next ``probe`` call probes it
            return
        self._probes[replica] = loop.create_task(self._probe_until_up(replica))

    async def probe(self, replica: int) -> bool:
        """Probe ``replica`` once: one that answers is returned to service, one in service that
        does not is taken out (with why). Whether it answered."""
        if self._probe_fn is None:
            return self.healthy[replica]
        url, was = self.urls[replica], self.healthy[replica]
        try:
            why = await self._probe_fn(replica)
        except Exception as exc:  # a probe that raises is a replica that did not answer
            why = f"{type(exc).__name__}: {exc}"
        if url != self.urls[replica] or was != self.healthy[replica]:
            return not why  # moved, taken out or returned while the probe was in flight
        if not why and not was:
            log.info("replica %d (%s) back in service", replica, url)
            self.num_readmitted += 1
            self.set(replica, True)
        elif why and was:
            self.down(replica, why, fault=False)
        return not why

    async def _probe_until_up(self, replica: int) -> None:
        try:
            while not self.healthy[replica]:
                await asyncio.sleep(self.probe_interval_s)
                await self.probe(replica)
        finally:
            self._probes.pop(replica, None)

    async def wait_any(self, limit_s: float) -> None:
        """Return once a replica is in service; ``ReplicaError`` after ``limit_s``."""
        waited = 0.0
        step = min(self.probe_interval_s, limit_s)
        while not any(self.healthy):
            if waited >= limit_s:
                raise ReplicaError(f"no healthy replica (waited {waited:.1f} s of {limit_s} s)")
            await asyncio.sleep(step)
            waited += step

    async def aclose(self) -> None:
        """Stop the probes (``watch`` starts them again)."""
        await cancel_and_wait(*self._probes.values())
        self._probes.clear()


__all__ = ["Probe", "ReplicaHealth", "ReplicaState"]
