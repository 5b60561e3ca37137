"""TailSieve's session routing: stay or move at a turn boundary, priced (pure, one function).

At a turn boundary nothing runs and no seam needs cutting: moving a session costs only the
prefill of the prompt the destination does not hold in its prefix cache (the whole context,
for a replica that never served it) instead of the few new tokens its home prefills.
``place_turn`` weighs that against the time the move saves, reading only what a router knows
then: every replica's running and queued requests, their contexts, the sessions in a tool
call at each replica (they will come back to it), its prefill backlog, the throughput model
and the expected output of a turn (the mean observed so far). It never reads a future length.

The model (``tailsieve.session.pricing``): replica ``r`` with expected batch ``b_r`` and
context ``C_r`` costs ``c_r = tau_r(b_r) + k_r C_r`` seconds per decode iteration, and a
session there advances one token per ``c_r``. Over the expected remaining step time ``H``
(``SessionSettings.horizon_at``) the replica with the highest cost ``c_top`` sets the pace, so
replica ``r`` is predicted to need ``A_r = H c_r / c_top + backlog_r`` more seconds (its
prefill backlog added). The turn adds one session holding its context plus half the expected
output while it decodes. Then, with ``h`` the session's home and ``P_r`` the prefill of the
prompt's uncached part on ``r``:

- **first turn** (or a dead or unknown home): the replica minimizing ``A_r(with the turn) +
  P_r + G_r``, ``G_r`` the tail the session's group siblings already on ``r`` stack there
  (``session.group_price``: co-locate where the prompt's prefill saved outweighs it, else
  spread);
- **later turn**: the move pays only while the session lives, so here ``H`` is at most its
  expected remaining decode time, ``max(t, 1)`` turns of the expected output at home's pace
  for a session at turn ``t`` (a session that ran ``t`` turns is expected to run about as
  many more), and at least one turn. For each other replica ``d``, the saving
  ``S_d = max(A_h(with), A_d) - max(A_h(without), A_d(with))`` (the pair's slower replica
  gets faster) against the move's extra prefill ``X_d = P_d - P_h`` (and the seam). It moves
  to the ``d`` of largest ``S_d - X_d`` among those with ``S_d >= margin X_d + seam`` and
  ``S_d > X_d + seam``; otherwise it stays home. So a move whose predicted saving is below
  ``margin`` times its prefill is never made, and a turn whose home is lighter than every
  other replica never leaves it.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from tailsieve.errors import ReplicaError
from tailsieve.session.decision import TurnDecision
from tailsieve.session.group_price import stack_s
from tailsieve.session.pricing import Loads
from tailsieve.session.replica_view import ReplicaView, ViewTable
from tailsieve.session.settings import SessionSettings
from tailsieve.session.turn import TurnRequest

__all__ = ["place_turn"]


def place_turn(turn: TurnRequest, views: Sequence[ReplicaView], settings: SessionSettings,
               elapsed_s: float, expected_turn_tokens: float | None = None,
               remaining_tokens: float | None = None,
               siblings: Mapping[int, int] | None = None) -> TurnDecision:
    """Where ``turn`` runs (see the module docstring). ``views``: every replica (unhealthy
    ones are never chosen); ``elapsed_s``: seconds since the step began;
    ``expected_turn_tokens``: the mean output of the turns observed so far (None or 0:
    ``settings.turn_tokens``). ``remaining_tokens`` is for the simulator's length-knowing
    oracle only (routers never know it): the tokens the session will still generate, this
    turn on, used instead of the estimate of its remaining life. ``siblings``: replica ->
    running trajectories of the turn's group there (priced at a first turn with
    ``settings.group_price``)."""
    healthy = [v for v in views if v.healthy]
    if not healthy:
        raise ReplicaError(f"no healthy replica for turn {turn.turn_index} of session "
                           f"{turn.session_id!r}")
    out = expected_turn_tokens if expected_turn_tokens and expected_turn_tokens > 0 else (
        settings.turn_tokens)
    w = settings.tool_wait_weight
    home = next((i for i, v in enumerate(healthy) if v.replica == turn.home), None)
    table = views if isinstance(views, ViewTable) else None
    rows = None if table is None or len(healthy) == len(views) else np.flatnonzero(table.healthy)
    loads = Loads(healthy, w, table, rows)
    if home is not None and turn.in_tool_wait and healthy[home].num_tool_waits > 0:
        loads.b[home] = max(loads.b[home] - w, 0.0)  # the session is one of its home's tool
        loads.c[home] = max(loads.c[home] - w * (turn.context_tokens - turn.new_tokens), 0.0)
    without, with_ = loads.costs(turn.context_tokens + out / 2.0)
    if home is None:
        stack = (_stack(healthy, loads, siblings, settings, elapsed_s, len(views))
                 if settings.group_price and siblings else None)
        return _place(turn, healthy, loads, without, with_, settings.horizon_at(elapsed_s),
                      stack)
    h = healthy[home]
    stay = TurnDecision(h.replica, False, turn.uncached_on(h.replica), 0.0, "stay")
    if not settings.moves or len(healthy) < 2:
        return stay
    top = max(float(without.max()), float(with_[home]))  # home's with >= its without
    if top <= 0:
        return stay
    turn_s = out * float(with_[home])  # the turn's expected decode time at home
    life_s = (max(turn.turn_index, 1) * turn_s if remaining_tokens is None
              else remaining_tokens * float(with_[home]))
    horizon = max(min(settings.horizon_at(elapsed_s), life_s), turn_s)
    scale = horizon / top
    lag = loads.backlog_s
    h_with = scale * with_[home] + lag[home]
    h_without = scale * without[home] + lag[home]
    saving = (np.maximum(h_with, scale * without + lag)
              - np.maximum(h_without, scale * with_ + lag))
    saving[home] = -np.inf
    cached = np.zeros(len(healthy))
    for i, v in enumerate(healthy):
        if v.replica in turn.cached_tokens:
            cached[i] = turn.cached_tokens[v.replica]
    prefill = loads.prefill(turn.context_tokens, cached)
    extra = prefill - prefill[home]
    net = saving - extra - settings.seam_s
    ok = (net > 0) & (saving >= settings.move_margin * extra + settings.seam_s)
    best: tuple[float, int, float, float] | None = None  # (net, index, saving, extra)
    if ok.any():
        i = int(np.argmax(np.where(ok, net, -np.inf)))
        best = (float(net[i]), i, float(saving[i]), float(extra[i]))
    if best is None:
        return stay
    dst = healthy[best[1]].replica
    return TurnDecision(dst, True, turn.uncached_on(dst), best[0], "move", best[2], best[3])


def _stack(healthy: list[ReplicaView], loads: Loads, siblings: Mapping[int, int],
           settings: SessionSettings, elapsed_s: float, num_replicas: int) -> np.ndarray:
    """``G_r``: the tail the group's siblings already on each healthy replica stack there."""
    n = np.array([float(siblings.get(v.replica, 0)) for v in healthy])
    return stack_s(n, loads.b + 1.0, settings.horizon_at(elapsed_s), num_replicas,
                   settings.group_share, settings.work_cv)


def _place(turn: TurnRequest, healthy: list[ReplicaView], loads: Loads, without: np.ndarray,
           with_: np.ndarray, horizon: float, stack: np.ndarray | None = None) -> TurnDecision:
    """A first turn (or one whose home is dead or unknown): the replica of least predicted
    time with the turn, its prefill and its group's stacked tail (``stack``) included."""
    top = max(float(without.max()), float(with_.min()))
    scale = horizon / top if top > 0 else 0.0
    cached = np.array([float(turn.cached_tokens.get(v.replica, 0)) for v in healthy])
    prefill = loads.prefill(turn.context_tokens, cached)
    score = scale * with_ + loads.backlog_s + prefill
    if stack is not None:
        score = score + stack
    best = int(np.argmin(score))  # ties: the first (views in replica order)
    r = healthy[best].replica
    reason = "first" if turn.home is None else "home-down"
    return TurnDecision(r, turn.home is not None and r != turn.home, turn.uncached_on(r), 0.0,
                        reason)
