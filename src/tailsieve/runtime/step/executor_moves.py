"""The live executor's side of moves (continuation mode): ``move``, the views of the running
step the live rebalancer reads (``runtime.step.live_moves.Mover``), and the rebalancer's
start with each step it balances. ``LiveExecutor`` has them (``runtime.step.executor``).

A crash of the live rebalancer (an exception out of its loop) is logged once (logger
``tailsieve.runtime.step.executor``, with its traceback) and kept in ``last_balance_error``; moves are
off for the rest of that step, and the step runs on: a move is made or not, whole, so every
response is still delivered exactly once and token-exact.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from dataclasses import replace

from tailsieve.core.plan import StepPlan
from tailsieve.core.running_index import RunningIndex
from tailsieve.errors import ConfigError
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.runtime.step.executor_config import ExecutorConfig
from tailsieve.runtime.step.live_moves import LiveResponse
from tailsieve.runtime.step.rebalancer import LiveRebalancer
from tailsieve.runtime.step.step_run import StepRun

logger = logging.getLogger("tailsieve.runtime.step.executor")  # the executor's log (docs/runtime.md)


class ExecutorMoves:
    """Moves of a running step's responses between its replicas: by the live rebalancer
    (``rebalancer_class`` builds it) on the steps whose plan carries ``BalanceSettings``, or
    by a caller of ``move``."""

    rebalancer_class: type[LiveRebalancer] = LiveRebalancer
    config: ExecutorConfig
    balance_costs: Sequence[ReplicaConfig] | None  # per replica; None: no rebalancer
    num_moves: int
    _run: StepRun | None  # the step running now

    def move(self, prompt_id: str, sample: int, to_replica: int) -> bool:
        """Continue response ``sample`` of group ``prompt_id`` on plan replica ``to_replica``
        (continuation mode, during ``run``): its next piece goes there. Streamed or on SGLang
        the running piece is aborted now and its tokens kept; vLLM's unstreamed piece runs to
        its end first (cancelling it would drop its tokens). False when the group or the
        response is not running."""
        run = self._run
        if not self.config.continuation:
            raise ConfigError("move() needs ExecutorConfig(continuation=True)")
        if run is None or not 0 <= to_replica < len(run.active):
            raise ConfigError(f"move: no running step, or no replica {to_replica}")
        g = run.groups.get(prompt_id)
        att = run.attempts.get(prompt_id)
        if g is None or att is None or g.status != "running":
            return False
        if not att.move(sample, to_replica):
            return False
        run.reseat(g, sample, to_replica)
        self.num_moves += 1
        return True

    def _prepare_moves(self, run: StepRun) -> None:
        """A step the live rebalancer balances indexes its running responses as they change
        (``core.running_index``); one the controller does not balance runs each response as
        one piece: pieces only serve moves, and every piece end costs its response a seam."""
        if self._balances(run.plan):
            run.index = RunningIndex(frozenset(run.plan.tail_replicas))
        elif self.balance_costs and self.config.piece_tokens is not None:
            run.config = replace(self.config, piece_tokens=None)

    def _balances(self, plan: StepPlan) -> bool:
        """Whether a step of ``plan`` runs the live rebalancer."""
        return plan.balance is not None and self.config.continuation and bool(self.balance_costs)

    def _priority_bucket(self, plan: StepPlan) -> int | None:
        """Tokens per engine priority level of a step's pieces when its plan's drain asks for
        priority (``core.drain``: the server needs ``--scheduling-policy priority``), else
        None: no priority sent."""
        drain = plan.balance.drain if plan.balance is not None else None
        if drain is None or not drain.priority or not self._balances(plan):
            return None
        return drain.priority_bucket_tokens

    def _start_rebalancer(self, run: StepRun, active: list[int]) -> asyncio.Task[None] | None:
        if not self._balances(run.plan):
            return None
        costs = self.balance_costs
        assert costs is not None and run.plan.balance is not None
        run.rebalancer = self.rebalancer_class(
            self, run.plan.balance, [costs[i] for i in active],
            lambda: [run.ok(r) for r in range(len(active))], lambda: run.now(),
        )
        run.rebalancer.num_launched = len(run.plan.assignments) * run.plan.group_size
        if run.index is not None:
            run.index.on_complete = run.rebalancer.poke  # a check at each response completion
            run.index.on_moved = run.rebalancer.took_effect  # recorded in its trace
        task = asyncio.create_task(run.rebalancer.loop())
        task.add_done_callback(lambda t: self._balance_crashed(run, t))
        return task

    def _balance_crashed(self, run: StepRun, task: asyncio.Task[None]) -> None:
        """The rebalancer's loop ended. Not by the step's end (a cancel): it crashed. Log it
        once and keep it for the step's record; no check runs again in this step, so moves
        are off, and what it moved stays moved (each move is whole)."""
        if task.cancelled() or task.exception() is None:
            return
        exc = task.exception()
        run.balance_error = f"{type(exc).__name__}: {exc}"
        if run.index is not None:
            run.index.on_complete = None
        logger.error("step %d: the live rebalancer crashed; moves are off for the rest of "
                     "the step", run.plan.step, exc_info=exc)

    @property
    def defers_moves(self) -> bool:
        """A move of a running piece waits for the piece's end (vLLM, unstreamed)."""
        return self.config.defers_moves

    def running_index(self) -> RunningIndex | None:
        """During a re-balanced ``run``: the running responses by replica, kept up to date as
        they change (``core.running_index``; the same as an index of ``running_responses``)."""
        run = self._run
        return run.index if run is not None else None

    def running_responses(self, at_s: float | None = None) -> list[LiveResponse]:
        """Continuation mode, during ``run``: every response still generating, where it runs
        (plan replica) and the context tokens known (prompt + generated up to its last seam
        + what its running piece streamed); running pieces' ages as of ``at_s`` (seconds on
        the step's clock; default now)."""
        run = self._run
        return [] if run is None else run.running_responses(at_s)

    def generated(self, prompt_id: str) -> list[tuple[int, ...]]:
        """Continuation mode: the token ids each response of a running group has generated
        up to its last seam."""
        run = self._run
        chains = run.chains.get(prompt_id, []) if run is not None else []
        return [c.generated_ids for c in chains]
