"""Session routing for multi-turn (agentic) rollouts: one pure core for the simulator, the
live runtime, verl's router plug-in and the HTTP proxy.

- ``TurnRequest`` / ``ReplicaView``: what a router knows at a turn (never a future length);
- ``place_turn``: TailSieve's priced stay-or-move decision (``priced``);
- ``make_router`` / ``SessionPolicy``: the routers users run today, and TailSieve's;
- ``PrefixCacheModel``: per-replica LRU prefix caches in tokens;
- ``SessionBook``: the live bookkeeping that turns events into views and balancer loads.

Imports only ``model``, ``core``, ``workload`` and ``errors``.
"""

from tailsieve.session.book import SessionBook
from tailsieve.session.cache_model import PrefixCacheModel
from tailsieve.session.decision import TurnDecision
from tailsieve.session.priced import place_turn
from tailsieve.session.replica_view import ReplicaView
from tailsieve.session.routers import (
    SessionPolicy,
    SessionRouter,
    TailSieveRouter,
    make_router,
    parse_policy,
)
from tailsieve.session.settings import SessionSettings
from tailsieve.session.turn import TurnRequest

__all__ = [
    "PrefixCacheModel",
    "ReplicaView",
    "SessionBook",
    "SessionPolicy",
    "SessionRouter",
    "SessionSettings",
    "TailSieveRouter",
    "TurnDecision",
    "TurnRequest",
    "make_router",
    "parse_policy",
    "place_turn",
]
