"""Mid-turn moves: the checks' settings and the balancer's inputs, built once for the agentic
simulator and every live consumer (the session gateway, verl's router, the proxy).

A mid-turn check asks ``core.balancer.plan_moves`` for moves of running turns. Its inputs:

- one ``ReplicaLoad`` per replica (``move_loads``): its running turns, keyed by the caller,
  with their contexts (the ones that may move); its load counts, beside them, the sessions in
  a tool call whose home it is (they come back to it, as ``place_turn`` counts them); it
  takes moves while healthy and while its KV has room for one more context of its mean size
  (a move into a full replica only preempts another); a replica where requests wait for KV
  space is left out (a turn moved away only lets a queued one in: no gain); with admission by
  KV room, a replica takes no more context than its sessions' reservations leave
  (``KvAdmission.rooms``: a moved turn takes its reservation along, and a replica filled past
  its budget evicts the contexts of its sessions in a tool call);
- the horizon (``move_horizon_s``): the balance settings' remaining step time, at most the
  session horizon (``session_horizon_s``): a moved turn's session stays on its new replica
  for about as many turns as it has run (as ``place_turn`` assumes), each the mean turn
  output at the mean pace of the busy replicas.

The simulator builds the views from its engines, the live side from ``SessionBook``; the
quantities are the same. Pure.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Sequence

from tailsieve.core.balancer import BalanceSettings, ReplicaLoad, Running
from tailsieve.session.pricing import recompute_rate
from tailsieve.session.replica_view import ReplicaView

__all__ = ["AGENTIC_BALANCE", "DEFAULT_TURN_TOKENS", "move_horizon_s", "move_load",
           "move_loads", "session_horizon_s"]

# checks every 5 s (a turn lasts seconds to minutes), 30 s horizon without a step-time
# estimate, a 0.05 s seam per continuation
AGENTIC_BALANCE = BalanceSettings(interval_s=5.0, horizon_s=30.0, seam_s=0.05)
DEFAULT_TURN_TOKENS = 512.0  # a turn's expected output before any turn has ended


def move_load(view: ReplicaView, running: Sequence[tuple[Hashable, int]],
              tau: Callable[[int], float], tool_wait_weight: float = 1.0,
              room_tokens: float = math.inf) -> ReplicaLoad | None:
    """The balancer's load of ``view``'s replica (see the module docstring): ``running``,
    its running turns as ``(key, context tokens)``; ``tau``: its ``tau(b)`` for whole ``b``;
    ``tool_wait_weight``: how much a session in a tool call counts (``SessionSettings``,
    as ``place_turn`` weighs it); ``room_tokens``: the context moves may bring there
    (admission's ``KvAdmission.rooms``). None when requests wait there."""
    if view.num_waiting:
        return None
    cfg = view.config
    n, kv = view.num_running, view.context_tokens
    room = cfg.kv_capacity_tokens is None or n == 0 or kv + kv / n <= cfg.kv_capacity_tokens
    return ReplicaLoad(
        view.replica, n + round(tool_wait_weight * view.num_tool_waits),
        kv + tool_wait_weight * view.tool_wait_context_tokens,
        _const(tuple(running)), tau, cfg.throughput.context_s_per_token,
        recompute_rate(cfg, kv / max(n, 1)), cfg.prefill_s, view.healthy and room,
        room_tokens=room_tokens)


def move_loads(views: Sequence[ReplicaView], running: Sequence[Sequence[tuple[Hashable, int]]],
               taus: Sequence[Callable[[int], float]], tool_wait_weight: float = 1.0,
               rooms: Sequence[float] | None = None) -> list[ReplicaLoad]:
    """``move_load`` of every replica where none waits (``running[r]``, ``taus[r]``,
    ``rooms[r]``: replica ``r``'s; ``rooms`` None: no bound)."""
    out = []
    for v in views:
        ld = move_load(v, running[v.replica], taus[v.replica], tool_wait_weight,
                       math.inf if rooms is None else rooms[v.replica])
        if ld is not None:
            out.append(ld)
    return out


def session_horizon_s(turn_indices: Sequence[int], expected_turn_tokens: float | None,
                      views: Sequence[ReplicaView]) -> float:
    """How long a move made now is expected to keep paying (see the module docstring):
    ``turn_indices``, the index of every running turn; ``expected_turn_tokens``, the mean
    output of the turns ended so far (None or 0: ``DEFAULT_TURN_TOKENS``). 0 with nothing
    running."""
    if not turn_indices:
        return 0.0
    turns = max(sum(turn_indices) / len(turn_indices), 1.0)
    paces = [v.config.throughput.tau(v.num_running)
             + v.config.throughput.context_s_per_token * v.context_tokens
             for v in views if v.num_running]
    if not paces:
        return 0.0
    out = expected_turn_tokens or DEFAULT_TURN_TOKENS
    return turns * out * sum(paces) / len(paces)


def move_horizon_s(settings: BalanceSettings, elapsed_s: float, session_s: float) -> float:
    """The horizon a check prices moves over: the step's remaining time
    (``settings.horizon_at``) at most the session horizon ``session_s``."""
    return min(settings.horizon_at(elapsed_s), session_s)


def _const(items: Running) -> Callable[[], Running]:
    return lambda: items
