"""A length-informed session router (simulator only): TailSieve's decision told the lengths.

It runs ``place_turn`` with the turn's true output as the expected output and the session's
true remaining output (this turn on) as its remaining life, instead of the estimates a real
router has. So it measures what knowing lengths adds to the priced decision. It is a policy,
not a bound: it still places one turn at a time, greedily, and other routers can beat it. The
bound on what any router can reach is ``sim.agentic.bound``.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from tailsieve.session.decision import TurnDecision
from tailsieve.session.group_price import GroupPlacements
from tailsieve.session.priced import place_turn
from tailsieve.session.replica_view import ReplicaView
from tailsieve.session.router_base import SessionPolicy
from tailsieve.session.settings import SessionSettings
from tailsieve.session.turn import TurnRequest

__all__ = ["LengthInformed", "Remaining"]

Remaining = Callable[[Hashable, int], float]  # (session, turn index) -> tokens left, this turn on


class LengthInformed:
    """``place_turn`` with the true lengths (see the module docstring)."""

    policy = SessionPolicy.LENGTH_INFORMED

    def __init__(self, remaining: Remaining, settings: SessionSettings) -> None:
        self._remaining = remaining
        self.settings = settings
        self._groups = GroupPlacements()

    def choose(self, turn: TurnRequest, views: Sequence[ReplicaView],
               elapsed_s: float) -> TurnDecision:
        left = float(self._remaining(turn.session_id, turn.turn_index))
        after = float(self._remaining(turn.session_id, turn.turn_index + 1))
        decision = place_turn(turn, views, self.settings, elapsed_s, max(left - after, 1.0),
                              left, self._groups.siblings(turn.group_id))
        self._groups.placed(turn.session_id, turn.group_id, decision.replica)
        return decision

    def forget(self, session_id: Hashable) -> None:
        self._groups.ended(session_id)
