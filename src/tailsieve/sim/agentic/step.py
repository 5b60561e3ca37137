"""One synchronous agentic step, simulated event by event.

Every trajectory of the step starts its first turn at time 0. A turn is placed by the
session router (``tailsieve.session``) from what a router knows then, and submitted to that
replica's ``ReplicaEngine`` with its prompt (the session's context) and the prefix the
replica's cache holds: only the rest is prefilled, stalling that replica's decoding as a
chunked prefill does (``ReplicaConfig.prefill_cost_s``: the grounded prefill model). When the
turn's last token is out, its context (prompt + output) goes into that replica's cache and
the session waits on its tool for ``tool_s`` seconds, holding no decode slot, counted as a
tool wait of that replica; then its next turn arrives with the tool's tokens appended. The
step ends when every trajectory of every group is done (groups stay whole).

With ``StepOptions.midturn`` (TailSieve and the length-informed policy: the router holds the
generation), re-balance checks every ``interval_s`` ask ``core.balancer.plan_moves`` for
moves of running turns, priced with the prefix caches; a moved turn stops where it runs (its
blocks stay cached there) and after ``seam_s`` continues on the destination with its prompt
plus the tokens generated so far, which the destination prefills where its cache does not
hold them.

A router that rebalances as verl's ``rebalance_requests`` does (``session.rebalance``) is
asked after every event whether to; then every running or queued turn is aborted where it
runs (its blocks stay cached there) and, after ``seam_s``, continues on the replica the
router pins it to, as a moved turn does.

Time advances from event to event (engine completions and stalls in closed form, tool
returns, continuations, checks): never token by token.
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field

from tailsieve.core.balancer import BalanceSettings
from tailsieve.errors import ConfigError
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.session.admission import AdmissionSettings, KvAdmission
from tailsieve.session.midturn import AGENTIC_BALANCE, move_horizon_s, session_horizon_s
from tailsieve.session.rebalance import VerlRebalance
from tailsieve.session.remaining import RemainingWork
from tailsieve.session.replica_view import ReplicaView
from tailsieve.session.router_base import SessionRouter
from tailsieve.session.turn import TurnRequest
from tailsieve.sim.agentic.midturn import MovePlanner
from tailsieve.sim.agentic.replicas import Replicas
from tailsieve.sim.agentic.stats import StepStats
from tailsieve.workload.turns import Trajectory

__all__ = ["AGENTIC_BALANCE", "PRIORITY_SOURCES", "StepOptions", "TurnStepSim"]

PRIORITY_SOURCES = ("off", "remaining", "oracle")


@dataclass(frozen=True, slots=True)
class StepOptions:
    """How one step runs beyond its router."""

    midturn: bool = False  # re-balance running turns by continuation (router holds them)
    balance: BalanceSettings = field(default_factory=lambda: AGENTIC_BALANCE)  # checks:
    # interval, seam, moves per check, horizon and the controller's step-time estimate
    piece_tokens: int | None = None  # None: a mid-turn move stops the turn at once (live:
    # streamed pieces, SGLang's abort); k: with mid-turn moves a turn runs as pieces of k
    # tokens and a move takes effect at the running piece's end (live: unstreamed vLLM
    # pieces), the turn held from the next move until a piece ended on its destination
    priced_as: tuple[ReplicaConfig, ...] | None = None  # the cost model routers price
    # each replica with (None: its own, speed included; ``Replicas``)

    admission: AdmissionSettings | None = None  # admit sessions by KV room
    # (``session.admission.KvAdmission``): a new session waits at the router until a replica's
    # resident sessions leave it room; None: every turn is sent at once
    priority: str = "off"  # engine priority (vLLM's --scheduling-policy priority): "off"
    # (FCFS), "remaining" (each turn's priority is minus its session's estimated remaining
    # output, ``session.remaining.RemainingWork``: likely-critical work first), "oracle" (minus the true
    # remaining output: simulator only, the lever's reference)

    def __post_init__(self) -> None:
        if self.piece_tokens is not None and self.piece_tokens < 1:
            raise ConfigError(f"piece_tokens must be >= 1, got {self.piece_tokens}")
        if self.priority not in PRIORITY_SOURCES:
            raise ConfigError(f"priority must be one of {', '.join(PRIORITY_SOURCES)}, got "
                              f"{self.priority!r}")


class TurnStepSim:
    """The state of one step while it runs (see the module docstring)."""

    def __init__(self, trajectories: Sequence[Trajectory], configs: Sequence[ReplicaConfig],
                 router: SessionRouter, options: StepOptions,
                 remaining: RemainingWork | None = None) -> None:
        """``remaining``: the step's estimate of every session's remaining output, fed here
        with the step's events (the router may read it); one is made when the options'
        priority needs it."""
        if not trajectories:
            raise ConfigError("a step needs at least one trajectory")
        self.trajs = list(trajectories)
        self.router = router
        self.options = options
        self.remaining = remaining if remaining is not None or options.priority != "remaining" \
            else RemainingWork()
        self._left = (_true_left(self.trajs) if options.priority == "oracle" else None)
        self.reps = Replicas(configs, priority=options.priority != "off",
                             priced_as=options.priced_as)
        self.admission = (KvAdmission([c.kv_capacity_tokens for c in configs], options.admission)
                          if options.admission is not None else None)
        self.queue: deque[int] = deque()  # sessions waiting for admission (first turns)
        n = len(self.trajs)
        self.turn = [0] * n  # index of the current turn
        self.context = [t.prompt_tokens for t in self.trajs]  # prompt of the current turn
        self.home: list[int | None] = [None] * n  # replica of the last turn
        self.where = [-1] * n  # replica of the running piece (-1: none)
        self.piece = [0] * n  # pieces of the current turn so far
        self.done_tokens = [0] * n  # tokens of the current turn in finished pieces
        self.left = n
        self.stats = StepStats(num_trajectories=n)
        self.events: list[tuple[float, int, int, int]] = []  # (time, kind, session, replica)
        self.planner = (MovePlanner(self.reps, [t.prompt_id for t in self.trajs])
                        if options.midturn else None)
        self.rebalancer = router if isinstance(router, VerlRebalance) else None
        self.pending: dict[int, int] = {}  # session -> destination of a move at piece end
        self.hold: dict[int, int] = {}  # session -> first piece it may move in again
        self._out_sum = 0
        self._out_n = 0

    # ----- the loop ------------------------------------------------------------------
    def run(self) -> StepStats:
        for i in range(len(self.trajs)):
            self.arrive(i, 0.0)
        next_check = self.options.balance.interval_s if self.planner is not None else math.inf
        while self.left > 0:
            eng = self.reps.next_event()
            t_eng = eng[0] if eng is not None else math.inf
            t_ev = self.events[0][0] if self.events else math.inf
            t = min(t_eng, t_ev, next_check)
            if t == math.inf:
                raise ConfigError("the step stalled with trajectories unfinished")
            if t == t_eng and eng is not None:
                self.sync(eng[1], t)
            elif t == t_ev:
                _, kind, i, r = heapq.heappop(self.events)
                if kind == 0:
                    self.arrive(i, t)
                else:
                    self.continue_on(i, r, t)
            else:
                self.check(t)
                next_check = t + self.options.balance.interval_s
            if self.rebalancer is not None and self.left > 0 and \
                    self.rebalancer.should_rebalance(self.reps.views(t)):
                self.rebalance(t)
        pre, rec = self.reps.preemptions()
        self.stats.preemptions, self.stats.recomputed_tokens = pre, rec
        return self.stats

    def sync(self, r: int, t: float) -> None:
        """Bring replica ``r`` to ``t`` and end the turns (or pieces) that completed there."""
        pieces = []
        for c in self.reps.advance(r, t):
            i, piece = _ids(c.request_id)
            if self.where[i] == r and self.piece[i] == piece:
                left = self.trajs[i].turns[self.turn[i]].output_tokens - self.done_tokens[i]
                if c.num_tokens < left:
                    pieces.append((i, c))
                else:
                    self.end_turn(i, r, c.time_s)
        for i, c in pieces:
            self.piece_end(i, r, c.time_s, c.num_tokens)

    def check(self, t: float) -> None:
        """A mid-turn re-balance check at ``t``: plan moves, stop each moved turn and
        schedule its continuation."""
        assert self.planner is not None
        for r in range(len(self.reps)):
            self.sync(r, t)
        self.stats.checks += 1
        opts = self.options.balance
        horizon = move_horizon_s(opts, t, self.session_horizon_s(t))
        adm = self.admission
        for m in self.planner.plan(t, horizon, opts.seam_s, opts.max_moves_per_check,
                                   self.held, adm.rooms() if adm is not None else None):
            i, piece = _ids(m.key)
            if self.where[i] != m.src or self.piece[i] != piece:
                continue
            if adm is not None:  # the reservation goes along now, as the planner counted it
                adm.admit(i, m.dst, m.prefix_tokens)
            if self.options.piece_tokens is not None:  # at the running piece's end
                self.pending[i] = m.dst
                self.hold[i] = piece + 2
                self.stats.midturn_moves += 1
                continue
            self.stop(i, m.src, m.key)
            self.stats.midturn_moves += 1
            heapq.heappush(self.events, (t + opts.seam_s, 1, i, m.dst))

    def rebalance(self, t: float) -> None:
        """verl's ``rebalance_requests`` at ``t``: abort every running or queued turn, and
        continue each after the seam where the router pins it."""
        assert self.rebalancer is not None
        for r in range(len(self.reps)):
            self.sync(r, t)
        src = {i: r for i, r in enumerate(self.where) if r >= 0}
        for i, r in src.items():
            self.stop(i, r, (i, self.piece[i]))
        self.pending.clear()
        pins = self.rebalancer.rebalance(list(src), self.reps.views(t))
        seam = self.options.balance.seam_s
        for i, r in src.items():
            dst = pins[i]
            self.stats.midturn_moves += int(dst != r)
            heapq.heappush(self.events, (t + seam, 1, i, dst))

    def stop(self, i: int, r: int, key: Hashable) -> None:
        """Abort turn ``i``'s running piece ``key`` on ``r``: its tokens so far count as done
        and its context stays cached on ``r``."""
        self.done_tokens[i] += self.reps.engines[r].abort(key)
        self.reps.touched(r)
        tr = self.trajs[i]
        held = self.context[i] + self.done_tokens[i]
        self.reps.cache.insert(r, i, tr.prompt_id, min(tr.prompt_tokens, held), held)
        self.reps.fit_cache(r)
        self.where[i] = -1
        self.piece[i] += 1

    # ----- turns ---------------------------------------------------------------------
    def request(self, i: int) -> TurnRequest:
        tr, k = self.trajs[i], self.turn[i]
        ctx = self.context[i]
        new = ctx if k == 0 else tr.turns[k - 1].tool_output_tokens
        return TurnRequest(self.session(i), tr.prompt_id, k, ctx, new, self.home[i],
                           self.reps.cache.cached_on(i, tr.prompt_id, ctx))

    def arrive(self, i: int, t: float) -> None:
        """Turn ``turn[i]`` of trajectory ``i`` arrives at ``t``: place it and start it."""
        turn = self.request(i)
        if self.remaining is not None and turn.turn_index == 0:
            self.remaining.start(i, turn.group_id)
        views: Sequence[ReplicaView] = self.reps.views(t)
        adm = self.admission
        if adm is not None:
            home = adm.resident(i)
            room = adm.with_room(turn.context_tokens)
            if home is None and not room:
                self.queue.append(i)
                return
            if len(room) < len(views):
                views = [v for v in views if v.replica in room or v.replica == home]
        decision = self.router.choose(turn, views, t)
        if adm is not None and adm.resident(i) != decision.replica:
            adm.admit(i, decision.replica, turn.context_tokens)
        home = self.home[i]
        if home is not None:
            self.reps.leave_tool(home, turn.context_tokens - turn.new_tokens)
        r = decision.replica
        cached = turn.cached_on(r)
        s = self.stats
        s.num_turns += 1
        s.prompt_tokens += turn.context_tokens
        s.cached_tokens += cached
        s.prefilled_tokens += turn.context_tokens - cached
        s.reprefilled_tokens += max(turn.context_tokens - cached - turn.new_tokens, 0)
        if home is not None and r != home:
            s.boundary_moves += 1
        self.sync(r, t)
        self.reps.cache.release(r, i)
        self.where[i], self.piece[i], self.done_tokens[i] = r, 0, 0
        self.hold.pop(i, None)
        out = self.piece_cap(self.trajs[i].turns[self.turn[i]].output_tokens)
        self.reps.submit(r, (i, 0), out, turn.context_tokens, cached, False, t,
                         self.priority(i))
        if turn.turn_index == 0:  # the group's prompt is cached once prefilled (vLLM's
            tr = self.trajs[i]  # prefix caching): siblings sent here after it hit it
            self.reps.cache.insert(r, i, tr.prompt_id, tr.prompt_tokens, tr.prompt_tokens)
            self.reps.cache.release(r, i)
            self.reps.fit_cache(r)

    def end_turn(self, i: int, r: int, t: float) -> None:
        tr, k = self.trajs[i], self.turn[i]
        u = tr.turns[k]
        self._out_sum += u.output_tokens
        self._out_n += 1
        if self.remaining is not None:
            self.remaining.turn_ended(i, u.output_tokens)
        end_ctx = self.context[i] + u.output_tokens
        self.reps.cache.insert(r, i, tr.prompt_id, min(tr.prompt_tokens, end_ctx), end_ctx)
        self.reps.fit_cache(r)
        self.where[i] = -1
        self.pending.pop(i, None)
        if k + 1 == tr.num_turns:
            self.left -= 1
            self.stats.step_s = max(self.stats.step_s, t)
            self.router.forget(self.session(i))
            if self.remaining is not None:
                self.remaining.session_ended(i)
            if self.admission is not None:
                self.admission.release(i)
                self.admit_waiting(t)
            return
        self.home[i] = r
        self.reps.enter_tool(r, end_ctx)
        self.context[i] = end_ctx + u.tool_output_tokens
        if self.admission is not None:
            self.admission.grow(i, self.context[i])
        self.turn[i] = k + 1
        heapq.heappush(self.events, (t + u.tool_s, 0, i, -1))

    def admit_waiting(self, t: float) -> None:
        """Send the sessions waiting for admission (in arrival order) while a replica has
        room for the first of them."""
        assert self.admission is not None
        while self.queue and self.admission.with_room(self.context[self.queue[0]]):
            self.arrive(self.queue.popleft(), t)

    def piece_end(self, i: int, r: int, t: float, num_tokens: int) -> None:
        """A piece of turn ``turn[i]`` ended on ``r`` with tokens left: its next piece starts
        there at once, or on a move's destination after the seam."""
        tr = self.trajs[i]
        self.done_tokens[i] += num_tokens
        self.piece[i] += 1
        held = self.context[i] + self.done_tokens[i]
        self.reps.cache.insert(r, i, tr.prompt_id, min(tr.prompt_tokens, held), held)
        self.reps.fit_cache(r)
        dst = self.pending.pop(i, None)
        if dst is None:
            self.continue_on(i, r, t)
            return
        self.where[i] = -1
        heapq.heappush(self.events, (t + self.options.balance.seam_s, 1, i, dst))

    def piece_cap(self, left: int) -> int:
        """Tokens the next piece of a turn with ``left`` tokens to go generates."""
        k = self.options.piece_tokens
        return left if k is None or self.planner is None else min(left, k)

    def held(self, key: Hashable) -> bool:
        """A running piece that may not move: its turn's move is pending, or no piece has
        ended on the destination since."""
        i, piece = _ids(key)
        return i in self.pending or piece < self.hold.get(i, 0)

    def continue_on(self, i: int, r: int, t: float) -> None:
        """A turn's next piece starts on ``r`` (a moved turn's after its seam)."""
        tr = self.trajs[i]
        held = self.context[i] + self.done_tokens[i]
        out = self.piece_cap(tr.turns[self.turn[i]].output_tokens - self.done_tokens[i])
        if self.admission is not None and self.admission.resident(i) != r:
            self.admission.admit(i, r, held)  # a mid-turn move takes its reservation along
        self.sync(r, t)
        cached = self.reps.cache.cached(r, i, tr.prompt_id, held)
        self.reps.cache.release(r, i)
        self.where[i] = r
        self.stats.midturn_prefill_tokens += held - cached
        self.reps.submit(r, (i, self.piece[i]), out, held, cached, True, t, self.priority(i))

    def priority(self, i: int) -> int:
        """The engine priority of session ``i``'s next piece (lower runs earlier): minus its
        remaining output, estimated or (oracle) true; 0 with priority off."""
        done = self.done_tokens[i]
        if self._left is not None:
            return -int(self._left[i][self.turn[i]] - done)
        if self.options.priority == "remaining" and self.remaining is not None:
            return -round(self.remaining.tokens_left(i, done))
        return 0

    def session_horizon_s(self, now_s: float) -> float:
        """How long a move made now is expected to keep paying
        (``session.midturn.session_horizon_s``, as the live gateway prices it)."""
        running = [self.turn[i] for i, r in enumerate(self.where) if r >= 0]
        return session_horizon_s(running, self.expected_turn_tokens, self.reps.views(now_s))

    def session(self, i: int) -> Hashable:
        return i

    @property
    def expected_turn_tokens(self) -> float | None:
        """Mean output of the turns ended so far in this step (None before any)."""
        return self._out_sum / self._out_n if self._out_n else None


def _true_left(trajs: Sequence[Trajectory]) -> list[list[int]]:
    """Per trajectory, the tokens it generates from each turn on (the oracle's priority)."""
    out = []
    for t in trajs:
        acc, left = 0, []
        for u in reversed(t.turns):
            acc += u.output_tokens
            left.append(acc)
        out.append(left[::-1])
    return out


def _ids(rid: Hashable) -> tuple[int, int]:
    assert isinstance(rid, tuple)
    return int(rid[0]), int(rid[1])
