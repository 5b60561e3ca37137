"""The live executor: runs a ``StepPlan`` against real (or emulated) inference servers.

All groups start at t = 0 on their replicas (in dispatch order); a spread group's responses
start on several replicas. Fresh bulk groups race for the
``num_fresh_to_deliver`` places of the batch; at that moment the remaining fresh bulk groups are
aborted (their tasks cancelled, which closes their HTTP connections). Tail and pinned groups are
always waited for. Each group runs as one attempt whose responses are chains of pieces
(``runtime.step.chain_attempt``). A replica fault (refused, died, timed out, stalled) takes the
replica out and sends the responses it ran to a healthy replica (same pool first): with
continuation they continue from their last seam; without, each starts again from its prompt
(a group sent as one request with ``n``: the whole request, a new attempt of the group). The
group's other responses keep running. Nothing of an aborted group is delivered.
A step's own state (its groups, the cutoff, where a displaced group goes) is ``runtime.step.step_run``;
here the attempts are launched and their ends (``Event``) handled.

Replica lifecycle (``runtime.execution.health``): a replica taken out is probed (``GET /health``) in the
background every ``probe_interval_s`` while a step runs, and by ``probe`` between steps; a 200
re-admits it (mid-step it can take displaced responses again; the caller plans the next step for
the new healthy count). An ``addresses`` callable (e.g. a launch state file rewritten when Ray
restarts a server elsewhere) is polled at every probe: a replica whose address changed is taken
out and probed at the new one.
Moves of running responses, and the live rebalancer that makes them: ``runtime.step.executor_moves``.
"""

from __future__ import annotations

import asyncio
import warnings
from collections.abc import Callable, Mapping, Sequence

from tailsieve.core.balance_trace import BalanceTrace
from tailsieve.core.outcome import StepOutcome
from tailsieve.core.plan import StepPlan
from tailsieve.errors import ConfigError, ProtocolError, StepFailedError
from tailsieve.model.profiles import builtin_profile
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.runtime.engine.backends import PromptInput, with_encoded_ids
from tailsieve.runtime.engine.faults import RequestFailedError
from tailsieve.runtime.engine.transport import Transport
from tailsieve.runtime.execution.chain import SEED_WARNING, ResponseChain, check_continuable
from tailsieve.runtime.execution.health import ReplicaState
from tailsieve.runtime.execution.profile import LiveProfile
from tailsieve.runtime.execution.stall_watch import StallWatch
from tailsieve.runtime.step.chain_attempt import ChainedAttempt
from tailsieve.runtime.step.executor_config import ExecutorConfig, ForcedLength
from tailsieve.runtime.step.executor_moves import ExecutorMoves
from tailsieve.runtime.step.live_moves import MoveTally
from tailsieve.runtime.step.replica_set import ReplicaSet
from tailsieve.runtime.step.step_run import Event, StepRun
from tailsieve.runtime.step.step_state import GroupRun, StepProgress, StepResult
from tailsieve.runtime.step.waste import AttemptProgress, WasteCounter


class LiveExecutor(ExecutorMoves, ReplicaSet):
    """Executes step plans over HTTP. One instance per set of endpoints (``ReplicaSet``: their
    addresses, health and engine client); ``aclose`` when done.

    ``forced_length(prompt_id, sample)`` switches on replay mode (max_tokens = L, ignore_eos).
    ``on_progress`` is called with a ``StepProgress`` snapshot after every group event.
    ``addresses()`` returns the current base URL of every replica (same count and order).
    ``balance_costs`` (the controller's cost model, one ``ReplicaConfig`` or one per replica)
    switches on the live rebalancer (``runtime.step.rebalancer``) for steps whose plan carries
    ``BalanceSettings`` when ``config.continuation`` is on (``runtime.step.executor_moves``).
    """

    def __init__(
        self,
        endpoints: Sequence[str],
        config: ExecutorConfig,
        transport: Transport | None = None,
        forced_length: ForcedLength | None = None,
        on_progress: Callable[[StepProgress], None] | None = None,
        addresses: Callable[[], Sequence[str]] | None = None,
        balance_costs: ReplicaConfig | Sequence[ReplicaConfig] | None = None,
    ) -> None:
        super().__init__(endpoints, config, transport, addresses)
        if config.continuation:
            check_continuable(config.sampling)  # one clear line, before any request
            if config.sampling.seed is not None:
                warnings.warn(SEED_WARNING, UserWarning, stacklevel=2)
        self._forced = forced_length
        self._on_progress = on_progress
        self.waste = WasteCounter()  # runtime.step.waste: the decode rate, over steps
        self._run: StepRun | None = None  # the step running now
        self.num_relocations = 0  # responses continued (or, without continuation, restarted)
        # elsewhere after a fault
        self.num_moves = 0  # continuation: responses moved by ``move``
        self.chains: dict[str, list[ResponseChain]] = {}  # the last step's chains
        if isinstance(balance_costs, ReplicaConfig):
            balance_costs = [balance_costs] * len(endpoints)
        if balance_costs is not None and len(balance_costs) != len(endpoints):
            raise ConfigError(f"balance_costs: {len(balance_costs)} for {len(endpoints)} replicas")
        self.balance_costs = balance_costs
        self.last_moves = MoveTally()  # the last step's re-balancing
        self.last_trace = BalanceTrace()  # the last step's checks (core.balance_trace)
        self.last_balance_error: str | None = None  # the last step's rebalancer crash, if any
        self.stall_cost = ReplicaConfig.from_profile(builtin_profile("cpu"))  # prices pieces
        # for the stall watch where ``balance_costs`` does not (the rollout sets its model)
        self.stalls = StallWatch(config.stall, self._cost_of, lambda: asyncio.get_running_loop(
            ).time())  # hung replicas (``runtime.execution.stall_watch``): their requests are faults
        self.timings: LiveProfile | None = None  # the cost model, with "auto" fed every
        # request's and piece's timing (``LiveProfile.record_piece``; the rollout sets it)

    def _cost_of(self, url: object) -> ReplicaConfig:
        """The cost model of the replica a request URL goes to (the stall watch's)."""
        i = self._replica_of(url)
        return self.stall_cost if self.balance_costs is None or i is None else self.balance_costs[i]

    async def run(
        self,
        plan: StepPlan,
        prompts: Mapping[str, PromptInput],
        replicas: Sequence[int] | None = None,
    ) -> StepResult:
        """Run one step; return the outcome plus the delivered responses. ``replicas[j]`` is
        the executor replica that serves the plan's replica ``j`` (default: all, in order);
        the outcome's replica indices are the plan's."""
        active = self._check_step(plan, prompts, replicas)
        if not any(self.health.healthy[i] for i in active):
            await self.probe()  # one may have recovered since it was taken out
        if not any(self.health.healthy[i] for i in active):
            raise StepFailedError(f"step {plan.step}: no healthy replica")
        await self.resolve_model()
        run = self._begin(plan, active)
        relocations_before = self.num_relocations
        background = self._watchers()
        try:
            self._launch_all(run, prompts)
            balancer = self._start_rebalancer(run, active)
            if balancer is not None:
                background.append(balancer)
            while not run.finished():
                ev = await run.queue.get()
                self._handle(run, ev)
                if ev.kind == "done" and run.rebalancer is not None:
                    run.rebalancer.poke()
                self._report(run)
        finally:
            await self._end(run, background)
        return run.result(self.waste, self.num_relocations - relocations_before)

    def _check_step(self, plan: StepPlan, prompts: Mapping[str, PromptInput],
                    replicas: Sequence[int] | None) -> list[int]:
        """The executor replicas serving ``plan``'s (checked), and the plan checked against
        them and ``prompts``."""
        active = list(range(self.num_replicas)) if replicas is None else list(replicas)
        if plan.num_replicas != len(active):
            raise ConfigError(f"plan is for {plan.num_replicas} replicas, got {len(active)}")
        if len(set(active)) != len(active) or not all(
            0 <= i < self.num_replicas for i in active
        ):
            raise ConfigError(f"replicas must be distinct indices < {self.num_replicas}")
        missing = [a.prompt_id for a in plan.assignments if a.prompt_id not in prompts]
        if missing:
            raise ConfigError(f"step {plan.step}: no prompt for ids {missing[:5]}")
        num_fresh = sum(1 for a in plan.assignments if plan.is_abortable(a))
        if plan.num_fresh_to_deliver > num_fresh:
            raise ProtocolError(
                f"step {plan.step}: cutoff {plan.num_fresh_to_deliver} > {num_fresh} fresh groups"
            )
        return active

    def _begin(self, plan: StepPlan, active: list[int]) -> StepRun:
        """The step's state, now the running one; its replicas out of service probed."""
        run = StepRun(plan=plan, t0=asyncio.get_running_loop().time(), queue=asyncio.Queue(),
                      active=active, health=self.health)
        self._prepare_moves(run)
        self._run = run
        self.chains = run.chains
        self.health.probe_interval_s = self.config.probe_interval_s
        for i in active:
            if not self.health.healthy[i]:
                self.health.watch(i)  # probed until it answers (the step's end stops that)
        return run

    def _watchers(self) -> list[asyncio.Task[None]]:
        """The step's watchers: hung replicas (each stopped request is read as a fault by its
        own attempt) and, with ``addresses``, replicas that moved."""
        tasks = [asyncio.create_task(self.stalls.run(lambda _r, _e: None, self._answers))]
        if self._addresses is not None:
            tasks.append(asyncio.create_task(self._follow_addresses()))
        return tasks

    def _launch_all(self, run: StepRun, prompts: Mapping[str, PromptInput]) -> None:
        """Start every group in dispatch order (a group dealt to a replica out of service
        starts elsewhere); a plan that delivers no fresh group cuts them at once."""
        plan = run.plan
        for a in sorted(plan.assignments, key=lambda a: (a.order, a.replica)):
            g = GroupRun(a, a.response_replicas(plan.group_size))
            run.groups[a.prompt_id] = g
            for r in sorted(a.all_replicas):
                if not run.ok(r):
                    run.place_off(g, r)
            self._launch(run, g, prompts)
        if plan.num_fresh_to_deliver == 0 and any(plan.is_abortable(a)
                                                  for a in plan.assignments):
            run.cut()

    async def _end(self, run: StepRun, background: list[asyncio.Task[None]]) -> None:
        """Stop what still runs of the step and keep its record of moves."""
        tasks = [g.task for g in run.groups.values() if g.task is not None]
        for t in (*tasks, *background):
            t.cancel()
        await asyncio.gather(*tasks, *background, return_exceptions=True)
        await self.health.aclose()
        self._run = None
        self.last_moves = run.rebalancer.tally if run.rebalancer else MoveTally()
        self.last_trace = run.rebalancer.trace if run.rebalancer else BalanceTrace()
        self.last_balance_error = run.balance_error
        effective = sum(a.num_moved_pieces for a in run.attempts.values())
        self.last_moves.num_effective = self.last_trace.num_effective = effective
        # the attempts (their relocation closures hold the run) and the index are cycles
        # through the run: let reference counting free them now, not the collector later
        run.attempts.clear()
        run.index = run.rebalancer = None
        for g in run.groups.values():
            g.task = None

    def _relocate(self, run: StepRun, g: GroupRun, samples: Sequence[int], replica: int,
                  url: str, exc: BaseException) -> int:
        """Responses ``samples`` of group ``g`` lost their piece on ``replica`` to a replica
        fault: take the replica out (unless it moved address since) and name where they go on
        (a group sent as one request with ``n``: all of it, a new attempt of the group)."""
        if run.url(replica) == url.rstrip("/") and run.ok(replica):
            self.health.down(run.active[replica], exc)
            run.busy_until((replica,), run.now())
        new = replica if run.ok(replica) else run.pick(g.assignment)
        for sample in samples:
            run.reseat(g, sample, new)
        if len(samples) > 1:
            g.attempt += 1
            run.num_regenerated += 1
        else:
            self.num_relocations += 1
        if self._on_progress is not None:  # reported at once, not at the next group's end
            run.queue.put_nowait(Event("relocated", g.assignment.prompt_id))
        return new

    def _launch(self, run: StepRun, g: GroupRun, prompts: Mapping[str, PromptInput]) -> None:
        """Start group ``g``'s one attempt: each response a chain (``ChainedAttempt``)."""
        g.progress = AttemptProgress()
        prompt = with_encoded_ids(prompts[g.assignment.prompt_id])
        n = run.plan.group_size
        pid = g.assignment.prompt_id
        sp = self.config.sampling
        chains = run.chains.setdefault(
            pid, [ResponseChain(sp.max_tokens, prompt.token_ids, stop=sp.stop or ()) for _ in
                  range(n)]
        )

        def relocate(samples: Sequence[int], replica: int, url: str, exc: BaseException) -> int:
            return self._relocate(run, g, samples, replica, url, exc)

        att = ChainedAttempt(
            self.piece_runner(), g.replicas, run.config or self.config, prompt, chains,
            self._forced, g.progress, relocate, self.stalls, run.active, timings=self.timings,
            priority_bucket_tokens=self._priority_bucket(run.plan),
        )
        if run.index is not None:
            att.attach(run.index, run.t0, tuple(sorted(g.assignment.all_replicas)))
        run.attempts[pid] = att
        g.task = asyncio.create_task(self._wrap(run, att, pid))

    async def _wrap(self, run: StepRun, att: ChainedAttempt, pid: str) -> None:
        try:
            out = await att.run()
        except Exception as exc:
            run.queue.put_nowait(Event("fail", pid, error=exc))
        else:
            run.queue.put_nowait(Event("done", pid, responses=tuple(out)))

    def _handle(self, run: StepRun, ev: Event) -> None:
        """One attempt's end: a group done, or a failed request (the step fails); a
        relocation changes nothing here (the step's progress is reported after it). One of a
        group no longer running (cut) is ignored."""
        g = run.groups[ev.prompt_id]
        if g.status != "running" or ev.kind == "relocated":
            return
        if ev.kind == "done":
            run.done(g, ev.responses)
            return
        replica = g.replicas[ev.error.sample if isinstance(ev.error, RequestFailedError) else 0]
        raise StepFailedError(
            f"step {run.plan.step}: prompt {ev.prompt_id!r} on replica {run.active[replica]} "
            f"({run.url(replica)}) failed: {ev.error}"
        ) from ev.error

    def _report(self, run: StepRun) -> None:
        if self._on_progress is None:
            return
        self._on_progress(
            StepProgress.of(run.plan, run.groups, run.cut_s, run.now(), self.healthy)
        )


__all__ = ["ExecutorConfig", "LiveExecutor", "ReplicaState", "StepOutcome", "StepResult"]
