"""Event-driven step simulation with moves by continuation (the balancer at work).

Like ``sim.eventpath`` (one ``ReplicaEngine`` per replica, time from event to event), plus
re-balance checks: every ``BalanceSettings.interval_s`` (and at a completion when half an
interval has passed since the last check) every replica is advanced to the moment, the pure
balancer (``core.balancer.plan_moves``, in decisions of a few moves: ``core.balance_check``)
is asked for moves (in the drain, once ``BalanceSettings.drain`` says it has begun, the LPT
rule of ``core.drain_plan`` instead), and each move is applied:

- the response stops on its replica ``A`` with ``g`` tokens generated there (a *piece*);
- after the seam (``seam_s``: round trip + one scheduling iteration) it continues on ``B`` as a
  new piece whose prompt is its prompt plus every token generated so far, asking for the
  remaining tokens; ``B`` prefills the uncached part of that prefix at the recompute rate
  (``ReplicaEngine.submit(..., cached_tokens=, continuation=True)``).

Bounded pieces (``PieceSettings``, what the live runtime does to know where a response
stands): a response runs as pieces of at most ``piece_tokens``; at each piece end it leaves its
replica for ``seam_s`` (the round trip) and continues there with its prefix cached. A move then
either waits for the running piece to end (``defer_moves``: nothing is lost, the move takes
effect up to one piece later) or happens at once and keeps only the tokens up to the last piece
end (the running piece is decoded again, unless ``keeps_running_piece``: streaming); a move
that drops a piece is skipped when its predicted gain does not cover the piece's age, as the
live rebalancer does.

Prefix cache: a replica keeps the prefix of every response that left it (a response continued
where it ran before only prefills what it generated since), and the prompt of every group it
was dealt (spread siblings share it). Eviction is not modelled.

A delivered response is the chain of its pieces: contiguous token ranges that add up to its
length. Exactly-once and whole groups are kept as in ``eventpath``: the cutoff aborts unchosen
fresh groups wherever their pieces are (running, waiting or in transit).
"""

from __future__ import annotations

import heapq
import math
from collections.abc import Callable, Sequence

import numpy as np

from tailsieve.core.balance_check import plan_check
from tailsieve.core.balance_trace import DEFERRED, MADE, SKIPPED, BalanceTrace, MoveRecord
from tailsieve.core.balancer import BalanceSettings, Move, ReplicaLoad
from tailsieve.core.drain import engine_priority
from tailsieve.core.drain_plan import drain_decisions
from tailsieve.model.replica_engine import Completion, ReplicaConfig, ReplicaEngine
from tailsieve.sim.layout import RequestLayout, SimResult, choose_fresh
from tailsieve.sim.move_state import StepResponses, cost_models, replica_loads, repriced
from tailsieve.sim.pieces import MoveStats, Piece, PieceSettings

__all__ = ["MoveSimulation", "MoveStats", "Piece", "PieceSettings", "cost_models",
           "replica_loads", "simulate_with_moves"]

Arrival = tuple[float, int, int, int, bool]  # (time, order, request, replica, after a move)


class MoveSimulation:
    """One plan simulated with re-balancing: the step's state, and one handler per event.

    Events, in the order ``run`` meets them: a response's next piece arrives on its replica
    (``on_arrivals``: after a seam or a move); a re-balance check is due (``on_check``); a
    replica completes pieces (``on_completions``, which hands each to ``_on_piece_end`` or
    ``_on_response_done``). The cutoff (``on_cutoff``) follows whichever event completed the
    ``k``-th fresh group. ``simulate_with_moves`` documents the arguments."""

    def __init__(self, layout: RequestLayout, configs: Sequence[ReplicaConfig], k: int,
                 balance: BalanceSettings, keep_pieces: bool = False,
                 tail_replicas: Sequence[int] = (), pieces: PieceSettings | None = None,
                 trace: BalanceTrace | None = None,
                 draft_factor: Callable[[int, int, int], float] | None = None) -> None:
        self.layout, self.configs, self.k, self.balance = layout, configs, k, balance
        self.pieces, self.trace, self.draft_factor = pieces, trace, draft_factor
        nreq = int(layout.lengths.size)
        self.drain = balance.drain
        self.remaining = None if self.drain is None else self.drain.remaining_model()
        by_priority = self.drain is not None and self.drain.priority
        self.engines = [ReplicaEngine(c, priority=by_priority) for c in configs]
        self.models = cost_models(configs, frozenset(tail_replicas), nreq + 2)
        self.defer = pieces is not None and pieces.defer_moves and not pieces.keeps_running_piece
        self.drops = pieces is not None and not pieces.keeps_running_piece and not self.defer
        st = self.state = StepResponses(layout, len(configs),
                                        pieces.piece_tokens if pieces is not None else None,
                                        keep_pieces, self.drops)
        self.stats = MoveStats(pieces=st.chains)
        self.done = np.full(nreq, np.inf)  # per request: completion time
        self.left = np.full(layout.num_groups, layout.group_size, dtype=np.int64)  # unfinished
        self.group_done = np.full(layout.num_groups, np.inf)  # per group: completion time
        self.pending: list[Arrival] = []  # pieces on their way to a replica (a heap)
        self.seq = 0  # arrivals pushed so far (orders equal times)
        self.fresh_done = 0  # fresh groups complete
        self.finished = 0  # responses complete
        self.chosen: np.ndarray | None = None  # per group: delivered (set at the cutoff)
        self.cutoff_s = 0.0
        for r, idx in enumerate(layout.replica_requests):
            for i in idx.tolist():
                self.engines[r].submit((i, 0), st.piece_len(i), st.prompt_tokens[i])

    def run(self) -> tuple[SimResult, MoveStats]:
        """Simulate the step to its end: every replica idle and no piece on its way."""
        bal = self.balance
        if self.k == 0:
            self.on_cutoff(0.0)
        t_check, last_check, half = bal.interval_s, 0.0, bal.interval_s / 2.0
        while True:
            t_eng, r_eng = self._next_engine_event()
            t_pend = self.pending[0][0] if self.pending else math.inf
            if math.isinf(t_eng) and math.isinf(t_pend):
                break
            if t_pend <= t_eng and t_pend <= t_check:
                t = t_pend
                self.on_arrivals(t)
            elif t_check < t_eng:
                t = t_check
                self._advance_all(t)
                self._cut_if_due(t)
                self.on_check(t)
                last_check = t
                t_check += bal.interval_s
            else:
                t = t_eng
                finished = self.finished
                self.on_completions(self.engines[r_eng].pop_next())
                self._cut_if_due(t)
                if self.finished > finished and t - last_check >= half:  # a check follows a
                    self._advance_all(t)  # completion, at most one per half interval
                    self.on_check(t)
                    last_check = t
                    t_check = t + bal.interval_s
                continue
            self._cut_if_due(t)
        return self._result(), self.stats

    # -- events ------------------------------------------------------------------------------

    def on_completions(self, comps: list[Completion]) -> None:
        """Pieces ended: each either finishes its response or ends a bounded piece."""
        st = self.state
        for c in comps:
            i = c.request_id[0]  # type: ignore[index]
            r = st.cur[i]
            st.ran(i, r, c.num_tokens)
            dst = st.redirect.pop(i, r)
            if st.done_prev[i] < st.lengths[i]:
                self._on_piece_end(i, r, dst, c.time_s)
            else:
                self._on_response_done(i, c.time_s)

    def _on_piece_end(self, i: int, r: int, dst: int, t: float) -> None:
        """A bounded piece of request ``i`` ended on ``r``: its next piece goes to ``dst``
        (``r``, unless a deferred move bound it elsewhere) after the seam."""
        assert self.pieces is not None
        self.state.left(i, r)
        wait = self.balance.seam_s if dst != r else self.pieces.seam_s
        self._send(i, dst, t + wait, dst != r)

    def _on_response_done(self, i: int, t: float) -> None:
        self.done[i] = t
        self.finished += 1
        g = i // self.layout.group_size
        self.left[g] -= 1
        if self.left[g] == 0:
            self.group_done[g] = t
            self.fresh_done += int(self.layout.fresh[g])

    def on_arrivals(self, t: float) -> None:
        """Every piece due by ``t`` begins on its replica (a moved one counts as a move)."""
        st, pending = self.state, self.pending
        while pending and pending[0][0] <= t:
            _, _, i, d, moved = heapq.heappop(pending)
            st.transit.pop(i, None)
            if st.aborted[i]:
                continue
            e = self.engines[d]
            if e.now_s < t:
                self.on_completions(e.advance(t))
            prefix = st.prefix(i)
            cached = st.cached_prefix(i, d)
            if moved:
                self._count_move(i, d, prefix, cached, t)
            st.cur[i] = d
            st.started_s[i] = t
            e.submit((i, st.piece_no[i]), st.piece_len(i), prefix, cached_tokens=cached,
                     continuation=True, priority=self._priority(i))

    def _count_move(self, i: int, dst: int, prefix: int, cached: int, t: float) -> None:
        """A moved response's piece began on ``dst`` at ``t``: the move took effect."""
        if self.trace is not None:
            self.trace.took_effect(self.state.response(i), t)
        s = self.stats
        s.num_moves += 1
        s.moved_tokens += prefix
        s.prefill_tokens += prefix - cached
        s.prefill_s += self.configs[dst].recompute_cost_s(prefix - cached)

    def on_check(self, t: float) -> None:
        """A re-balance check at ``t`` (every replica advanced to it): plan the moves in
        decisions, all planned before any is made (the simulated instant does not advance
        between them), then make each."""
        st, bal = self.state, self.balance
        self.stats.num_checks += 1
        loads = self._check_loads()
        horizon = bal.horizon_at(t)
        running = len(st.lengths) - self.finished - int(st.aborted.sum())
        if bal.drain is not None and bal.drain.drains(running, len(st.lengths)):
            decisions = drain_decisions(loads, bal, self._prompt_tokens, st.cached,
                                        self.remaining)
        else:
            decisions = plan_check(loads, horizon, bal.seam_s, bal.max_moves_per_check,
                                   bal.max_moves_per_decision, st.cached, st.cached_on)
        moves = [mv for decision in decisions for mv in decision]
        made = [self._make(mv, t, loads, horizon) for mv in moves]
        if self.trace is not None:
            self.trace.record(t, loads, horizon, bal.seam_s, [
                MoveRecord.of(mv, st.response(mv.key[0]), d)  # type: ignore[index]
                for mv, d in zip(moves, made, strict=True)])

    def _check_loads(self) -> list[ReplicaLoad]:
        """The loads a check reads, as the live executor sees them (``StepResponses.seen``)."""
        return self.state.seen(replica_loads(self.engines, self.models), self.engines)

    def _make(self, mv: Move, t: float, loads: Sequence[ReplicaLoad], horizon_s: float) -> str:
        """Make one planned move, unless pricing skips it: deferred to the running piece's
        end, or at once (the running piece's tokens kept, or dropped and decoded again).
        Returns the decision (``core.balance_trace``)."""
        st, rid = self.state, mv.key
        i = rid[0]  # type: ignore[index]
        if self.draft_factor is not None and repriced(
                mv, loads, horizon_s, self.draft_factor(i, mv.src, mv.dst)) <= 0:
            return SKIPPED  # the drafts it loses outweigh the balance it gains
        if self.defer:
            st.redirect[i] = mv.dst  # moves when its running piece ends
            return DEFERRED
        if self.drops and mv.predicted_gain_s <= t - st.started_s[i]:
            return SKIPPED  # the gain does not cover decoding the running piece again
        src = self.engines[mv.src]
        g = src.tokens_so_far(rid)
        src.abort(rid)
        if self.drops:
            self.stats.dropped_tokens += g
            g = 0
        elif self.pieces is not None:
            kept = self.pieces.kept_on_move(g)
            self.stats.dropped_tokens += g - kept
            g = kept
        st.ran(i, mv.src, g)
        st.left(i, mv.src)
        self._send(i, mv.dst, t + self.balance.seam_s, True)
        return MADE

    def on_cutoff(self, t: float) -> None:
        """The ``k``-th fresh group completed: the unchosen fresh groups are aborted wherever
        their pieces are (running, waiting or on their way)."""
        self._advance_all(t)
        st, n = self.state, self.layout.group_size
        self.chosen, self.cutoff_s = choose_fresh(self.group_done, self.layout, self.k)
        for g in np.flatnonzero(self.layout.fresh & ~self.chosen):
            for i in range(g * n, (g + 1) * n):
                if np.isfinite(self.done[i]):
                    continue
                st.aborted[i] = True
                r = st.cur[i]
                if r >= 0:
                    rid = (i, st.piece_no[i])
                    so_far = self.engines[r].tokens_so_far(rid)
                    self.engines[r].abort(rid)
                    st.ran(i, r, so_far)
                    st.cur[i] = -1

    # -- helpers -----------------------------------------------------------------------------

    def _prompt_tokens(self, key: object) -> int:
        """Prompt tokens of a running response (key ``(request, piece)``)."""
        return self.state.prompt_tokens[key[0]]  # type: ignore[index]

    def _priority(self, i: int) -> int:
        """The engine priority request ``i``'s next piece is submitted with."""
        d = self.drain
        if d is None or not d.priority:
            return 0
        return engine_priority(self.state.done_prev[i], d.priority_bucket_tokens)

    def _send(self, i: int, dst: int, at_s: float, moved: bool) -> None:
        """Request ``i``'s next piece is on its way to ``dst``, arriving at ``at_s``."""
        heapq.heappush(self.pending, (at_s, self.seq, i, dst, moved))
        self.state.transit[i] = dst
        self.seq += 1

    def _cut_if_due(self, t: float) -> None:
        if self.chosen is None and self.fresh_done >= self.k:
            self.on_cutoff(t)

    def _advance_all(self, t: float) -> None:
        for e in self.engines:
            if e.now_s < t:
                self.on_completions(e.advance(t))

    def _next_engine_event(self) -> tuple[float, int]:
        t_eng, r_eng = math.inf, -1
        for r, e in enumerate(self.engines):
            te = e.next_event_s()
            if te < t_eng:
                t_eng, r_eng = te, r
        return t_eng, r_eng

    def _result(self) -> SimResult:
        if self.chosen is None:
            self.chosen, self.cutoff_s = choose_fresh(self.group_done, self.layout, self.k)
        aborted = self.state.aborted
        so_far = np.zeros(aborted.size, dtype=np.int64)
        so_far[aborted] = np.asarray(self.state.done_prev, dtype=np.int64)[aborted]
        self.done[aborted] = np.inf
        return SimResult(
            done_s=self.done, tokens_so_far=so_far, delivered_fresh=self.chosen,
            cutoff_s=self.cutoff_s,
            num_preemptions=sum(e.num_preemptions for e in self.engines),
            recomputed_tokens=sum(e.recomputed_tokens for e in self.engines),
            replica_preemptions=tuple(e.num_preemptions for e in self.engines),
        )


def simulate_with_moves(
    layout: RequestLayout,
    configs: Sequence[ReplicaConfig],
    k: int,
    balance: BalanceSettings,
    keep_pieces: bool = False,
    tail_replicas: Sequence[int] = (),
    pieces: PieceSettings | None = None,
    trace: BalanceTrace | None = None,
    draft_factor: Callable[[int, int, int], float] | None = None,
) -> tuple[SimResult, MoveStats]:
    """Simulate one plan with re-balancing; ``k`` fresh groups are delivered. Moves stay
    within a pool (``tail_replicas`` form the tail pool); ``keep_pieces`` records every
    response's chain of pieces in the returned stats; ``pieces``: bounded pieces (None: a
    response runs in one piece until it is moved); ``trace``: each check's inputs and decision
    are recorded there (``core.balance_trace``), as the live rebalancer records its own.
    ``draft_factor(request, src, dst)``: how many times as many verify steps per token the
    response takes on ``dst`` (the sibling drafts it loses, ``core.balance_drafts``); a move
    whose gain, repriced with it at the check's loads, is not positive is skipped (None:
    drafts not priced)."""
    return MoveSimulation(layout, configs, k, balance, keep_pieces, tail_replicas, pieces,
                          trace, draft_factor).run()

