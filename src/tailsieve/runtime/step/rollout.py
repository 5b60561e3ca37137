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

import logging
import math
import time
from collections.abc import Callable, Iterable, Sequence
from types import TracebackType
from typing import Any

from tailsieve.control.config import ControllerConfig
from tailsieve.control.factory import make_controller
from tailsieve.core.protocol import ProtocolConfig, RolloutProtocol
from tailsieve.core.stream import PromptStream
from tailsieve.errors import ConfigError, ReplicaError
from tailsieve.model.profiles import parse_profile
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.model.throughput import ThroughputModel
from tailsieve.runtime.engine.backends import PromptInput, PromptLike
from tailsieve.runtime.engine.transport import Transport
from tailsieve.runtime.execution.moves import MOVING_POLICY
from tailsieve.runtime.execution.profile import STAND_IN, LiveProfile
from tailsieve.runtime.step.executor import LiveExecutor
from tailsieve.runtime.step.observe import RuntimeMetrics, StepLog
from tailsieve.runtime.step.prompt_queue import PromptQueue
from tailsieve.runtime.step.rollout_batch import RolloutBatch, step_metrics
from tailsieve.runtime.step.rollout_config import RolloutConfig
from tailsieve.runtime.step.step_state import StepProgress

logger = logging.getLogger(__name__)


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
        self._prompts = PromptQueue()
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
                await self.executor.check_priority(self._active)
            if self.live.needs_probe:
                await self._probe()
        except BaseException:
            await self.aclose()
            raise
        return self

    async def _probe(self) -> None:
        """``profile="auto"`` without a fallback: lockstep rounds on the healthy replicas
        (``runtime.execution.auto_probe``); their curve is the model until the fit is ready."""
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
        return len(self._prompts.pending)

    @property
    def num_carried(self) -> int:
        return len(self.protocol.candidates)

    def num_fresh_needed(self) -> int:
        """New prompts the next ``step`` needs beyond those already queued."""
        return max(0, self.protocol.num_fresh_needed() - self.num_pending)

    async def step(self, new_prompts: Iterable[PromptLike] = ()) -> RolloutBatch:
        """Run one step and return exactly ``num_groups`` complete groups."""
        self._prompts.add(new_prompts)
        need = self.protocol.num_fresh_needed()
        if await self._revive():
            # re-planned for the replicas that answer now: the caller fed the need it was
            # told, so only the groups to deliver must be there (fewer extra ones may start)
            need = min(self.protocol.num_fresh_needed(), max(
                need, self.protocol.num_fresh_to_deliver()))  # fmt: skip
        if self.num_pending < need:
            raise ConfigError(
                f"step {self.protocol.step} needs {need} fresh prompts, {self.num_pending} "
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
        by_id: dict[str, PromptInput] = dict(self._prompts.carried)
        plan = self.protocol.plan_step(PromptStream(self._prompts.draw(by_id)), flush=flush)
        try:
            if self.config.chat_as_tokens:
                by_id = await self.executor.chat_as_tokens(by_id)
            result = await self.executor.run(plan, by_id, active)
        except BaseException:
            self._prompts.put_back(plan.fresh_prompt_ids, by_id)
            self.protocol.abandon_step(plan)
            await self.refresh_replicas()
            raise
        self.protocol.update_from_outcome(plan, result.outcome)
        used = self.profile
        self._refresh_profile()
        # failed replicas out, recovered ones back: num_fresh_needed() is exact for the next step
        await self.refresh_replicas()
        self._prompts.settle((g.prompt_id for g in result.outcome.delivered),
                             self.protocol.candidates, by_id)
        metrics = step_metrics(
            plan, result, self.config, self.executor, wall_s=time.perf_counter() - t0,
            flush=flush, num_planned_replicas=len(active),
            num_carried_next=len(self.protocol.candidates), profile=used)
        if self.metrics is not None:
            self.metrics.record(metrics, self.executor.healthy)
            if (online := self.live.online) is not None:
                q = online.quality
                self.metrics.record_profile(online.ready, online.num_observations,
                                            q.rel_rmse if q else 0.0)
        if self.step_log is not None:
            self.step_log.write(metrics)
        return RolloutBatch.of(plan, result, active, metrics)

    def state_dict(self) -> dict[str, Any]:
        """Protocol (candidates, controller) + queued and carried prompt contents; JSON-safe.
        With ``profile="auto"`` also the model in use (not the timed pieces behind it)."""
        out = {"protocol": self.protocol.state_dict(), **self._prompts.state_dict()}
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
        self._prompts.load_state_dict(state)


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
