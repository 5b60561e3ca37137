"""The live rebalancer: the pure balancer (``core.balancer``) at work while a live step runs.

Only the I/O-side glue lives here. Every ``BalanceSettings.interval_s`` (and at a response completion
when half an interval has passed since the last check) the rebalancer reads the executor's
running responses by replica (``LiveExecutor.running_index``, kept as they change; each
unstreamed running piece's progress estimated, see below), builds one ``ReplicaLoad`` per
healthy replica from the controller's cost model (a ``ReplicaConfig`` per replica: the
profile's ``tau(b)``, context and recompute rates), asks ``core.balance_check.plan_check`` for
moves and makes each with ``LiveExecutor.move``, decision by decision, letting the event loop
run between decisions. A replica's responses are listed only when the planner asks for them.
A ``Mover`` without a ``running_index`` (a test's) is read through ``running_responses``.

Exactly-once, whole groups and token-exact chains are the executor's and the chain's: a move
only changes where a running response's next piece goes (``ChainedAttempt.move``); a response
that completed, or a group that was cut or restarted meanwhile, is not moved.

Where a response stands: its tokens known (to its last seam, plus what a streamed piece
streamed) and, for an unstreamed running piece, the progress ``core.progress_clock`` estimates
(without it the balancer would see the step's start and move little; ``estimate=False``).

Progress: a moved response is not moved again until its context (as estimated) passes the
prefix it carried at its last move, so a response cannot ping-pong without advancing. A move
of a vLLM unstreamed piece takes effect at the piece's end (nothing is dropped; the response
counts on its destination from the move on, and is no candidate until its piece ends, as in the
simulator); on SGLang the aborted piece returns its partial
output (the runner's ``interrupt``; an abort the server never answers leaves the piece to its
end or to the stall watch).

Prefix cache as the balancer sees it: a group's prompt is cached on the replicas it was dealt;
a response that left a replica leaves its prefix (prompt + generated so far) cached there.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

from tailsieve.core.balance_check import plan_check
from tailsieve.core.balance_trace import DEFERRED, MADE, REFUSED, BalanceTrace, MoveRecord
from tailsieve.core.balancer import BalanceSettings, Move, ReplicaLoad, Running
from tailsieve.core.drain import RemainingModel
from tailsieve.core.drain_plan import DrainPrompts, drain_decisions
from tailsieve.core.progress_clock import ProgressClock, paces
from tailsieve.core.replica_load import CostTerms, cost_terms
from tailsieve.core.running_index import Entry, RunningIndex
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.runtime.execution.check_timer import CheckTimer
from tailsieve.runtime.step.live_moves import Mover, MoveTally, index_of

__all__ = ["LiveRebalancer"]

LIST_REPLICAS = 16  # a drain check lists the running responses of this many replicas per slice


@dataclass(slots=True)
class LiveRebalancer:
    """Re-balances one live step; ``costs[j]`` is plan replica ``j``'s cost model and
    ``healthy()`` says which plan replicas may hold responses now."""

    executor: Mover
    settings: BalanceSettings
    costs: Sequence[ReplicaConfig]
    healthy: Callable[[], Sequence[bool]]
    clock: Callable[[], float]  # seconds since the step started
    tally: MoveTally = field(default_factory=MoveTally)
    _cache: dict[Hashable, dict[int, int]] = field(default_factory=dict)
    _moved_at: dict[Hashable, int] = field(default_factory=dict)  # context at last move
    _index: RunningIndex = field(default_factory=RunningIndex)  # the last check's
    _moved_now: set[Hashable] = field(default_factory=set)  # moved in this check
    _models: list[CostTerms] = field(default_factory=list)  # per replica
    estimate: bool = True  # add each unstreamed running piece's estimated tokens (progress)
    progress: ProgressClock = field(default_factory=ProgressClock)
    _timer: CheckTimer = field(init=False)
    trace: BalanceTrace = field(default_factory=BalanceTrace)  # every check's inputs, decision
    _open: tuple[float, list[ReplicaLoad], float] | None = None  # the check being made
    _planned: list[MoveRecord] = field(default_factory=list)  # its moves and decisions so far
    num_launched: int = 0  # responses the step launched (the drain's yardstick; the executor
    # sets it; 0: no drain)
    _remaining: RemainingModel | None = None  # the drain's expected remaining work (built with
    # the rebalancer: a check does not pay for it)
    _listing: list[ReplicaLoad] = field(default_factory=list)  # a drain check's replicas whose
    # responses are still to be listed (``_list_slices``)
    _prompts: DrainPrompts = field(default_factory=lambda: DrainPrompts({}))  # theirs, listed

    def __post_init__(self) -> None:
        self._timer = CheckTimer(self.clock)
        drain = self.settings.drain
        if drain is not None and drain.lpt:  # built now, not inside the drain's first check
            self._remaining = drain.remaining_model()

    def took_effect(self, key: Hashable) -> None:
        """A moved response's next piece began on its destination (``RunningIndex.on_moved``):
        its move took effect now."""
        self.trace.took_effect(key, self.clock())

    def poke(self) -> None:
        """A response completed: check now if half an interval has passed since the last
        check (else once it has), as the simulator does."""
        self._timer.poke()

    def loads(self, now_s: float | None = None) -> list[ReplicaLoad]:
        """One ``ReplicaLoad`` per healthy plan replica, from the executor's running responses
        (its ``running_index`` when it keeps one, else an index of ``running_responses``). A
        response's context is what the executor knows plus, given ``now_s``, for an unstreamed
        running piece the tokens the cost model says it has generated by then (``progress``;
        at most the piece's cap). A replica's responses are read only when the planner asks
        (those this check moved left out); one that has not progressed since its last move
        counts in its replica's load but is not a candidate. Prefix-cache hits are read by
        ``cached_tokens``."""
        keep = getattr(self.executor, "running_index", None)
        idx = keep() if keep is not None else None
        if idx is None:
            idx = index_of(self.executor.running_responses(), now_s or 0.0)
        self._index = idx
        clock = self.progress if now_s is not None else None
        sums = idx.sums(clock, now_s or 0.0)
        models = self._models
        if not models:  # replicas sharing a cost model share its memoised tau
            shared: dict[int, CostTerms] = {}
            models = self._models = [shared.setdefault(id(c), cost_terms(c)) for c in self.costs]
        out = []
        for j, ok in enumerate(self.healthy()):
            if not ok:
                continue  # responses on a replica taken out: the executor relocates them
            n, ctx = sums.get(j, (0, 0.0))
            tau, k, rate, fixed = models[j]
            out.append(ReplicaLoad(j, n, ctx, self._candidates(idx, j, clock, now_s or 0.0),
                                   tau, k, rate, fixed, pool=idx.pool(j)))
        return out

    def _candidates(self, idx: RunningIndex, replica: int, clock: ProgressClock | None,
                    now_s: float) -> Callable[[], Running]:
        """The responses of ``replica`` that may move, read when first asked for."""
        got: list[Running] = []

        def running() -> Running:
            if not got:
                moved, moved_at, entries = self._moved_now, self._moved_at, idx.entries
                got.append([(k, n) for k, n in idx.running_on(replica, clock, now_s)
                            if n > moved_at.get(k, -1) and k not in moved
                            and not _bound_elsewhere(entries.get(k))])
            return got[0]

        return running

    def _estimated_loads(self, now_s: float) -> list[ReplicaLoad]:
        """``loads`` at ``now_s`` with the progress clock brought up to it, then set to run at
        each replica's predicted rate (one token per decode iteration) until the next check."""
        if not self.estimate:
            return self.loads()
        self.progress.catch_up(now_s, lambda: _rates(self.loads()))  # first: what is known
        loads = self.loads(now_s)
        self.progress.run_at(_rates(loads))
        return loads

    def cached_tokens(self, key: Hashable, replica: int) -> int:
        """Prefix tokens of response ``key`` already cached on ``replica``: where it ran
        before (its prefix then), else its prompt on the replicas its group was dealt."""
        left = self._cache.get(key)
        if left is not None and replica in left:
            return left[replica]
        x = self._index.get(key)
        if x is not None and x.prompt_tokens and replica in x.dealt:
            return x.prompt_tokens
        return 0

    def cached_on(self, key: Hashable) -> Mapping[int, int]:
        """Prefix tokens of response ``key`` cached, by replica (others: none); agrees with
        ``cached_tokens``."""
        x = self._index.get(key)
        hits = {r: x.prompt_tokens for r in x.dealt} if x is not None and x.prompt_tokens else {}
        hits.update(self._cache.get(key, {}))
        return hits

    def check(self) -> int:
        """One re-balance check: plan moves and make them. Returns the moves made."""
        made = 0
        t0 = t = time.process_time()
        decisions = self._decisions()
        t = self._timed(t, self.tally.loads_cpu_s)
        for _ in self._list_slices():
            t = self._timed(t, self.tally.loads_cpu_s)
        for decision in decisions:
            made += self._make(decision)
            t = self._timed(t, self.tally.decision_cpu_s)
        self.tally.check_cpu_s.append(t - t0)
        self._close_record(made)
        return made

    async def check_async(self) -> int:
        """``check``, letting the event loop run once the loads are read and between its
        decisions (each plans at most ``max_moves_per_decision`` moves; the same moves as
        ``check``). A response that completed meanwhile is not moved."""
        made = 0
        t = time.process_time()
        decisions = self._decisions()
        took = self._timed(t, self.tally.loads_cpu_s) - t
        try:  # the step's end may cancel it between decisions: the check is still recorded
            await asyncio.sleep(0)
            t = time.process_time()
            for _ in self._list_slices():
                took += self._timed(t, self.tally.loads_cpu_s) - t
                await asyncio.sleep(0)
                t = time.process_time()
            for decision in decisions:
                t = time.process_time()
                made += self._make(decision)
                took += self._timed(t, self.tally.decision_cpu_s) - t
                await asyncio.sleep(0)
        finally:
            self.tally.check_cpu_s.append(took)
            self._close_record(made)
        return made

    def _list_slices(self) -> Iterator[None]:
        """A drain check reads every running response (``core.drain_plan``), not only the
        costliest replicas': list them ``LIST_REPLICAS`` replicas at a time, one slice of
        reading the loads each (the planner then finds them listed)."""
        todo, self._listing = self._listing, []
        return self._prompts.list_slices(todo, LIST_REPLICAS)

    def _close_record(self, made: int) -> None:
        """The check is over: record what it saw and decided in ``trace``."""
        if self._open is not None:
            now, loads, horizon = self._open
            self.trace.record(now, loads, horizon, self.settings.seam_s, self._planned)
            self._open = None

    @staticmethod
    def _timed(since: float, into: list[float]) -> float:
        """Append the CPU time since ``since`` to ``into``; returns now."""
        now = time.process_time()
        into.append(now - since)
        return now

    def _decisions(self) -> Iterator[list[Move]]:
        now = self._timer.last_s = self.clock()
        self.tally.num_checks += 1
        self._moved_now = set()
        loads = self._estimated_loads(now)
        s = self.settings
        self._open = (now, loads, s.horizon_at(now))
        self._planned = []
        running = len(self._index.entries)
        if s.drain is not None and s.drain.drains(running, self.num_launched):
            self._listing = loads
            self._prompts = DrainPrompts(self._index.entries)
            return drain_decisions(loads, s, self._prompts.__getitem__, self.cached_tokens,
                                   self._remaining)
        return plan_check(loads, s.horizon_at(now), s.seam_s, s.max_moves_per_check,
                          s.max_moves_per_decision, cached=self.cached_tokens,
                          cached_on=self.cached_on)

    def _make(self, moves: list[Move]) -> int:
        made = 0
        defers = getattr(self.executor, "defers_moves", False)
        for mv in moves:
            key: tuple[str, int] = mv.key  # type: ignore[assignment]
            pid, sample = key
            if not self.executor.move(pid, sample, mv.dst):
                self._planned.append(MoveRecord.of(mv, key, REFUSED))
                continue
            waits = defers and _bound_elsewhere(self._index.get(key))  # its piece runs on
            rec = MoveRecord.of(mv, key, DEFERRED if waits else MADE)
            self._planned.append(rec)
            self.trace.made(rec)
            made += 1
            self._moved_now.add(key)
            self._cache.setdefault(key, {})[mv.src] = mv.prefix_tokens
            self._moved_at[key] = mv.prefix_tokens
            t = self.tally
            t.num_moves += 1
            t.moved_tokens += mv.prefix_tokens
            t.prefill_tokens += mv.prefill_tokens
            t.prefill_s += self.costs[mv.dst].recompute_cost_s(mv.prefill_tokens)
        return made

    async def loop(self) -> None:
        """Check every ``interval_s``, and at a response completion once half an interval has
        passed since the last check; runs until cancelled (the executor cancels it when the step ends)."""
        while True:
            await self._timer.until_due(self.settings.interval_s)
            await self.check_async()


def _bound_elsewhere(e: Entry | None) -> bool:
    """Whether a response waits on a move: its unstreamed running piece runs on another
    replica than the one it counts on (a vLLM piece moves at its end). It is not a candidate
    again until then, as in the simulator (moving it back would only undo the move)."""
    return e is not None and 0 <= e.on != e.replica


def _rates(loads: Sequence[ReplicaLoad]) -> dict[int, float]:
    """Tokens per second per running response, by replica (none where none runs)."""
    return paces((ld.replica, ld.cost_s(ld.num_running, ld.context_tokens)) for ld in loads)
