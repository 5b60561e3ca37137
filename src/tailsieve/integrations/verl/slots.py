"""verl's server ids on the gateway's fixed replica slots.

The session gateway has a fixed number of replicas; verl adds and removes servers while it
runs (fully-async and separate-async trainers move hybrid replicas in and out of the pool,
``LLMServerManager.create_empty`` starts with none). Each server id gets a slot for good: a
server removed and added again returns to its slot (with an empty cache estimate).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from tailsieve.errors import ConfigError


class ServerSlots:
    """Server ids to replica slots (``num_slots`` of them)."""

    def __init__(self, num_slots: int) -> None:
        if num_slots < 1:
            raise ConfigError(f"num_slots must be >= 1, got {num_slots}")
        self.num_slots = num_slots
        self._slot: dict[str, int] = {}  # every id ever seen
        self._ids: list[str | None] = [None] * num_slots
        self.handles: list[Any | None] = [None] * num_slots  # None: not in the pool now

    def add(self, servers: Mapping[str, Any]) -> list[int]:
        """Put ``servers`` (id -> actor handle) in the pool; their slots."""
        out = []
        for sid, handle in servers.items():
            slot = self._slot.get(sid)
            if slot is None:
                if len(self._slot) >= self.num_slots:
                    raise ConfigError(f"server {sid!r}: all {self.num_slots} slots are taken "
                                      "(raise max_servers in the router YAML)")
                slot = len(self._slot)
                self._slot[sid] = slot
                self._ids[slot] = sid
            self.handles[slot] = handle
            out.append(slot)
        return out

    def remove(self, server_ids: list[str]) -> list[int]:
        """Take ``server_ids`` out of the pool; the slots they held (unknown ids ignored)."""
        out = []
        for sid in server_ids:
            slot = self._slot.get(sid)
            if slot is not None and self.handles[slot] is not None:
                self.handles[slot] = None
                out.append(slot)
        return out

    def active(self) -> list[str]:
        """Ids in the pool, in slot order."""
        return [sid for sid, h in zip(self._ids, self.handles, strict=True)
                if sid is not None and h is not None]

    def id_of(self, slot: int) -> str | None:
        return self._ids[slot]

    def slot_of(self, server_id: str) -> int | None:
        return self._slot.get(server_id)

    def in_pool(self, slot: int) -> bool:
        return self.handles[slot] is not None
