"""llm-d's RL burst mode as a session router (pure): each GRPO group co-located on one
replica, the groups balanced by tokens.

llm-d-router's burst prefix-cache producer (PR #1727) collects the requests that arrive in
one window and, before routing, co-locates those that share a prompt prefix (a GRPO group's
samples) on one replica, so the shared prompt is prefilled once there; a per-replica
fair-share cap (the window's requests over the replicas, rounded up) keeps co-location from
unbalancing the cluster. With ``balanceBy: tokens`` (PR #1978) units are balanced by token
load instead of request count: each unit's prefix is charged once per replica it lands on.

``GroupColocate`` plans a window of first turns that way: units in window order, each whole
on the replica of least token load that has room under the cap; a unit that fits nowhere
whole fills the least-loaded replica with room and carries on with the rest. Without a window
(live, where turns arrive one by one) a group is placed when its first turn arrives, on the
replica of least token load so far. A later turn stays on its session's replica, where the
whole context is cached (llm-d's prefix-cache scorer's pick); a first turn outside the plan,
or one whose replica is down, goes to the least token-loaded healthy replica.
"""

from __future__ import annotations

from collections.abc import Hashable, Sequence

from tailsieve.errors import ConfigError
from tailsieve.session.decision import TurnDecision
from tailsieve.session.replica_view import ReplicaView
from tailsieve.session.router_base import SessionPolicy, decide, healthy_views
from tailsieve.session.turn import TurnRequest

__all__ = ["BurstEntry", "GroupColocate", "plan_window"]

BurstEntry = tuple[Hashable, Hashable, int]  # (session, group, prompt tokens) of a first turn


def plan_window(window: Sequence[BurstEntry], replicas: Sequence[int]) -> tuple[
        dict[Hashable, int], dict[int, float]]:
    """Session -> replica for a window of first turns, and each replica's token load."""
    if not replicas:
        raise ConfigError("a burst plan needs at least one replica")
    units: dict[Hashable, list[BurstEntry]] = {}
    for e in window:
        units.setdefault(e[1], []).append(e)
    cap = -(-len(window) // len(replicas))
    load = dict.fromkeys(replicas, 0.0)
    count = dict.fromkeys(replicas, 0)
    out: dict[Hashable, int] = {}
    for members in units.values():
        tokens = float(max(e[2] for e in members))
        left = list(members)
        while left:
            whole = [r for r in replicas if count[r] + len(left) <= cap]
            room = whole or [r for r in replicas if count[r] < cap] or list(replicas)
            r = min(room, key=lambda x: (load[x], x))
            take = len(left) if whole else max(cap - count[r], 1)
            for e in left[:take]:
                out[e[0]] = r
            load[r] += tokens
            count[r] += take
            left = left[take:]
    return out, load


class GroupColocate:
    """llm-d burst mode: groups co-located, balanced by tokens (see the module docstring)."""

    policy = SessionPolicy.COLOCATE

    def __init__(self, window: Sequence[BurstEntry] | None = None) -> None:
        self._window = list(window) if window is not None else None
        self._plan: dict[Hashable, int] = {}
        self._load: dict[int, float] = {}
        self._group: dict[Hashable, int] = {}  # group -> replica (placed online)
        self._home: dict[Hashable, int] = {}

    def choose(self, turn: TurnRequest, views: Sequence[ReplicaView],
               elapsed_s: float) -> TurnDecision:
        alive = healthy_views(turn, views)
        ids = [v.replica for v in alive]
        if self._window is not None:
            self._plan, self._load = plan_window(self._window, ids)
            self._window = None
        home = self._home.get(turn.session_id, turn.home)
        home_ok = home is not None and home in ids
        if home_ok and home is not None:
            r = home
        elif turn.session_id in self._plan and self._plan[turn.session_id] in ids:
            r = self._plan[turn.session_id]
        elif turn.group_id is not None and self._group.get(turn.group_id) in ids:
            r = self._group[turn.group_id]
        else:
            r = min(ids, key=lambda x: (self._load.get(x, 0.0), x))
            self._load[r] = self._load.get(r, 0.0) + turn.context_tokens
            if turn.group_id is not None:
                self._group[turn.group_id] = r
        self._home[turn.session_id] = r
        return decide(turn, r, home, home_ok)

    def forget(self, session_id: Hashable) -> None:
        self._home.pop(session_id, None)
