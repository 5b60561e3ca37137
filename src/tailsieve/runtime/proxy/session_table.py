"""Which gateway session a request's sample belongs to (pure: callers pass the time).

A client names a session by a key (a header such as ``X-Session-ID`` or SGLang Model
Gateway's ``X-SMG-Routing-Key``, or the body's ``session_id`` / ``user``). One key may carry
several requests at once (a GRPO group's samples sent with one routing key, or ``n > 1``):
each runs as its own gateway session, a *slot* of the key. A new request takes the free slot
whose last context (prompt plus output) shares the longest prefix with its prompt, so each
trajectory's next turn finds the session (and the replica cache) of its previous one; with no
free slot it opens a new one. A request without a key is a session of its own, ended when it
ends. Slots idle for ``ttl_s`` are ended (``expire``), as the SGLang Model Gateway evicts idle
routing keys. Slots of one key share a group (the key, or the client's group header), so that
siblings share the prompt's cache estimate.
"""

from __future__ import annotations

import itertools
from array import array
from dataclasses import dataclass, field

from tailsieve.errors import ConfigError

DEFAULT_TTL_S = 14400.0  # the SGLang Model Gateway's --max-idle-secs default (4 h)


@dataclass(frozen=True, slots=True)
class Lease:
    """A sample's session for one turn."""

    session_id: str  # the gateway session
    group_id: str | None  # its group (siblings share the prompt prefix)
    key: str | None  # the client's key (None: a one-off session)
    slot: int  # index of the slot under the key
    first: bool  # the session's first turn (a new slot)


@dataclass(slots=True)
class _Slot:
    session_id: str
    context: array = field(default_factory=lambda: array("q"))  # prompt + output so far
    running: bool = False
    last_s: float = 0.0


class SessionTable:
    """The client's keys and their slots (see the module docstring)."""

    def __init__(self, ttl_s: float = DEFAULT_TTL_S) -> None:
        if not ttl_s > 0:
            raise ConfigError(f"session ttl_s must be > 0, got {ttl_s}")
        self.ttl_s = ttl_s
        self._keys: dict[str, list[_Slot]] = {}
        self._ids = itertools.count()

    def __len__(self) -> int:
        return sum(len(s) for s in self._keys.values())

    def acquire(self, key: str | None, group: str | None, prompt_ids: tuple[int, ...],
                now_s: float) -> Lease:
        """The session a sample with ``prompt_ids`` runs its turn in (marked running)."""
        if key is None:
            sid = f"anon:{next(self._ids)}"
            return Lease(sid, group, None, 0, True)
        slots = self._keys.setdefault(key, [])
        best, best_len = -1, -1
        prompt = array("q", prompt_ids)
        for i, s in enumerate(slots):
            if not s.running:
                n = _common_prefix(s.context, prompt)
                if n > best_len:
                    best, best_len = i, n
        first = best < 0
        if first:
            slots.append(_Slot(f"key:{key}/{len(slots)}"))
            best = len(slots) - 1
        slot = slots[best]
        slot.running, slot.last_s = True, now_s
        return Lease(slot.session_id, group if group is not None else key, key, best, first)

    def release(self, lease: Lease, context_ids: tuple[int, ...] | None, now_s: float,
                ) -> str | None:
        """The turn of ``lease`` ended with ``context_ids`` (prompt + output; None: it
        failed). Returns the session id to end at the gateway (a one-off session), or None."""
        if lease.key is None:
            return lease.session_id
        slot = self._keys[lease.key][lease.slot]
        slot.running, slot.last_s = False, now_s
        if context_ids is not None:
            slot.context = array("q", context_ids)
        return None

    def expire(self, now_s: float) -> list[str]:
        """End the slots idle for ``ttl_s``; returns their session ids. A key keeps its slots
        while one of them runs (slot indices stay valid for running leases)."""
        gone: list[str] = []
        for key in list(self._keys):
            slots = self._keys[key]
            if any(s.running for s in slots):
                continue
            if all(now_s - s.last_s >= self.ttl_s for s in slots):
                gone += [s.session_id for s in slots]
                del self._keys[key]
        return gone

    def num_running(self) -> int:
        return sum(s.running for slots in self._keys.values() for s in slots)


def _common_prefix(a: array, b: array) -> int:
    """Length of the longest common prefix of two id arrays (compared at C speed)."""
    n = min(len(a), len(b))
    if a[:n] == b[:n]:
        return n
    lo, hi = 0, n - 1  # a[:lo] == b[:lo], a[:hi+1] != b[:hi+1]
    while lo < hi:
        mid = (lo + hi + 1) // 2
        if a[:mid] == b[:mid]:
            lo = mid
        else:
            hi = mid - 1
    return lo
