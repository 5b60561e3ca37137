"""The live executor: runs a ``StepPlan`` against real (or emulated) inference servers.

All groups start at t = 0 on their replicas (in dispatch order); a spread group's responses
start on several replicas. Fresh bulk groups race for the
``num_fresh_to_deliver`` places of the batch; at that moment the remaining fresh bulk groups are
aborted (their tasks cancelled, which closes their HTTP connections). Tail and pinned groups are
always waited for. A replica fault (refused, died, timed out) takes the replica out and
regenerates its in-flight groups from scratch on a healthy replica (same pool first). A group is
delivered only from one complete attempt; nothing of an aborted or failed attempt is delivered.

Replica lifecycle (``runtime.health``): a replica taken out is probed (``GET /health``) in the
background every ``probe_interval_s`` while a step runs, and by ``probe`` between steps; a 200 re-admits it (mid-step it can
take regenerated groups again; the caller plans the next step for the new healthy count). An
``addresses`` callable (e.g. a launch state file rewritten when Ray restarts a server elsewhere)
is polled at every probe: a replica whose address changed is taken out and probed at the new one.

A crash of the live rebalancer (an exception out of its loop) is logged once (logger
``tailsieve.runtime.executor``, with its traceback) and kept in ``last_balance_error``; moves are
off for the rest of that step, and the step runs on: a move is made or not, whole, so every
response is still delivered exactly once and token-exact.
"""

from __future__ import annotations

import asyncio
import logging
import warnings
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace

from tailsieve.core.balance_trace import BalanceTrace
from tailsieve.core.outcome import StepOutcome
from tailsieve.core.plan import GroupAssignment, StepPlan
from tailsieve.core.pool import Pool
from tailsieve.errors import ConfigError, ProtocolError, ReplicaError, StepFailedError
from tailsieve.model.profiles import builtin_profile
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.runtime.attempt import (
    AttemptProgress,
    ExecutorConfig,
    ForcedLength,
    GroupAttempt,
    RequestFailedError,
)
from tailsieve.runtime.backends import Backend, PromptInput, Response, with_encoded_ids
from tailsieve.runtime.chain import SEED_WARNING, ResponseChain, check_continuable
from tailsieve.runtime.chain_attempt import ChainedAttempt
from tailsieve.runtime.health import ReplicaHealth, ReplicaState
from tailsieve.runtime.lean_http import LeanTransport
from tailsieve.runtime.rebalancer import LiveRebalancer, LiveResponse, MoveTally
from tailsieve.runtime.running_index import RunningIndex
from tailsieve.runtime.sessions.http_runner import HttpPieceRunner
from tailsieve.runtime.sessions.profile import LiveProfile
from tailsieve.runtime.stall_watch import StallWatch
from tailsieve.runtime.step_state import GroupRun, StepProgress, StepResult, build_result
from tailsieve.runtime.transport import ReplicaDownError, Transport, probe_health
from tailsieve.runtime.waste import WasteCounter

logger = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class _Event:
    kind: str  # "done" | "down" | "fail"
    prompt_id: str
    attempt: int
    replica: int
    url: str  # the replica's address when the attempt started
    responses: tuple[Response, ...] = ()
    error: BaseException | None = None


@dataclass(slots=True)
class _Run:
    plan: StepPlan
    t0: float
    queue: asyncio.Queue[_Event]
    active: list[int]  # plan replica index -> executor replica
    groups: dict[str, GroupRun] = field(default_factory=dict)
    cut_s: float | None = None
    num_fresh_done: int = 0
    discarded: list[tuple[str, AttemptProgress, float]] = field(default_factory=list)  # faults
    num_regenerated: int = 0
    busy_until_s: list[float] = field(default_factory=list)
    chains: dict[str, list[ResponseChain]] = field(default_factory=dict)  # continuation mode
    attempts: dict[str, ChainedAttempt] = field(default_factory=dict)
    rebalancer: LiveRebalancer | None = None
    balance_error: str | None = None  # the rebalancer's crash in this step (moves then off)
    index: RunningIndex | None = None  # the running responses by replica (re-balancing)
    config: ExecutorConfig | None = None  # this step's attempts' config (None: the executor's)


class LiveExecutor:
    """Executes step plans over HTTP. One instance per set of endpoints; ``aclose`` when done.

    ``forced_length(prompt_id, sample)`` switches on replay mode (max_tokens = L, ignore_eos).
    ``on_progress`` is called with a ``StepProgress`` snapshot after every group event.
    ``addresses()`` returns the current base URL of every replica (same count and order).
    ``balance_costs`` (the controller's cost model, one ``ReplicaConfig`` or one per replica)
    switches on the live rebalancer (``runtime.rebalancer``) for steps whose plan carries
    ``BalanceSettings`` when ``config.continuation`` is on (``rebalancer_class`` builds it).
    """

    rebalancer_class: type[LiveRebalancer] = LiveRebalancer

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
        if not endpoints:
            raise ConfigError("need at least one endpoint")
        self.config = config
        if config.continuation:
            check_continuable(config.sampling)  # one clear line, before any request
            if config.sampling.seed is not None:
                warnings.warn(SEED_WARNING, UserWarning, stacklevel=2)
        self._transport: Transport = transport or LeanTransport()
        self.health = ReplicaHealth(endpoints, self._probe_one, config.probe_interval_s)
        self._forced = forced_length
        self._on_progress = on_progress
        self._addresses = addresses
        self.waste = WasteCounter(config.sampling.max_tokens, forced_length)  # runtime.waste
        self._run: _Run | None = None  # the step running now
        self.num_relocations = 0  # continuation: responses continued elsewhere after a fault
        self.num_moves = 0  # continuation: responses moved by ``move``
        self.chains: dict[str, list[ResponseChain]] = {}  # continuation: the last step's chains
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
            ).time())  # hung replicas (``runtime.stall_watch``): their requests are faults
        self.runner: HttpPieceRunner | None = None  # continuation: the engine client pieces
        # go through (built for the config of the step that needs it)
        self._runner_config: ExecutorConfig | None = None
        self.timings: LiveProfile | None = None  # the cost model, with "auto" fed every
        # request's and piece's timing (``LiveProfile.record_piece``; the rollout sets it)

    @property
    def num_replicas(self) -> int:
        return len(self.health)

    @property
    def replicas(self) -> list[ReplicaState]:
        """Each replica's health (``runtime.health``), a snapshot."""
        return [self.health.state(i) for i in range(len(self.health))]

    @property
    def num_readmitted(self) -> int:
        """Replicas returned to service by a probe."""
        return self.health.num_readmitted

    @property
    def healthy(self) -> tuple[bool, ...]:
        return tuple(self.health.healthy)

    @property
    def healthy_indices(self) -> list[int]:
        return [i for i, ok in enumerate(self.health.healthy) if ok]

    def refresh_addresses(self) -> list[int]:
        """Poll ``addresses``; a replica whose URL changed is taken out (to be probed at its new
        address). Returns the indices that moved."""
        if self._addresses is None:
            return []
        urls = [u.rstrip("/") for u in self._addresses()]
        if len(urls) != len(self.health):
            raise ConfigError(
                f"address provider returned {len(urls)} addresses for {len(self.health)} replicas"
            )
        moved = [i for i, (u, v) in enumerate(zip(self.health.urls, urls, strict=True)) if u != v]
        for i in moved:
            self.health.move(i, urls[i])
            if self.runner is not None:
                self.runner.endpoints[i] = urls[i]
        return moved

    async def probe(self, only_unhealthy: bool = True) -> tuple[bool, ...]:
        """GET /health on (unhealthy) replicas; a 200 returns a replica to service."""
        self.refresh_addresses()
        await asyncio.gather(*(self.health.probe(i) for i, ok in enumerate(self.health.healthy)
                               if not ok or not only_unhealthy))
        return self.healthy

    async def _probe_one(self, replica: int) -> str:
        return await probe_health(self._transport, self.health.urls[replica],
                                  self.config.health_timeout_s)

    def _replica_of(self, url: object) -> int | None:
        """The replica a request URL goes to."""
        return next((i for i, u in enumerate(self.health.urls) if str(url).startswith(u + "/")),
                    None)

    def _cost_of(self, url: object) -> ReplicaConfig:
        """The cost model of the replica a request URL goes to (the stall watch's)."""
        i = self._replica_of(url)
        return self.stall_cost if self.balance_costs is None or i is None else self.balance_costs[i]

    async def _answers(self, url: object) -> bool:
        """A suspect replica (the stall watch's: a request URL) answers ``GET /health``."""
        i = self._replica_of(url)
        return i is not None and not await self._probe_one(i)

    async def _follow_addresses(self) -> None:
        """While a step runs: a replica that moved is followed to its new address."""
        while True:
            await asyncio.sleep(self.config.probe_interval_s)
            self.refresh_addresses()

    async def aclose(self) -> None:
        await self.health.aclose()
        await self._transport.aclose()

    def piece_runner(self) -> HttpPieceRunner:
        """The engine client every request goes through (whole responses and continuation
        pieces): the session gateway's ``HttpPieceRunner`` over this executor's transport,
        under its config (timeouts, retries, streaming), addressed by executor replica."""
        cfg = self.config
        if self.runner is None or self._runner_config is not cfg:
            self.runner = HttpPieceRunner(
                self.health.urls, cfg.backend, cfg.model, transport=self._transport,
                request_timeout_s=cfg.request_timeout_s, max_retries=cfg.max_retries,
                backoff_s=cfg.backoff_s, backoff_max_s=cfg.backoff_max_s,
                health_timeout_s=cfg.health_timeout_s,
                stream=cfg.stream and cfg.backend is not Backend.SGLANG,  # (SGLang: a sink)
                stream_interval=cfg.stream_interval,
                return_token_ids=cfg.return_token_ids or cfg.continuation)
            self._runner_config = cfg
        return self.runner

    async def resolve_model(self) -> str:
        """The served model name requests carry: ``config.model``, or when it is None the one
        model the healthy replicas serve (``HttpPieceRunner.resolve_model``; several =
        ``ConfigError``). Resolved once; the config is updated with it."""
        if self.config.model is not None:
            return self.config.model
        h = self.health
        name = await self.piece_runner().resolve_model(
            [i for i, ok in enumerate(h.healthy) if ok] or range(len(h.urls)))
        self.config = replace(self.config, model=name)
        return name

    async def chat_as_tokens(self, prompts: Mapping[str, PromptInput]) -> dict[str, PromptInput]:
        """``prompts`` with every chat prompt replaced by the token ids a healthy replica's
        ``/tokenize`` gives its messages under the model's chat template, with the generation
        prompt (``HttpPieceRunner.tokenize_chat``), so that a chat rollout can move its
        responses: a move continues a response as a token-id prompt, which vLLM's chat API
        does not take, while the chat endpoint only applies the template and then generates as
        the completions endpoint does. What is sampled is the same; the responses come back in
        the completions form."""
        if all(p.messages is None for p in prompts.values()):
            return dict(prompts)
        if not any(self.healthy):
            await self.probe()
        if not self.healthy_indices:
            raise StepFailedError("no healthy replica to tokenize the chat prompts")
        await self.resolve_model()
        runner, replica = self.piece_runner(), self.healthy_indices[0]

        async def one(p: PromptInput) -> PromptInput:
            if p.messages is None:
                return p
            try:
                ids = await runner.tokenize_chat(p.messages, replica)
            except ReplicaError as exc:
                raise ReplicaError(f"{runner.endpoints[replica]}: cannot tokenize chat prompt "
                                   f"{p.prompt_id!r} ({exc}); moves need the chat template "
                                   "applied by the server") from None
            return replace(p, messages=None, token_ids=ids)

        out = await asyncio.gather(*(one(p) for p in prompts.values()))
        return {p.prompt_id: p for p in out}

    async def run(
        self,
        plan: StepPlan,
        prompts: Mapping[str, PromptInput],
        replicas: Sequence[int] | None = None,
    ) -> StepResult:
        """Run one step; return the outcome plus the delivered responses. ``replicas[j]`` is
        the executor replica that serves the plan's replica ``j`` (default: all, in order);
        the outcome's replica indices are the plan's."""
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
        fresh = [a for a in plan.assignments if plan.is_abortable(a)]
        if plan.num_fresh_to_deliver > len(fresh):
            raise ProtocolError(
                f"step {plan.step}: cutoff {plan.num_fresh_to_deliver} > {len(fresh)} fresh groups"
            )
        if not any(self.health.healthy[i] for i in active):
            await self.probe()  # one may have recovered since it was taken out
        if not any(self.health.healthy[i] for i in active):
            raise StepFailedError(f"step {plan.step}: no healthy replica")
        await self.resolve_model()
        loop = asyncio.get_running_loop()
        run = _Run(plan=plan, t0=loop.time(), queue=asyncio.Queue(), active=active)
        relocations_before = self.num_relocations
        run.busy_until_s = [0.0] * len(active)
        if self._balances(plan):
            run.index = RunningIndex(frozenset(plan.tail_replicas))
        elif self.balance_costs and self.config.piece_tokens is not None:
            # a step the controller does not balance runs each response as one piece: pieces
            # only serve moves, and every piece end costs its response a seam
            run.config = replace(self.config, piece_tokens=None)
        self._run = run
        self.chains = run.chains
        self.health.probe_interval_s = self.config.probe_interval_s
        for i in active:
            if not self.health.healthy[i]:
                self.health.watch(i)  # probed until it answers (the step's end stops that)
        tasks_extra: list[asyncio.Task[None]] = [
            asyncio.create_task(self.stalls.run(lambda _r, _e: None, self._answers))]  # each
        # stopped request is read as a fault by its own attempt
        if self._addresses is not None:
            tasks_extra.append(asyncio.create_task(self._follow_addresses()))
        try:
            for a in sorted(plan.assignments, key=lambda a: (a.order, a.replica)):
                g = GroupRun(assignment=a, replica=a.replica, replicas=a.replicas)
                run.groups[a.prompt_id] = g
                for r in sorted(a.all_replicas):
                    if not self._ok(run, r):
                        self._move(run, g, r)
                self._launch(run, g, prompts)
            if plan.num_fresh_to_deliver == 0 and fresh:
                self._cut(run)
            balancer = self._start_rebalancer(run, active)
            if balancer is not None:
                tasks_extra.append(balancer)
            while not self._finished(run):
                ev = await run.queue.get()
                self._handle(run, ev, prompts)
                if ev.kind == "done" and run.rebalancer is not None:
                    run.rebalancer.poke()
                self._report(run)
        finally:
            tasks = [g.task for g in run.groups.values() if g.task is not None]
            for t in (*tasks, *tasks_extra):
                t.cancel()
            await asyncio.gather(*tasks, *tasks_extra, return_exceptions=True)
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
        return build_result(
            run.plan,
            run.groups,
            run.cut_s,
            run.discarded,
            run.num_regenerated,
            run.busy_until_s,
            self.waste,
            run.t0,
            self.num_relocations - relocations_before,
        )

    # -- internals ---------------------------------------------------------------------------

    def _now(self, run: _Run) -> float:
        return asyncio.get_running_loop().time() - run.t0

    def _url(self, run: _Run, replica: int) -> str:
        """The address of plan replica ``replica``."""
        return self.health.urls[run.active[replica]]

    def _ok(self, run: _Run, replica: int) -> bool:
        """Whether plan replica ``replica`` is in service."""
        return self.health.healthy[run.active[replica]]

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
        if not att.move(sample, to_replica, self._url(run, to_replica)):
            return False
        g.replicas = tuple(to_replica if j == sample else r for j, r in enumerate(g.replicas))
        g.replica = g.replicas[0]
        self.num_moves += 1
        return True

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

    def _start_rebalancer(self, run: _Run, active: list[int]) -> asyncio.Task[None] | None:
        if not self._balances(run.plan):
            return None
        costs = self.balance_costs
        assert costs is not None and run.plan.balance is not None
        run.rebalancer = self.rebalancer_class(
            self, run.plan.balance, [costs[i] for i in active],
            lambda: [self._ok(run, r) for r in range(len(active))], lambda: self._now(run),
        )
        run.rebalancer.num_launched = len(run.plan.assignments) * run.plan.group_size
        if run.index is not None:
            run.index.on_complete = run.rebalancer.poke  # a check at each response completion
            run.index.on_moved = run.rebalancer.took_effect  # recorded in its trace
        task = asyncio.create_task(run.rebalancer.loop())
        task.add_done_callback(lambda t: self._balance_crashed(run, t))
        return task

    def _balance_crashed(self, run: _Run, task: asyncio.Task[None]) -> None:
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
        they change (``runtime.running_index``; the same as an index of ``running_responses``)."""
        run = self._run
        return run.index if run is not None else None

    @staticmethod
    def _unindex(run: _Run, g: GroupRun) -> None:
        """Group ``g`` stopped running (done or cut): its responses leave the index."""
        att = run.attempts.get(g.assignment.prompt_id)
        if run.index is not None and att is not None:
            run.index.drop_owner(att)

    def running_responses(self, at_s: float | None = None) -> list[LiveResponse]:
        """Continuation mode, during ``run``: every response still generating, where it runs
        (plan replica) and the context tokens known (prompt + generated up to its last seam
        + what its running piece streamed); running pieces' ages as of ``at_s`` (seconds on
        the step's clock; default now)."""
        run = self._run
        if run is None:
            return []
        tails = set(run.plan.tail_replicas)
        now = asyncio.get_running_loop().time() if at_s is None else run.t0 + at_s
        out = []
        for pid, att in run.attempts.items():
            g = run.groups[pid]
            if g.status != "running":
                continue
            dealt = tuple(sorted(g.assignment.all_replicas))
            where = att.where
            for i, chain in enumerate(att.chains):
                if chain.final is not None:
                    continue
                rep = where[i][0]
                p = att.prompt_tokens(i)
                ctx = p + chain.num_generated + att.streamed_tokens(i)
                out.append(LiveResponse(pid, i, rep, ctx, p, dealt, int(rep in tails),
                                        att.running_piece(i, now)))
        return out

    def generated(self, prompt_id: str) -> list[tuple[int, ...]]:
        """Continuation mode: the token ids each response of a running group has generated
        up to its last seam."""
        run = self._run
        chains = run.chains.get(prompt_id, []) if run is not None else []
        return [c.generated_ids for c in chains]

    def _relocate(
        self, run: _Run, g: GroupRun, sample: int, replica: int, url: str, exc: BaseException
    ) -> tuple[int, str]:
        """A response's piece failed with ``ReplicaDownError``: take the replica out (unless it
        moved address since) and name where the response continues."""
        if self._url(run, replica) == url.rstrip("/") and self._ok(run, replica):
            self.health.down(run.active[replica], exc)
            run.busy_until_s[replica] = max(run.busy_until_s[replica], self._now(run))
        new = replica if self._ok(run, replica) else self._pick(run, g.assignment)
        g.replicas = tuple(new if j == sample else r for j, r in enumerate(g.replicas))
        g.replica = g.replicas[0]
        self.num_relocations += 1
        return new, self._url(run, new)

    def _launch(self, run: _Run, g: GroupRun, prompts: Mapping[str, PromptInput]) -> None:
        g.progress = AttemptProgress()
        prompt = with_encoded_ids(prompts[g.assignment.prompt_id])
        if self.config.continuation:
            self._launch_chains(run, g, prompt)
            return
        where = g.replicas or (g.replica,)
        urls = tuple(self._url(run, r) for r in where)
        targets = [run.active[r] for r in g.replicas or where * run.plan.group_size]
        attempt = GroupAttempt(self.piece_runner(), targets, self.config, prompt, self._forced,
                               g.progress, self.stalls, self.timings)
        g.task = asyncio.create_task(
            self._wrap(run, attempt, g.assignment.prompt_id, g.attempt, where, urls)
        )

    def _launch_chains(self, run: _Run, g: GroupRun, prompt: PromptInput) -> None:
        n = run.plan.group_size
        if not g.replicas:
            g.replicas = (g.replica,) * n
        pid = g.assignment.prompt_id
        sp = self.config.sampling
        chains = run.chains.setdefault(
            pid, [ResponseChain(sp.max_tokens, prompt.token_ids, stop=sp.stop or ()) for _ in
                  range(n)]
        )
        where = [(r, self._url(run, r)) for r in g.replicas]

        def relocate(sample: int, replica: int, url: str, exc: BaseException) -> tuple[int, str]:
            return self._relocate(run, g, sample, replica, url, exc)

        att = ChainedAttempt(
            self.piece_runner(), where, run.config or self.config, prompt, chains,
            self._forced, g.progress, relocate, self.stalls, run.active, timings=self.timings,
            priority_bucket_tokens=self._priority_bucket(run.plan),
        )
        old = run.attempts.get(pid)
        if run.index is not None:
            if old is not None:
                run.index.drop_owner(old)
            att.attach(run.index, run.t0, tuple(sorted(g.assignment.all_replicas)))
        run.attempts[pid] = att
        urls = tuple(u for _, u in where)
        g.task = asyncio.create_task(self._wrap(run, att, pid, g.attempt, g.replicas, urls))

    async def _wrap(
        self,
        run: _Run,
        att: GroupAttempt | ChainedAttempt,
        pid: str,
        k: int,
        where: tuple[int, ...],
        urls: tuple[str, ...],
    ) -> None:
        replica, url = where[0], urls[0]
        try:
            out = await att.run()
        except ReplicaDownError as exc:
            i = att.down_sample if len(where) > 1 else 0
            run.queue.put_nowait(_Event("down", pid, k, where[i], urls[i], error=exc))
        except Exception as exc:
            failed = exc.sample if isinstance(exc, RequestFailedError) else 0
            i = failed if len(where) > 1 else 0  # the replica that answered the request
            run.queue.put_nowait(_Event("fail", pid, k, where[i], urls[i], error=exc))
        else:
            run.queue.put_nowait(_Event("done", pid, k, replica, url, responses=tuple(out)))

    def _handle(self, run: _Run, ev: _Event, prompts: Mapping[str, PromptInput]) -> None:
        g = run.groups[ev.prompt_id]
        if g.status != "running" or g.attempt != ev.attempt:
            return  # stale: the attempt was aborted or replaced
        now = self._now(run)
        if ev.kind == "done":
            g.status, g.completion_s, g.responses = "done", now, ev.responses
            self._unindex(run, g)
            for r in {g.replica, *g.replicas}:
                run.busy_until_s[r] = max(run.busy_until_s[r], now)
            if run.plan.is_abortable(g.assignment):
                run.num_fresh_done += 1
                if run.num_fresh_done == run.plan.num_fresh_to_deliver:
                    self._cut(run)
        elif ev.kind == "down" and ev.url != self._url(run, ev.replica):
            # the replica moved since this attempt began (its old server is gone): regenerate
            # the group where it was placed (the replica answers at its new address), but the
            # replica is not at fault
            self._regenerate(run, [g], prompts)
        elif ev.kind == "down":
            assert ev.error is not None
            self._replica_down(run, ev.replica, ev.error, prompts)
        else:
            index = run.active[ev.replica]
            raise StepFailedError(
                f"step {run.plan.step}: prompt {ev.prompt_id!r} on replica {index} "
                f"({ev.url}) failed: {ev.error}"
            ) from ev.error

    def _replica_down(
        self, run: _Run, replica: int, exc: BaseException, prompts: Mapping[str, PromptInput]
    ) -> None:
        self.health.down(run.active[replica], exc)
        now = self._now(run)
        run.busy_until_s[replica] = max(run.busy_until_s[replica], now)
        victims = [g for g in run.groups.values() if g.status == "running" and g.runs_on(replica)]
        self._regenerate(run, victims, prompts, dead=replica)

    def _regenerate(
        self,
        run: _Run,
        victims: list[GroupRun],
        prompts: Mapping[str, PromptInput],
        dead: int | None = None,
    ) -> None:
        """Start ``victims`` again from scratch; the responses they had on replica ``dead`` (if
        given) move to a healthy replica."""
        for g in victims:
            if g.task is not None:
                g.task.cancel()
            run.discarded.append((g.assignment.prompt_id, g.progress, run.t0 + self._now(run)))
            if dead is not None:
                self._move(run, g, dead)
            g.attempt += 1
            run.num_regenerated += 1
            self._launch(run, g, prompts)

    def _move(self, run: _Run, g: GroupRun, dead: int) -> None:
        """Re-place the responses a group had on replica ``dead`` onto a healthy one."""
        new = self._pick(run, g.assignment)
        if g.replicas:
            g.replicas = tuple(new if r == dead else r for r in g.replicas)
            g.replica = g.replicas[0]
        else:
            g.replica = new

    def _pick(self, run: _Run, a: GroupAssignment) -> int:
        """A healthy replica for a displaced group: same pool first, fewest running groups."""
        pool = run.plan.tail_replicas if a.pool is Pool.TAIL else run.plan.bulk_replicas
        healthy = [i for i in range(len(run.active)) if self._ok(run, i)]
        if not healthy:
            reasons = "; ".join(f"{self._url(run, i)}: {self.health.last_error[run.active[i]]}"
                                for i in range(len(run.active)))
            raise StepFailedError(
                f"step {run.plan.step}: no healthy replica left for prompt "
                f"{a.prompt_id!r} ({reasons})"
            )
        same = [i for i in healthy if i in pool] or healthy
        load = {i: 0 for i in same}
        for g in run.groups.values():
            if g.status == "running":
                for r in g.replicas or (g.replica,):
                    if r in load:
                        load[r] += 1
        return min(same, key=lambda i: (load[i], i))

    def _cut(self, run: _Run) -> None:
        run.cut_s = self._now(run)
        for g in run.groups.values():
            if g.status == "running" and run.plan.is_abortable(g.assignment):
                if g.task is not None:
                    g.task.cancel()
                g.status = "aborted"
                g.completion_s = run.cut_s
                self._unindex(run, g)
                for r in {g.replica, *g.replicas}:
                    run.busy_until_s[r] = max(run.busy_until_s[r], run.cut_s)

    def _finished(self, run: _Run) -> bool:
        if run.num_fresh_done < run.plan.num_fresh_to_deliver:
            return False
        return all(
            g.status == "done"
            for g in run.groups.values()
            if not run.plan.is_abortable(g.assignment)
        )

    def _report(self, run: _Run) -> None:
        if self._on_progress is None:
            return
        self._on_progress(
            StepProgress.of(run.plan, run.groups, run.cut_s, self._now(run), self.healthy)
        )


__all__ = ["ExecutorConfig", "LiveExecutor", "ReplicaState", "StepOutcome", "StepResult"]
