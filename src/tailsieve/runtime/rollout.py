"""The Python API an RL trainer calls once per step.

::

    async with TailSieveRollout(endpoints, RolloutConfig(num_groups=64, group_size=8)) as ro:
        for batch_prompts in dataloader:              # >= ro.num_fresh_needed() prompts each
            batch = await ro.step(batch_prompts)      # exactly N complete groups
            train_on(batch.groups)
            save({"rollout": ro.state_dict(), ...})
        last = await ro.flush()                       # drain carried prompts at the end

Prompt flow: the caller hands over new prompts; TailSieve queues them (``num_pending``) and
draws from that queue in order. A prompt aborted at a cutoff is *carried*: TailSieve keeps its
content and delivers it (regenerated from scratch) in the next step. ``num_fresh_needed()`` is
how many more prompts the next ``step`` needs beyond the queue; passing more is fine (they wait
in the queue, and are part of ``state_dict``).
"""

from __future__ import annotations

import asyncio
import dataclasses
import logging
import math
import time
from collections import deque
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field, replace
from types import TracebackType
from typing import Any

from tailsieve.control.config import ControllerConfig
from tailsieve.control.factory import make_controller
from tailsieve.core.protocol import ProtocolConfig, RolloutProtocol
from tailsieve.core.stream import PromptStream
from tailsieve.core.timeline import StepTimeline
from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.model.profiles import check_profile, parse_profile
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.model.throughput import ThroughputModel
from tailsieve.runtime.backends import Backend, PromptInput, SamplingParams
from tailsieve.runtime.executor import LiveExecutor
from tailsieve.runtime.executor_config import ExecutorConfig, ForcedLength
from tailsieve.runtime.moves import MOVING_POLICY, MoveSettings, sampling_off_reason
from tailsieve.runtime.observe import RuntimeMetrics, StepLog, StepMetrics, waste_fields
from tailsieve.runtime.sessions.profile import STAND_IN, LiveProfile
from tailsieve.runtime.stall_watch import StallSettings
from tailsieve.runtime.step_state import GroupResponses, StepProgress
from tailsieve.runtime.tasks import gather_all
from tailsieve.runtime.transport import ReplicaDownError, Transport

PromptLike = PromptInput | dict[str, Any]
logger = logging.getLogger(__name__)
MODEL_POLICIES = ("tailsieve", "tailsieve-fixed")  # policies whose controller uses the profile
LIVE_PROFILE = "auto"  # default cost model of a live rollout (RolloutConfig, the CLI): fitted
# online from the rollout's own timings (``runtime.sessions.profile``)
PRIORITY_CHECK_S = 60.0  # the start-up check of drain priority waits this long per replica


@dataclass(frozen=True, slots=True)
class RolloutConfig:
    """Settings of a live rollout.

    Moves are on by default: with the ``tailsieve`` policy on a backend that can continue a
    response (vLLM's completions API, SGLang), running responses move between replicas while
    a step runs (continuation; vLLM without streaming in pieces of ``moves.PIECE_TOKENS``), and
    the controller's balance gate switches them off for steps where they are not measured to
    pay. ``moves=False`` turns them off: every response is one request, dealt round-robin.
    Where moves cannot run (another policy, a history-dependent penalty, stop strings on
    SGLang) they are off and ``moves_off_reason`` says why (``move``: the one set of move
    settings, ``runtime.moves``) (logged once when the rollout is
    made, and the runtime's ``/metrics`` gauge ``tailsieve_moves_off{reason=...}``). With
    moves on, ``vllm-chat`` prompts are sent as the token ids the server's ``/tokenize`` gives
    their messages, on the completions API (``LiveExecutor.chat_as_tokens``; the same template, the
    same sampling).

    ``profile="auto"`` (the default): the controller's cost model is fitted online from the
    timings of the rollout's own requests (``model.online_profile``: ``tau(b) + k * C`` and
    the prefill rate), after a short probe of the replicas when the rollout starts;
    ``"auto:NAME"`` uses the named profile (or file) instead of the probe until the fit is
    trusted; a name or a file alone fixes the model.
    """

    num_groups: int  # N: groups per delivered batch
    group_size: int = 8  # n: responses per group
    policy: str = "tailsieve"  # uniform | uniform-requests | tailsieve-fixed | tailsieve
    backend: Backend = Backend.VLLM
    model: str | None = None  # served model name; None = the one model the servers serve
    sampling: SamplingParams = field(default_factory=SamplingParams)
    replay: ForcedLength | None = None  # forced length per (prompt_id, sample): replay mode
    profile: str = LIVE_PROFILE  # controller's cost model: "auto" (fitted online, probe first),
    # "auto:NAME" (fitted online, NAME until then), or a profile name / JSON path (fixed)
    split_groups: bool = True
    stream: bool = False
    stream_interval: int | None = None  # stream: tokens per streamed chunk on vLLM (vLLM's
    # stream_interval): moves keep what was streamed at a fraction of per-token streaming's CPU
    request_timeout_s: float | None = 3600.0
    stall: StallSettings = field(default_factory=StallSettings)  # when a replica is hung
    max_retries: int = 3
    controller: dict[str, Any] = field(default_factory=dict)  # ControllerConfig overrides
    return_token_ids: bool = True  # per-response token ids from vLLM (False: counts only)
    moves: bool = True  # move running responses between replicas while a step runs, where
    # they can run (see ``moves_off_reason``); False: no moves, round-robin plans
    continuation: bool | None = None  # responses as chains of pieces (a fault then loses only
    # the running piece); None: on exactly when moves run
    piece_tokens: int | None = None  # continuation: max tokens per piece (None: unbounded, or
    # moves.PIECE_TOKENS when moves need pieces: vLLM, unstreamed)
    move: MoveSettings = field(init=False, repr=False, compare=False)  # derived from the above

    def __post_init__(self) -> None:
        if self.num_groups < 1 or self.group_size < 1:
            raise ConfigError("num_groups and group_size must be >= 1")
        object.__setattr__(self, "backend", Backend(self.backend))
        check_profile(self.profile)
        blocked = sampling_off_reason(self.backend, self.sampling) or (
            "continuation=False" if self.continuation is False else None) or (
            "stream=True on SGLang: a streamed piece there cannot be cut and continued"
            if self.stream and self.backend is Backend.SGLANG else None)
        move = MoveSettings(self.moves, self.policy, self.piece_tokens, stall=self.stall,
                            blocked=blocked)
        if self.continuation is None:
            object.__setattr__(self, "continuation", move.on)
        if not self.split_groups and self.continuation:
            raise ConfigError(
                "split_groups=False (--no-split: one request with n responses per group) "
                "cannot run with continuation, which moves need (on by default): each response "
                "is then its own chain of requests; turn moves off (moves=False, --no-moves) "
                "or keep split_groups"
            )
        if self.piece_tokens is not None and not self.continuation:
            raise ConfigError(
                f"piece_tokens={self.piece_tokens} needs continuation (moves on, or "
                f"continuation=True); moves are off: {move.off_reason}"
            )
        interrupts = self.stream or self.backend is Backend.SGLANG  # a move ends a piece at once
        if move.on:
            move = replace(move, piece_tokens=move.piece_cap(interrupts))
            object.__setattr__(self, "piece_tokens", move.piece_tokens)
        object.__setattr__(self, "move", move)
        if self.drain_priority and (self.backend is Backend.SGLANG or not move.on):
            raise ConfigError(
                "drain priority (--drain-priority) is sent with the pieces of a balanced step "
                "to vLLM servers started with --scheduling-policy priority; "
                + ("SGLang pieces carry none" if self.backend is Backend.SGLANG
                   else f"moves are off: {move.off_reason}"))

    @property
    def drain_priority(self) -> bool:
        """Whether the balanced steps' pieces carry an engine priority (``core.drain``)."""
        return bool(self.controller.get("drain_priority"))

    @property
    def moves_off_reason(self) -> str | None:
        """Why running responses do not move in this rollout (None: they do)."""
        return self.move.off_reason

    @property
    def moves_active(self) -> bool:
        """Whether running responses move (``moves`` on and nothing in the way)."""
        return self.move.on

    @property
    def chat_as_tokens(self) -> bool:
        """Chat prompts go as token ids on the completions API (vllm-chat with continuation)."""
        return self.backend is Backend.VLLM_CHAT and bool(self.continuation)

    @property
    def fits_profile(self) -> bool:
        """Whether the controller's model is fitted online (``auto`` and a policy that uses
        a model)."""
        return parse_profile(self.profile)[0] and self.policy in MODEL_POLICIES

    def executor_config(self) -> ExecutorConfig:
        return ExecutorConfig(
            backend=Backend.VLLM if self.chat_as_tokens else self.backend,
            model=self.model,
            sampling=self.sampling,
            split_groups=self.split_groups,
            stream=self.stream,
            stream_interval=self.stream_interval,
            request_timeout_s=self.request_timeout_s,
            stall=self.stall,
            max_retries=self.max_retries,
            return_token_ids=self.return_token_ids,
            continuation=bool(self.continuation),
            piece_tokens=self.piece_tokens,
        )


@dataclass(frozen=True, slots=True)
class RolloutBatch:
    """One delivered batch: ``groups`` in plan order (tail, carried, fresh), plus metrics."""

    step: int
    groups: tuple[GroupResponses, ...]
    metrics: StepMetrics
    timeline: StepTimeline | None = None  # per-replica spans of this step (for plots)

    def rows(self) -> Iterator[dict[str, Any]]:
        """One dict per response (for JSONL export); ``replica`` is the replica that response
        ran on (executor index, as in the launch state file), ``home_replica`` its group's."""
        for g in self.groups:
            for i, r in enumerate(g.responses):
                yield {
                    "prompt_id": g.prompt_id,
                    "sample": i,
                    "text": r.text,
                    "response_tokens": r.num_tokens,
                    "finish_reason": r.finish_reason,
                    "pool": g.pool.value,
                    "replica": g.response_replica(i),
                    "home_replica": g.replica,
                    "attempt": g.attempt,
                }


class TailSieveRollout:
    """Async context manager driving TailSieve steps against live replicas."""

    def __init__(
        self,
        endpoints: Sequence[str],
        config: RolloutConfig,
        transport: Transport | None = None,
        on_progress: Callable[[StepProgress], None] | None = None,
        metrics: RuntimeMetrics | None = None,
        step_log: StepLog | None = None,
        addresses: Callable[[], Sequence[str]] | None = None,
    ) -> None:
        self.config = config
        r = len(endpoints)
        ccfg = ControllerConfig(
            num_groups=config.num_groups,
            num_replicas=r,
            group_size=config.group_size,
            **config.controller,
        )
        fixed = parse_profile(config.profile)[1] or STAND_IN  # a model-free policy fits none
        self.live = LiveProfile(config.profile if config.fits_profile else fixed)
        profile = self.live.model  # the controller's until a refit of the steps' pieces
        controller = make_controller(config.policy, ccfg, profile, moves=config.moves_active)
        self.protocol = RolloutProtocol(
            ProtocolConfig(
                num_replicas=r, num_groups=config.num_groups, group_size=config.group_size
            ),
            controller,
        )
        self.executor = LiveExecutor(
            endpoints,
            config.executor_config(),
            transport=transport,
            forced_length=config.replay,
            on_progress=on_progress,
            addresses=addresses,
            balance_costs=ReplicaConfig.from_profile(profile) if config.moves_active else None,
        )
        self.executor.stall_cost = ReplicaConfig.from_profile(profile)
        self.executor.timings = self.live
        self.metrics = metrics
        self.step_log = step_log
        _log_moves_off(config)
        if metrics is not None:
            metrics.record_moves(config.moves_off_reason)
        self._pending: deque[PromptInput] = deque()
        self._carried: dict[str, PromptInput] = {}  # content of carried candidates
        self._seen: set[str] = set()  # ids queued or carried (duplicate guard)
        self._active: list[int] = list(range(r))  # replicas the next step is planned for

    async def __aenter__(self) -> TailSieveRollout:
        healthy = await self.executor.probe(only_unhealthy=False)
        if not any(healthy):
            reasons = "; ".join(f"{r.url}: {r.reason}" for r in self.executor.replicas)
            await self.aclose()
            raise ReplicaError(f"no replica answers /health ({reasons})")
        self._set_active()
        try:
            await self.executor.resolve_model()
            if self.config.drain_priority:
                await self._check_priority()
            if self.live.needs_probe:
                await self._probe()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def _check_priority(self) -> None:
        """Drain priority on: every replica healthy at start must take a request priority,
        asked once each before the first step (one request of one token per replica, within
        ``PRIORITY_CHECK_S``), so that a server without ``--scheduling-policy priority`` is named
        now rather than failing a step. A replica that faults or does not answer in time is
        left to the health model (it is not checked when it comes back)."""
        runner = self.executor.piece_runner()

        async def refuses(replica: int) -> str:
            try:
                return await asyncio.wait_for(runner.refuses_priority(replica), PRIORITY_CHECK_S)
            except (ReplicaDownError, TimeoutError):
                return ""  # the health model's to judge

        refused = [w for w in await gather_all(*map(refuses, self._active)) if w]
        if refused:
            raise ConfigError(
                "drain priority (--drain-priority) needs every vLLM server started with "
                "--scheduling-policy priority (or run without --drain-priority); refused by "
                + "; ".join(refused))

    async def _probe(self) -> None:
        """``profile="auto"`` without a fallback: lockstep rounds on the healthy replicas
        (``runtime.sessions.auto_probe``); their curve is the model until the fit is ready."""
        cfg = self.config
        load = math.ceil(cfg.num_groups * cfg.group_size / max(len(self._active), 1))
        t0 = time.perf_counter()
        got = await self.live.probe(self.executor.piece_runner(), self._active, load)
        self._refresh_profile()
        logger.info("TailSieve auto profile: probed %d replica(s) in %.1f s: %s",
                    len(self._active),
                    time.perf_counter() - t0, ", ".join(
                        f"tau({p.batch_size}) = {p.step_s * 1e3:.3g} ms" for p in got.points))

    def _refresh_profile(self) -> None:
        """Profile ``auto``: hand the latest fit (or the fallback) to the controller and to
        the live rebalancer's move pricing."""
        model = self.live.refit()
        if model is not None:
            self._use_profile(model)

    def _use_profile(self, model: ThroughputModel) -> None:
        """The controller plans with ``model``; the live rebalancer prices each replica at
        its own fitted speed (``LiveProfile.speeds``, keyed by the replica's URL), so
        responses move off a straggler."""
        self.protocol.controller.set_throughput(model)
        self.executor.stall_cost = ReplicaConfig.from_profile(model)  # hung-replica limits
        if self.executor.balance_costs is not None:
            cfg = ReplicaConfig.from_profile(model)
            self.executor.balance_costs = [cfg.scaled(f) for f in self.live.speed_factors(
                r.url for r in self.executor.replicas)]

    async def __aexit__(
        self, et: type[BaseException] | None, e: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self.executor.aclose()

    @property
    def profile(self) -> ThroughputModel:
        """The cost model the controller plans with now."""
        return self.live.model

    @property
    def num_pending(self) -> int:
        return len(self._pending)

    @property
    def num_carried(self) -> int:
        return len(self.protocol.candidates)

    def num_fresh_needed(self) -> int:
        """New prompts the next ``step`` needs beyond those already queued."""
        return max(0, self.protocol.num_fresh_needed() - len(self._pending))

    def _add(self, prompts: Iterable[PromptLike]) -> None:
        for p in prompts:
            pi = p if isinstance(p, PromptInput) else PromptInput.from_dict(p, "prompt")
            if pi.prompt_id in self._seen:
                raise ConfigError(f"prompt id {pi.prompt_id!r} is already queued or carried")
            self._seen.add(pi.prompt_id)
            self._pending.append(pi)

    def _draw(self, by_id: dict[str, PromptInput]) -> Iterator[str]:
        while self._pending:
            p = self._pending.popleft()
            by_id[p.prompt_id] = p
            yield p.prompt_id

    async def step(self, new_prompts: Iterable[PromptLike] = ()) -> RolloutBatch:
        """Run one step and return exactly ``num_groups`` complete groups."""
        self._add(new_prompts)
        need = self.protocol.num_fresh_needed()
        if await self._revive():
            # re-planned for the replicas that answer now: the caller fed the need it was
            # told, so only the groups to deliver must be there (fewer extra ones may start)
            need = min(self.protocol.num_fresh_needed(), max(
                need, self.protocol.num_fresh_to_deliver()))  # fmt: skip
        if len(self._pending) < need:
            raise ConfigError(
                f"step {self.protocol.step} needs {need} fresh prompts, {len(self._pending)} "
                "queued; pass at least num_fresh_needed() new prompts or call flush()"
            )
        return await self._run(flush=False)

    async def flush(self) -> RolloutBatch | None:
        """Deliver all carried prompts (no fresh ones); None when nothing is carried."""
        if not self.protocol.candidates:
            return None
        await self._revive()
        return await self._run(flush=True)

    async def _revive(self) -> bool:
        """No replica of the planned set is healthy (a failed step): probe and re-plan now.
        True when it did."""
        if any(self.executor.replicas[i].healthy for i in self._active):
            return False
        await self.refresh_replicas()
        return True

    @property
    def active_replicas(self) -> list[int]:
        """Replicas (executor indices) the next step is planned for."""
        return list(self._active)

    def _set_active(self) -> None:
        active = self.executor.healthy_indices
        if active:
            self._active = active
            self.protocol.set_num_replicas(len(active))  # the controller re-plans m

    async def refresh_replicas(self) -> list[int]:
        """Probe the replicas now and plan the next step for the healthy ones (done after every
        step; call it to pick up a change sooner). Returns ``active_replicas``."""
        await self.executor.probe()
        self._set_active()
        return self.active_replicas

    async def _run(self, flush: bool) -> RolloutBatch:
        t0 = time.perf_counter()
        active = self._active
        by_id: dict[str, PromptInput] = dict(self._carried)
        plan = self.protocol.plan_step(PromptStream(self._draw(by_id)), flush=flush)
        try:
            if self.config.chat_as_tokens:
                by_id = await self.executor.chat_as_tokens(by_id)
            result = await self.executor.run(plan, by_id, active)
        except BaseException:
            # the step failed: put its fresh prompts back in front of the queue, in order
            for pid in reversed(plan.fresh_prompt_ids):
                self._pending.appendleft(by_id[pid])
            self.protocol.abandon_step(plan)
            await self.refresh_replicas()
            raise
        self.protocol.update_from_outcome(plan, result.outcome)
        used = self.profile
        self._refresh_profile()
        # failed replicas out, recovered ones back: num_fresh_needed() is exact for the next step
        await self.refresh_replicas()
        delivered = {g.prompt_id for g in result.outcome.delivered}
        self._seen -= delivered
        self._carried = {pid: by_id[pid] for pid in self.protocol.candidates}
        out = result.outcome
        metrics = StepMetrics(
            step=plan.step,
            policy=self.config.policy,
            num_groups=len(out.delivered),
            q=plan.q,
            m=plan.m,
            makespan_s=out.makespan_s,
            tail_time_s=out.tail_time_s,
            bulk_cut_s=out.bulk_cut_s,
            wall_s=time.perf_counter() - t0,
            num_launched=plan.num_launched,
            num_aborted=len(out.aborted),
            num_regenerated=out.num_regenerated,
            generated_tokens=out.generated_tokens,
            wasted_tokens=out.wasted_tokens,
            estimated_wasted_tokens=out.estimated_wasted_tokens,
            delivered_tokens=sum(g.total_tokens for g in out.delivered),
            num_carried_next=len(self.protocol.candidates),
            num_healthy_replicas=sum(self.executor.healthy),
            is_flush=flush,
            num_planned_replicas=len(active),
            num_readmitted=self.executor.num_readmitted,
            num_moves=self.executor.last_moves.num_moves,
            moved_tokens=self.executor.last_moves.moved_tokens,
            prefill_tokens=self.executor.last_moves.prefill_tokens,
            prefill_s=self.executor.last_moves.prefill_s,
            num_relocated=out.num_relocated,
            moves=self.config.moves_active and plan.balance is not None,
            num_rebalancer_errors=int(self.executor.last_balance_error is not None),
            rebalancer_error=self.executor.last_balance_error,
            **waste_fields(out.waste),
            moves_off_reason=self.config.moves_off_reason or "",
            profile=used.name,
            profile_fitted=used.provenance.get("kind") == "online-fit",
        )
        if self.metrics is not None:
            self.metrics.record(metrics, self.executor.healthy)
            if (online := self.live.online) is not None:
                q = online.quality
                self.metrics.record_profile(online.ready, online.num_observations,
                                            q.rel_rmse if q else 0.0)
        if self.step_log is not None:
            self.step_log.write(metrics)
        groups = tuple(
            dataclasses.replace(
                d := result.groups[g.prompt_id],
                replica=active[d.replica],
                replicas=tuple(active[r] for r in d.replicas),
            )
            for g in out.delivered
        )
        return RolloutBatch(
            step=plan.step,
            groups=groups,
            metrics=metrics,
            timeline=StepTimeline.from_step(plan, out),
        )

    def state_dict(self) -> dict[str, Any]:
        """Protocol (candidates, controller) + queued and carried prompt contents; JSON-safe.
        With ``profile="auto"`` also the model in use (not the timed pieces behind it)."""
        out = {
            "protocol": self.protocol.state_dict(),
            "pending": [_prompt_dict(p) for p in self._pending],
            "carried": [_prompt_dict(p) for p in self._carried.values()],
        }
        if self.live.online is not None:
            out["profile"] = self.profile.to_dict()
        return out

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict``. With ``profile="auto"`` the saved model is used (and no
        probe is needed) until the resumed rollout's own pieces fit a new one."""
        saved = state.get("profile")
        if self.live.online is not None and saved is not None:
            model = ThroughputModel.from_dict(saved, where="rollout state: profile")
            self.live.restore(model)
            self._use_profile(model)  # before the controller's state (measured against it)
        self.protocol.load_state_dict(state["protocol"])
        self._pending = deque(PromptInput.from_dict(d, "state") for d in state["pending"])
        self._carried = {
            p.prompt_id: p for p in (PromptInput.from_dict(d, "state") for d in state["carried"])
        }
        self._seen = {p.prompt_id for p in self._pending} | set(self._carried)


def _log_moves_off(config: RolloutConfig) -> None:
    """Say once why moves are off: a warning when something blocks moves the policy would
    make, info when they were switched off, debug for a policy that never moves."""
    why = config.moves_off_reason
    if why is None:
        return
    if config.policy != MOVING_POLICY:
        level = logging.DEBUG
    else:
        level = logging.INFO if not config.moves else logging.WARNING
    logger.log(level, "TailSieve: moves are off: %s", why)


def _prompt_dict(p: PromptInput) -> dict[str, Any]:
    d: dict[str, Any] = {"prompt_id": p.prompt_id}
    if p.text is not None:
        d["prompt"] = p.text
    if p.token_ids is not None:
        d["prompt_token_ids"] = list(p.token_ids)
    if p.messages is not None:
        d["messages"] = [dict(m) for m in p.messages]
    return d
