"""A length-knowing session router (simulator only), to bound what routing can gain.

It is told, at each turn, how many tokens the session will still generate (this turn and
every later one), and keeps for each replica the remaining output of the sessions homed there.
Replica ``r`` is predicted to drain in ``D_r = max(W_r c_r / b_r, w c_r)``: its remaining
tokens ``W_r`` at its aggregate rate ``b_r / c_r`` (``c_r`` the iteration cost at its expected
batch ``b_r``, tool waits counted), but never before its longest session ``w`` finishes alone
at that pace. A first turn goes where ``D_r`` with the session plus its prefill is least; a
later one moves when that lowers the slower of home and destination by more than the extra
prefill (no margin: the lengths are known). It is a reference, not a proven bound: it still
places one turn at a time, greedily.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence

from tailsieve.session.decision import TurnDecision
from tailsieve.session.pricing import TauTables, expected_load
from tailsieve.session.replica_view import ReplicaView
from tailsieve.session.router_base import SessionPolicy, healthy_views
from tailsieve.session.turn import TurnRequest

__all__ = ["LengthOracle"]

Remaining = Callable[[Hashable, int], float]  # (session, turn index) -> tokens left, this turn on


class LengthOracle:
    """Places turns by known remaining output (see the module docstring)."""

    policy = SessionPolicy.ORACLE

    def __init__(self, remaining: Remaining) -> None:
        self._remaining = remaining
        self._home: dict[Hashable, int] = {}
        self._left: dict[Hashable, float] = {}  # session -> tokens left at its last turn
        self._work: dict[int, float] = {}  # replica -> tokens left of its sessions
        self._longest: dict[int, float] = {}  # replica -> most tokens left of one session

    def choose(self, turn: TurnRequest, views: Sequence[ReplicaView],
               elapsed_s: float) -> TurnDecision:
        alive = healthy_views(turn, views)
        left = float(self._remaining(turn.session_id, turn.turn_index))
        home = self._home.get(turn.session_id)
        self._unhome(turn.session_id)
        taus = TauTables(alive, max(expected_load(v, 1.0)[0] for v in alive) + 2.0)
        h = next((i for i, v in enumerate(alive) if v.replica == home), None)

        def drain(i: int, extra: float, add: bool) -> float:
            v = alive[i]
            b, c = expected_load(v, 1.0)
            if home is not None and i == h and v.num_tool_waits > 0:
                b, c = max(b - 1.0, 0.0), max(c - (turn.context_tokens - turn.new_tokens), 0.0)
            work = self._work.get(v.replica, 0.0) + extra
            if add:
                b, c = b + 1.0, c + turn.context_tokens + left / 2.0
            cost = taus.cost(v, b, c)
            longest = max(self._longest.get(v.replica, 0.0), extra)
            return max(work * cost / b, longest * cost) if b > 0 else 0.0

        prefill = [v.config.prefill_cost_s(turn.uncached_on(v.replica),
                                           turn.cached_on(v.replica)) for v in alive]
        if h is None:
            best = min(range(len(alive)), key=lambda i: (drain(i, left, True) + prefill[i],
                                                         alive[i].replica))
            reason = "first" if home is None and turn.home is None else "home-down"
            return self._place(turn, alive[best].replica, left, reason, home, 0.0)
        h_with, h_without = drain(h, left, True), drain(h, 0.0, False)
        best_net, best = 0.0, h
        for i in range(len(alive)):
            if i == h:
                continue
            saving = max(h_with, drain(i, 0.0, False)) - max(h_without, drain(i, left, True))
            net = saving - (prefill[i] - prefill[h])
            if net > best_net:
                best_net, best = net, i
        reason = "stay" if best == h else "move"
        return self._place(turn, alive[best].replica, left, reason, home, best_net)

    def _place(self, turn: TurnRequest, r: int, left: float, reason: str, home: int | None,
               gain: float) -> TurnDecision:
        self._home[turn.session_id] = r
        self._left[turn.session_id] = left
        self._work[r] = self._work.get(r, 0.0) + left
        self._longest[r] = max(self._longest.get(r, 0.0), left)
        return TurnDecision(r, home is not None and r != home, turn.uncached_on(r), gain, reason)

    def _unhome(self, session_id: Hashable) -> None:
        r = self._home.pop(session_id, None)
        if r is not None:
            self._work[r] = max(self._work.get(r, 0.0) - self._left.pop(session_id, 0.0), 0.0)

    def forget(self, session_id: Hashable) -> None:
        self._unhome(session_id)
