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
  P_r``;
- **later turn**: for each other replica ``d``, the saving
  ``S_d = max(A_h(with), A_d) - max(A_h(without), A_d(with))`` (the pair's slower replica
  gets faster) against the move's extra prefill ``X_d = P_d - P_h`` (and the seam). It moves
  to the ``d`` of largest ``S_d - X_d`` among those with ``S_d >= margin X_d + seam`` and
  ``S_d > X_d + seam``; otherwise it stays home. So a move whose predicted saving is below
  ``margin`` times its prefill is never made, and a turn whose home is lighter than every
  other replica never leaves it.
"""

from __future__ import annotations

from collections.abc import Sequence

from tailsieve.errors import ReplicaError
from tailsieve.session.decision import TurnDecision
from tailsieve.session.pricing import TauTables, backlog_s, expected_load
from tailsieve.session.replica_view import ReplicaView
from tailsieve.session.settings import SessionSettings
from tailsieve.session.turn import TurnRequest

__all__ = ["place_turn"]


def place_turn(turn: TurnRequest, views: Sequence[ReplicaView], settings: SessionSettings,
               elapsed_s: float, expected_turn_tokens: float | None = None) -> TurnDecision:
    """Where ``turn`` runs (see the module docstring). ``views``: every replica (unhealthy
    ones are never chosen); ``elapsed_s``: seconds since the step began;
    ``expected_turn_tokens``: the mean output of the turns observed so far (None:
    ``settings.turn_tokens``)."""
    healthy = [v for v in views if v.healthy]
    if not healthy:
        raise ReplicaError(f"no healthy replica for turn {turn.turn_index} of session "
                           f"{turn.session_id!r}")
    out = expected_turn_tokens if expected_turn_tokens and expected_turn_tokens > 0 else (
        settings.turn_tokens)
    w = settings.tool_wait_weight
    home = next((i for i, v in enumerate(healthy) if v.replica == turn.home), None)
    bases = [expected_load(v, w) for v in healthy]
    if home is not None and healthy[home].num_tool_waits > 0:
        b, c = bases[home]  # the session is one of its home's tool waits: take it out
        bases[home] = (max(b - w, 0.0), max(c - w * (turn.context_tokens - turn.new_tokens), 0.0))
    taus = TauTables(healthy, max(b for b, _ in bases) + 1.0)
    add = turn.context_tokens + out / 2.0
    without = [taus.cost(v, b, c) for v, (b, c) in zip(healthy, bases, strict=True)]
    with_ = [taus.cost(v, b + 1.0, c + add) for v, (b, c) in zip(healthy, bases, strict=True)]
    lag = [backlog_s(v) for v in healthy]
    prefill = [v.config.prefill_cost_s(turn.uncached_on(v.replica), turn.cached_on(v.replica))
               for v in healthy]
    if home is None:
        top = max(max(without), min(with_))
        horizon = settings.horizon_at(elapsed_s)
        scale = horizon / top if top > 0 else 0.0
        best = min(range(len(healthy)),
                   key=lambda i: (scale * with_[i] + lag[i] + prefill[i], healthy[i].replica))
        reason = "first" if turn.home is None else "home-down"
        chosen = healthy[best]
        return TurnDecision(chosen.replica, turn.home is not None and chosen.replica != turn.home,
                            turn.uncached_on(chosen.replica), 0.0, reason)
    stay = TurnDecision(healthy[home].replica, False, turn.uncached_on(healthy[home].replica),
                        0.0, "stay")
    if not settings.moves or len(healthy) < 2:
        return stay
    top = max(max(without[:home] + without[home + 1:], default=0.0), with_[home])
    if top <= 0:
        return stay
    horizon = max(settings.horizon_at(elapsed_s), out * with_[home])
    scale = horizon / top
    h_with = scale * with_[home] + lag[home]
    h_without = scale * without[home] + lag[home]
    best_net, best_i, best_saving, best_extra = 0.0, -1, 0.0, 0.0
    for i in range(len(healthy)):
        if i == home:
            continue
        d_without = scale * without[i] + lag[i]
        d_with = scale * with_[i] + lag[i]
        saving = max(h_with, d_without) - max(h_without, d_with)
        extra = prefill[i] - prefill[home]
        net = saving - extra - settings.seam_s
        if net <= best_net or saving < settings.move_margin * extra + settings.seam_s:
            continue
        best_net, best_i, best_saving, best_extra = net, i, saving, extra
    if best_i < 0:
        return stay
    dst = healthy[best_i].replica
    return TurnDecision(dst, True, turn.uncached_on(dst), best_net, "move", best_saving,
                        best_extra)
