"""Per-replica prefix caches, in tokens, as a router (or the simulator) models them.

A replica's prefix cache (vLLM's automatic prefix caching, SGLang's radix cache) keeps the KV
of prompts it served until the space is needed, least recently used first. For sessions that
is two kinds of prefix:

- a *group prompt* (``group_id``): the prompt a GRPO group's trajectories share;
- a *session context* (``session_id``): the prompt of a session's last turn there, plus what
  that turn generated; the next turn's prompt starts with it.

A session's context counts ``context - prompt`` tokens of its own (the prompt's blocks are
its group's, shared). A prefix match stops at the first missing block, so when a group prompt
is evicted, its sessions' contexts on that replica go with it. Capacity is in tokens (the KV
budget, ``ReplicaConfig.kv_capacity_tokens``, less what the running requests hold: callers
lower it with ``set_capacity``); None is unbounded. Pure bookkeeping: no clock, no I/O.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Hashable, Sequence

from tailsieve.errors import ConfigError

__all__ = ["PrefixCacheModel"]

_Key = tuple[str, Hashable]  # ("g", group_id) or ("s", session_id)


class _Replica:
    """One replica's LRU of prefixes."""

    __slots__ = ("capacity", "entries", "index", "prompts", "replica", "used")

    def __init__(self, replica: int, capacity: int | None,
                 index: dict[_Key, set[int]]) -> None:
        self.replica = replica
        self.capacity = capacity
        self.entries: OrderedDict[_Key, int] = OrderedDict()  # key -> tokens it holds alone
        self.prompts: dict[Hashable, tuple[Hashable, int]] = {}  # session -> (group, prompt)
        self.used = 0
        self.index = index  # shared: key -> replicas holding it

    def add(self, key: _Key, tokens: int) -> None:
        self.entries[key] = tokens
        self.used += tokens
        self.index.setdefault(key, set()).add(self.replica)

    def drop(self, key: _Key) -> None:
        n = self.entries.pop(key, None)
        if n is None:
            return
        self.used -= n
        where = self.index.get(key)
        if where is not None:
            where.discard(self.replica)
            if not where:
                del self.index[key]
        if key[0] == "s":
            self.prompts.pop(key[1], None)
        else:  # a group prompt: its sessions' contexts no longer match past it
            orphans = [s for s, (g, _) in self.prompts.items() if g == key[1]]
            for s in orphans:
                self.drop(("s", s))

    def clear(self) -> None:
        for key in list(self.entries):
            self.drop(key)

    def evict(self) -> None:
        cap = self.capacity
        if cap is None:
            return
        while self.used > cap and self.entries:
            self.drop(next(iter(self.entries)))


class PrefixCacheModel:
    """Per replica, an LRU of cached prefixes in tokens (capacity from the KV budget): a
    session's context (prompt + turns so far) and its group's shared prompt."""

    def __init__(self, capacity_tokens: Sequence[int | None]) -> None:
        for r, cap in enumerate(capacity_tokens):
            if cap is not None and cap < 0:
                raise ConfigError(f"prefix cache of replica {r}: capacity must be >= 0, "
                                  f"got {cap}")
        self._index: dict[_Key, set[int]] = {}  # key -> replicas holding it
        self._reps = [_Replica(r, cap, self._index) for r, cap in enumerate(capacity_tokens)]
        self.num_evictions = 0  # prefixes evicted for space (all replicas)

    @property
    def num_replicas(self) -> int:
        return len(self._reps)

    def _rep(self, replica: int) -> _Replica:
        if not 0 <= replica < len(self._reps):
            raise ConfigError(f"prefix cache has no replica {replica} "
                              f"(replicas 0..{len(self._reps) - 1})")
        return self._reps[replica]

    def cached(self, replica: int, session_id: Hashable, group_id: Hashable | None,
               context_tokens: int) -> int:
        """Leading tokens of a prompt of ``context_tokens`` tokens (the session's current
        context) that ``replica`` holds."""
        rep = self._rep(replica)
        got = rep.prompts.get(session_id)
        if got is not None:
            prompt = got[1]
            own = rep.entries.get(("s", session_id), 0)
            return min(context_tokens, prompt + own)
        if group_id is not None:
            shared = rep.entries.get(("g", group_id))
            if shared is not None:
                return min(context_tokens, shared)
        return 0

    def cached_on(self, session_id: Hashable, group_id: Hashable | None,
                  context_tokens: int) -> dict[int, int]:
        """``{replica: cached(replica, ...)}`` over the replicas holding some of it."""
        where = set(self._index.get(("s", session_id), ()))
        if group_id is not None:
            where |= self._index.get(("g", group_id), set())
        out: dict[int, int] = {}
        for r in sorted(where):
            n = self.cached(r, session_id, group_id, context_tokens)
            if n > 0:
                out[r] = n
        return out

    def insert(self, replica: int, session_id: Hashable, group_id: Hashable | None,
               prompt_tokens: int, context_tokens: int) -> None:
        """``replica`` now holds the session's context of ``context_tokens`` tokens, whose
        first ``prompt_tokens`` are its group's prompt (most recently used); older prefixes
        are evicted past the capacity."""
        if not 0 <= prompt_tokens <= context_tokens:
            raise ConfigError(f"prefix cache insert {session_id!r}: need 0 <= prompt_tokens "
                              f"<= context_tokens, got {prompt_tokens} and {context_tokens}")
        rep = self._rep(replica)
        group = group_id if group_id is not None else ("session", session_id)
        gkey: _Key = ("g", group)
        skey: _Key = ("s", session_id)
        if gkey in rep.entries:
            rep.entries.move_to_end(gkey)
            if rep.entries[gkey] != prompt_tokens:
                rep.used += prompt_tokens - rep.entries[gkey]
                rep.entries[gkey] = prompt_tokens
        else:
            rep.add(gkey, prompt_tokens)
        rep.used -= rep.entries.pop(skey, 0)
        rep.add(skey, context_tokens - prompt_tokens)
        rep.prompts[session_id] = (group, prompt_tokens)
        before = len(rep.entries)
        rep.evict()
        self.num_evictions += max(0, before - len(rep.entries))

    def release(self, replica: int, session_id: Hashable) -> None:
        """The session's own context leaves ``replica``'s cache (its turn runs there now and
        holds those blocks, or the caller knows them gone); its group's prompt stays."""
        self._rep(replica).drop(("s", session_id))

    def discard(self, session_id: Hashable) -> None:
        """The session ended: its contexts leave every cache (their space is free again)."""
        for rep in self._reps:
            rep.drop(("s", session_id))

    def set_capacity(self, replica: int, capacity_tokens: int | None) -> None:
        """``replica``'s cache may now hold ``capacity_tokens`` (e.g. the KV budget less what
        its running requests hold); evicts down to it."""
        rep = self._rep(replica)
        rep.capacity = None if capacity_tokens is None else max(int(capacity_tokens), 0)
        before = len(rep.entries)
        rep.evict()
        self.num_evictions += max(0, before - len(rep.entries))

    def used_tokens(self, replica: int) -> int:
        """Tokens ``replica``'s cache holds."""
        return self._rep(replica).used

    def drop_replica(self, replica: int) -> None:
        """A replica died or restarted: its cache is empty."""
        self._rep(replica).clear()
