"""Which gateway session a client's turn belongs to: the one client-to-session table of the
proxy and verl's router (pure: callers pass the time).

A client names a session by a key: the proxy's session header (``X-Session-ID``, SGLang Model
Gateway's ``X-SMG-Routing-Key``) or body field, verl's trajectory ``request_id``. One key may
carry several turns at once (a GRPO group's samples sent with one routing key, ``n > 1``, or
two turns of one verl trajectory): each runs as its own gateway session, a *slot* of the key.
A new turn takes the free slot whose last context (prompt plus output) shares the longest
prefix with its prompt, so each trajectory's next turn finds the session (and the replica
cache) of its previous one; with no free slot it opens a new one. A turn without a key is a
session of its own, ended when it ends.

A slot ends (its id is returned to the caller, who ends it at the gateway) when

- the client says so: ``finish(key)`` (vLLM router's ``/finish_session``) ends the key's
  slots at once, a running one when its turn ends;
- it has been idle for ``ttl_s`` (``expire``; the SGLang Model Gateway evicts idle routing
  keys after 4 h, verl's router uses its ``session_idle_s``);
- more than ``max_sessions`` slots are kept (``expire``: the least recently used idle ones go
  first, as verl's own sticky cache does);
- the caller clears them (``clear_idle``: new weights reset the servers' caches).

A slot with a turn running never ends before the turn does. Session ids are
``<key>.<serial>`` and never reused, so the gateway's piece ids stay unique. A slot's group
(siblings share the prompt's cache estimate) is the ``group`` given with its first turn, else
its key.
"""

from __future__ import annotations

import itertools
from array import array
from collections import OrderedDict
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from tailsieve.errors import ConfigError

__all__ = ["DEFAULT_TTL_S", "ClientSessions", "Lease"]

DEFAULT_TTL_S = 14400.0  # the SGLang Model Gateway's --max-idle-secs default (4 h)


@dataclass(frozen=True, slots=True)
class Lease:
    """A turn's session."""

    session_id: str  # the gateway session
    group_id: Hashable | None  # its group (siblings share the prompt prefix)
    key: str | None  # the client's key (None: a one-off session)
    first: bool  # the session's first turn (a new slot)


@dataclass(slots=True)
class _Slot:
    key: str
    group: Hashable | None
    context: array = field(default_factory=lambda: array("q"))  # prompt + output so far
    running: bool = False
    finished: bool = False  # the client finished its key: ends when its turn does
    last_s: float = 0.0  # when its last turn began or ended


class ClientSessions:
    """The clients' keys and their slots (see the module docstring)."""

    def __init__(self, ttl_s: float = DEFAULT_TTL_S, max_sessions: int | None = None) -> None:
        if not ttl_s > 0:
            raise ConfigError(f"session ttl_s must be > 0, got {ttl_s}")
        if max_sessions is not None and max_sessions < 1:
            raise ConfigError(f"max_sessions must be >= 1, got {max_sessions}")
        self.ttl_s = ttl_s
        self.max_sessions = max_sessions
        self._slots: dict[str, _Slot] = {}
        self._idle: OrderedDict[str, None] = OrderedDict()  # slots without a running turn,
        # least recently used first (``expire`` reads only these: O(1) a turn at scale)
        self._keys: dict[str, list[str]] = {}  # key -> its slots' session ids
        self._serial = itertools.count()

    def __len__(self) -> int:
        return len(self._slots)

    def num_running(self) -> int:
        return len(self._slots) - len(self._idle)

    def needs_prompt(self, key: str | None) -> bool:
        """Whether ``acquire`` for ``key`` reads the prompt: more than one of its slots is
        free, and the prompt's shared prefix picks one (else any prompt takes the same)."""
        if key is None:
            return False
        free = 0
        for sid in self._keys.get(key, ()):
            s = self._slots[sid]
            free += not s.running and not s.finished
        return free > 1

    def acquire(self, key: str | None, group: Hashable | None, prompt_ids: Sequence[int],
                now_s: float) -> Lease:
        """The session a turn with ``prompt_ids`` runs in (marked running)."""
        if key is None:
            return Lease(f"anon.{next(self._serial)}", group, None, True)
        sids = self._keys.setdefault(key, [])
        prompt = array("q", prompt_ids)
        best, best_len = None, -1
        for sid in sids:
            s = self._slots[sid]
            if not s.running and not s.finished:
                n = _common_prefix(s.context, prompt)
                if n > best_len:
                    best, best_len = sid, n
        first = best is None
        if best is None:
            best = f"{key}.{next(self._serial)}"
            self._slots[best] = _Slot(key, group if group is not None else key)
            sids.append(best)
        slot = self._slots[best]
        slot.running, slot.last_s = True, now_s
        self._idle.pop(best, None)
        return Lease(best, slot.group, key, first)

    def release(self, lease: Lease, context_ids: Sequence[int] | None, now_s: float,
                ) -> str | None:
        """The turn of ``lease`` ended with ``context_ids`` (prompt + output; None: it
        failed). Returns the session id to end at the gateway (a one-off session, or a slot
        whose key was finished while it ran), or None."""
        if lease.key is None:
            return lease.session_id
        slot = self._slots.get(lease.session_id)
        if slot is None:
            return None
        slot.running, slot.last_s = False, now_s
        if context_ids is not None:
            slot.context = array("q", context_ids)
        if slot.finished:
            self._forget(lease.session_id)
            return lease.session_id
        self._idle[lease.session_id] = None
        self._idle.move_to_end(lease.session_id)
        return None

    def finish(self, key: str) -> list[str]:
        """The client ended ``key``: its idle slots end now (their ids), a running one when
        its turn ends (``release`` returns it). An unknown key ends nothing."""
        out: list[str] = []
        for sid in list(self._keys.get(key, ())):
            s = self._slots[sid]
            if s.running:
                s.finished = True
            else:
                out.append(sid)
                self._forget(sid)
        return out

    def expire(self, now_s: float) -> list[str]:
        """End the slots idle for ``ttl_s`` and, beyond ``max_sessions``, the least recently
        used idle ones; returns their session ids."""
        out: list[str] = []
        excess = len(self._slots) - (self.max_sessions or len(self._slots))
        for sid in self._idle:
            if excess > 0 or now_s - self._slots[sid].last_s >= self.ttl_s:
                out.append(sid)
                excess -= 1
            else:
                break  # ordered by last use: the rest are younger
        for sid in out:
            self._forget(sid)
        return out

    def clear_idle(self) -> list[str]:
        """End every slot without a running turn; their session ids."""
        out = list(self._idle)
        for sid in out:
            self._forget(sid)
        return out

    def _forget(self, sid: str) -> None:
        s = self._slots.pop(sid)
        self._idle.pop(sid, None)
        sids = self._keys[s.key]
        sids.remove(sid)
        if not sids:
            del self._keys[s.key]


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
