"""The session routers of issue 33 item 3 and TailSieve's, behind one interface.

``make_router(policy)`` builds a fresh router (one per rollout: sticky routers keep state).
Baselines follow the code users run (``tailsieve.session.sticky``,
``tailsieve.session.cache_aware``); ``TailSieveRouter`` calls ``place_turn``;
``VerlRebalance`` is verl's ``rebalance_requests`` (``session.rebalance``) and
``GroupColocate`` llm-d's burst-mode group co-location (``session.colocate``);
``LengthInformed`` is the simulator's length-informed placement (a policy, not a bound: the
bound is ``sim.agentic.bound``).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from typing import Any

import numpy as np

from tailsieve.errors import ConfigError
from tailsieve.session.cache_aware import CacheAware
from tailsieve.session.colocate import GroupColocate
from tailsieve.session.decision import TurnDecision
from tailsieve.session.group_price import GroupPlacements
from tailsieve.session.length_informed import LengthInformed
from tailsieve.session.priced import place_turn
from tailsieve.session.rebalance import VerlRebalance
from tailsieve.session.remaining import RemainingWork
from tailsieve.session.replica_view import ReplicaView
from tailsieve.session.router_base import SessionPolicy, SessionRouter
from tailsieve.session.settings import SessionSettings
from tailsieve.session.sticky import (
    AffinityMargin,
    ImbalanceRepin,
    StickyLeastLoaded,
    TurnRoundRobin,
    VerlSticky,
)
from tailsieve.session.turn import TurnRequest

__all__ = ["SessionPolicy", "SessionRouter", "TailSieveRouter", "make_router", "parse_policy"]


class TailSieveRouter:
    """``place_turn`` at every turn (stateless beyond its settings)."""

    policy = SessionPolicy.TAILSIEVE

    def __init__(self, settings: SessionSettings,
                 expected_turn_tokens: Callable[[], float | None] | None = None,
                 remaining_work: RemainingWork | None = None) -> None:
        self.settings = settings
        self._expected = expected_turn_tokens  # e.g. ``lambda: book.expected_turn_tokens``
        self._remaining = remaining_work  # the step's estimate of each session's remaining
        # output (``session.remaining``): prices a move over the session's expected life
        self._groups = GroupPlacements()  # where each group's siblings run (its own record)

    def choose(self, turn: TurnRequest, views: Sequence[ReplicaView],
               elapsed_s: float) -> TurnDecision:
        expected = self._expected() if self._expected is not None else None
        left = None
        if self._remaining is not None and turn.turn_index > 0:
            self._remaining.start(turn.session_id, turn.group_id)
            left = self._remaining.tokens_left(turn.session_id)
        decision = place_turn(turn, views, self.settings, elapsed_s, expected, left,
                              self._groups.siblings(turn.group_id))
        self._groups.placed(turn.session_id, turn.group_id, decision.replica)
        return decision

    def forget(self, session_id: Hashable) -> None:
        self._groups.ended(session_id)


def parse_policy(policy: SessionPolicy | str) -> SessionPolicy:
    """A policy by value (``"verl-sticky"``, ...) with a clear error for an unknown one
    (``"oracle"``: the former name of ``length-informed``)."""
    if policy == "oracle":
        policy = SessionPolicy.LENGTH_INFORMED
    try:
        return SessionPolicy(policy)
    except ValueError:
        names = ", ".join(p.value for p in SessionPolicy)
        raise ConfigError(f"unknown session policy {policy!r}; choose one of {names}") from None


_KW: dict[SessionPolicy, frozenset[str]] = {
    SessionPolicy.VERL: frozenset(),
    SessionPolicy.STICKY_LEAST_LOADED: frozenset(),
    SessionPolicy.CACHE_AWARE: frozenset({"cache_threshold", "balance_abs_threshold",
                                          "balance_rel_threshold"}),
    SessionPolicy.MARGIN: frozenset({"margin"}),
    SessionPolicy.REPIN: frozenset({"balance_abs_threshold", "balance_rel_threshold"}),
    SessionPolicy.ROUND_ROBIN: frozenset(),
    SessionPolicy.REBALANCE: frozenset({"max_rebalances", "min_running"}),
    SessionPolicy.COLOCATE: frozenset({"window"}),
    SessionPolicy.LENGTH_INFORMED: frozenset({"remaining"}),
    SessionPolicy.TAILSIEVE: frozenset({"expected_turn_tokens", "remaining_work"}),
}


def make_router(policy: SessionPolicy | str, settings: SessionSettings | None = None,
                rng: np.random.Generator | None = None, **kw: Any) -> SessionRouter:
    """A fresh router for ``policy``. ``settings``: TailSieve's (default
    ``SessionSettings()``); ``rng``: ties of verl's routers (default seed 0). Keyword
    options: ``cache_threshold``, ``balance_abs_threshold``, ``balance_rel_threshold``
    (cache-aware, verl-repin), ``margin`` (affinity-margin), ``max_rebalances``,
    ``min_running`` (verl-rebalance), ``window`` (group-colocate: the burst of first turns as
    ``(session, group, prompt tokens)``), ``remaining`` (length-informed: a
    callable ``(session_id, turn_index) -> tokens the session still generates, this turn
    on`` (0 past its last turn); required), ``expected_turn_tokens`` (tailsieve: a callable returning the mean turn
    output observed so far, or None), ``remaining_work`` (tailsieve: the step's
    ``session.remaining.RemainingWork``, fed by the caller; a move is then priced over the session's
    estimated remaining output instead of "as many turns again")."""
    p = parse_policy(policy)
    extra = set(kw) - _KW[p]
    if extra:
        raise ConfigError(f"session policy {p.value} takes no option {', '.join(sorted(extra))}")
    gen = rng if rng is not None else np.random.default_rng(0)
    if p is SessionPolicy.VERL:
        return VerlSticky(gen)
    if p is SessionPolicy.STICKY_LEAST_LOADED:
        return StickyLeastLoaded()
    if p is SessionPolicy.CACHE_AWARE:
        return CacheAware(**kw)
    if p is SessionPolicy.MARGIN:
        return AffinityMargin(gen, **kw)
    if p is SessionPolicy.REPIN:
        return ImbalanceRepin(gen, **kw)
    if p is SessionPolicy.ROUND_ROBIN:
        return TurnRoundRobin()
    if p is SessionPolicy.REBALANCE:
        return VerlRebalance(gen, **kw)
    if p is SessionPolicy.COLOCATE:
        return GroupColocate(**kw)
    if p is SessionPolicy.LENGTH_INFORMED:
        if "remaining" not in kw:
            raise ConfigError("the length-informed session policy needs remaining=(session, "
                              "turn) -> tokens left (the simulator passes it)")
        return LengthInformed(kw["remaining"], settings or SessionSettings())
    return TailSieveRouter(settings or SessionSettings(), kw.get("expected_turn_tokens"),
                           kw.get("remaining_work"))
