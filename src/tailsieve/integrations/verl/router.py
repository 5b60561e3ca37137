"""``TailSieveRouter``: TailSieve as verl 0.9.1's request load balancer, by YAML alone.

::

    # tailsieve_router.yaml
    router_class: tailsieve.integrations.verl.router.TailSieveRouter
    policy: tailsieve

    python -m verl.trainer.main_ppo ... \\
        actor_rollout_ref.rollout.router_config_path=tailsieve_router.yaml

verl builds the class as a Ray actor with ``(servers, yaml_dict)`` and hands it to every
``LLMServerClient`` (v0 and v1 trainers, every agent loop, fully-async rollouts, the teacher
of on-policy distillation through its own ``router_config_path``). Per turn verl calls
``acquire_server(request_id)`` (the trajectory's sticky id), then ``generate.remote(...)`` on
the handle it got back, then ``release_server``. The handle is TailSieve's (``TurnHandle``):
its ``generate`` runs on this actor, which places the turn with the session router
(``session.make_router(policy)`` over a ``SessionBook``), runs it as a chain of pieces over
the servers' own ``generate`` (``runtime.sessions.SessionGateway`` with a ``RayPieceRunner``),
moves it at piece ends when the balancer finds that it pays, continues it elsewhere when a
server dies, and returns verl's ``TokenOutput`` joined token-exact. Turns a continuation
cannot carry run whole on the placed server (``whole_turn``). Under ``full_determinism`` the
router routes as verl does (by a hash of the request id) and moves nothing.

The router never sees verl's timings; it times each training step by its own turns
(``steps.StepTiming``: the rollout, then the gap while verl trains) and logs the rollout's
share of the step, what moves bought the rollout (the balance gate) and the training step's
speedup from it; ``get_status()["training_step"]`` holds the last one.

One actor runs every turn on one event loop. With ``shards: N`` in the YAML the actor verl
built starts ``N - 1`` more like it when the pool first has servers, and hands each trajectory
to one of the ``N`` by a hash of its request id (``acquire_server``'s handle names that
actor); each runs its own trajectories' turns over every server, seeing their load only. The
first actor keeps answering verl's calls (acquire and release counts, the pool, status) and
passes pool changes on.
"""

from __future__ import annotations

import asyncio
import logging
import time
import zlib
from collections import Counter
from collections.abc import Mapping
from dataclasses import asdict
from typing import Any

import ray
from verl.workers.rollout.replica import TokenOutput

from tailsieve.integrations.verl.ray_runner import RayPieceRunner, TurnAbortedError
from tailsieve.integrations.verl.router_config import VerlRouterConfig
from tailsieve.integrations.verl.server_facts import ServerFacts, read_facts
from tailsieve.integrations.verl.slots import ServerSlots
from tailsieve.integrations.verl.steps import StepRecord, StepTiming, gate_speedup
from tailsieve.integrations.verl.token_output import piece_of, verl_output
from tailsieve.integrations.verl.turn_handle import GATEWAY_ID, TurnHandle, whole_reason
from tailsieve.integrations.verl.whole_turn import run_whole
from tailsieve.runtime.sessions import PieceOutput, PieceSpan, SessionGateway
from tailsieve.session.client_table import ClientSessions, Lease

log = logging.getLogger(__name__)

NO_SERVERS = "No available servers in load balancer"  # verl's clients match this text
MAX_CONCURRENCY = 100_000  # every running turn is one call on this actor


class VerlSessionRouter:
    """verl's ``RequestLoadBalancer`` protocol over TailSieve's session gateway (the class
    behind the ``TailSieveRouter`` actor; usable in-process for tests)."""

    def __init__(self, servers: Mapping[str, Any], config: Mapping[str, Any] | None = None):
        self.config = VerlRouterConfig.from_yaml(config)
        self._yaml = dict(config or {})
        self.slots = ServerSlots(self.config.num_slots(len(servers)))
        self.slots.add(servers)
        self.sessions = ClientSessions(self.config.session_idle_s, self.config.max_sessions)
        self.facts = ServerFacts(self.config.response_length, self.config.prompt_length, None)
        self.runner = RayPieceRunner(self.slots.handles, lambda: self.facts,
                                     self.config.request_timeout_s)
        self.gateway: SessionGateway | None = None
        self._setup_reason: str | None = None  # why the gateway runs without moves
        self._start_lock: asyncio.Lock | None = None
        self._self_handle: Any = None
        self._shards: list[Any] = []  # the actors running turns, this one first (shards > 1)
        self._inflight: Counter[str] = Counter()
        self._whole: Counter[str] = Counter()  # whole turns by reason
        self._weights: Any = None  # the last global_steps seen
        self.step = StepRecord()  # the turns since the weights last changed
        self.last_step_timing: StepTiming | None = None  # the last training step, timed
        self._logged_reason: str | None = None
        self._t0 = time.monotonic()

    # ----- verl's protocol -------------------------------------------------------------
    def require_acquire_fields(self) -> list[str]:
        """None: the turn is placed when its prompt reaches the handle, so the prompt
        crosses Ray once."""
        return []

    def require_release_fields(self) -> list[str]:
        return []

    async def acquire_server(self, request_id: str, **extra: Any) -> tuple[str, Any]:
        """``(server_id, handle)`` for one turn of trajectory ``request_id``."""
        await self._start()
        active = self.slots.active()
        if not active:
            raise RuntimeError(NO_SERVERS)
        if self.facts.full_determinism:  # verl's own deterministic rule
            sid = active[hash(request_id) % len(active)]
            self._inflight[sid] += 1
            return sid, self.slots.handles[self.slots.slot_of(sid) or 0]
        self._inflight[GATEWAY_ID] += 1
        return GATEWAY_ID, TurnHandle(self._turn_actor(str(request_id)), str(request_id))

    async def release_server(self, server_id: str, request_id: str | None = None) -> None:
        if self._inflight[server_id] > 0:
            self._inflight[server_id] -= 1

    async def add_servers(self, servers: Mapping[str, Any]) -> None:
        for slot in self.slots.add(servers):
            if self.gateway is not None:
                self.gateway.set_healthy(slot, True)
        await asyncio.gather(*(a.add_servers.remote(dict(servers)) for a in self._shards[1:]))
        log.info("tailsieve router: added %d servers", len(servers))

    async def remove_servers(self, server_ids: list[str]) -> None:
        for slot in self.slots.remove(list(server_ids)):
            if self.gateway is not None:
                self.gateway.set_healthy(slot, False)
        await asyncio.gather(*(a.remove_servers.remote(list(server_ids))
                               for a in self._shards[1:]))
        log.info("tailsieve router: removed %d servers", len(server_ids))

    async def get_all_servers(self) -> list[str]:
        return self.slots.active()

    async def get_total_inflight(self) -> int:
        return sum(self._inflight.values())

    async def clear_sticky_cache(self) -> dict[str, Any]:
        """Every session without a running turn ends (its sticky home and cache estimate)."""
        keys = self.sessions.clear_idle()
        self._end_sessions(keys)
        others = await asyncio.gather(*(a.clear_sticky_cache.remote() for a in self._shards[1:]))
        return {"cleared_entries": len(keys) + sum(o["cleared_entries"] for o in others),
                "server_loads": self._server_loads()}

    async def get_status(self) -> dict[str, Any]:
        """verl's keys (``servers``, ``total_inflight``, ``active_servers``) plus TailSieve's:
        the policy, ``moves_off_reason`` and the gateway's running totals (with ``shards``:
        this actor's; ``shards`` lists the other actors' status)."""
        gw = self.gateway
        stats = gw.stats() if gw is not None else None
        others = await asyncio.gather(*(a.get_status.remote() for a in self._shards[1:]))
        return {
            "servers": self._server_loads(),
            "total_inflight": sum(self._inflight.values()),
            "active_servers": len(self.slots.active()),
            "registered_handles": self.slots.active(),
            "policy": self.config.policy.value,
            "moves_off_reason": self.moves_off_reason,
            "num_sessions": len(self.sessions),
            "whole_turns": dict(self._whole),
            "gateway": _stats_dict(stats, self.slots) if stats is not None else None,
            "training_step": (self.last_step_timing.to_dict()
                              if self.last_step_timing is not None else None),
            "shards": list(others),
        }

    async def aclose(self) -> None:
        """Stop the gateway's background tasks (not part of verl's protocol: verl ends the
        actor with its job; in-process users call it)."""
        if self.gateway is not None:
            await self.gateway.aclose()

    # ----- the handle's generate --------------------------------------------------------
    async def generate_turn(self, session: str, **call: Any) -> TokenOutput:
        """One turn of trajectory ``session``; ``call``: verl's ``generate`` keywords."""
        await self._start()
        gw = self.gateway
        assert gw is not None
        call["prompt_ids"] = list(map(int, call["prompt_ids"]))
        sampling = dict(call.get("sampling_params") or {})
        self._end_sessions(self.sessions.expire(self._now()))
        ids = call["prompt_ids"]
        sess = self.sessions.acquire(str(session), hash(tuple(ids)) if ids else None, ids,
                                     self._now())
        self.step.turn_started(sess.session_id, self._now())
        try:
            budget = self.facts.budget(len(call["prompt_ids"]), sampling)
            why = whole_reason(call, sampling, budget)
            if why is None:
                out = await self._pieced(gw, sess, call, sampling, budget)
            else:
                self._whole[why] += 1
                out, _ = await run_whole(gw, self.slots.handles, sess.session_id,
                                         sess.group_id, call, budget)
            self._observe(out)  # while this session still runs: new weights keep it
        except BaseException:
            self.step.turn_failed()
            raise
        finally:
            ended = self.sessions.release(sess, ids, self._now())
            if ended is not None:
                self._end_sessions([ended])
        self.step.turn_ended(sess.session_id, len(out.token_ids), self._now())
        return out

    async def _pieced(self, gw: SessionGateway, sess: Lease, call: dict[str, Any],
                      sampling: dict[str, Any], budget: int | None) -> TokenOutput:
        sp = dict(sampling)
        sp.pop("max_new_tokens", None)
        sp["max_tokens"] = budget
        sp.setdefault("repetition_penalty", self.facts.repetition_penalty)
        sp.setdefault("ignore_eos", self.facts.ignore_eos)
        if sp.pop("logprobs", False):
            sp["logprobs"] = 0
        kept: list[tuple[int, Any]] = []  # (start, TokenOutput) of the pieces, for an abort

        def on_piece(span: PieceSpan, out: PieceOutput) -> None:
            while kept and kept[-1][0] >= span.start:  # the turn started again
                kept.pop()
            kept.append((span.start, out.detail))

        try:
            res = await gw.generate(sess.session_id, sess.group_id, call["prompt_ids"], sp,
                                    on_piece=on_piece, engine_args=_piece_kwargs(call))
        except TurnAbortedError as exc:
            outs = [o for _, o in kept] + [exc.output]
            return verl_output([piece_of(o) for o in outs], aborted=True)
        return verl_output(res.chain)

    # ----- state --------------------------------------------------------------------------
    @property
    def moves_off_reason(self) -> str | None:
        """Why running turns do not move now (None: they do)."""
        if self.facts.full_determinism:
            return "full_determinism: turns are routed by verl's hash rule and never moved"
        if self._setup_reason is not None:
            return self._setup_reason
        return self.gateway.moves_off_reason if self.gateway is not None else None

    async def _start(self) -> None:
        if self.gateway is not None:
            return
        if self._start_lock is None:
            self._start_lock = asyncio.Lock()
        async with self._start_lock:
            if self.gateway is None and self.slots.active():
                self.facts = await read_facts(self.config, self.slots)
                await self._open_gateway()

    async def _open_gateway(self) -> None:
        gcfg, self._setup_reason = self.config.gateway_config(
            stop_ids_known=self.facts.eos_token_ids is not None)
        gw = SessionGateway(self.slots.num_slots, self.runner, gcfg)
        for slot in range(self.slots.num_slots):
            if not self.slots.in_pool(slot):
                gw.set_healthy(slot, False)
        await gw.__aenter__()
        self._self_handle = _own_handle()
        self._shards = self._start_shards()
        self.gateway = gw
        self._log_reason()

    def _start_shards(self) -> list[Any]:
        """This actor and ``shards - 1`` more over the pool (none outside Ray, or with one
        shard)."""
        if self.config.shards <= 1 or self._self_handle is None:
            return []
        servers = {sid: self.slots.handles[self.slots.slot_of(sid) or 0]
                   for sid in self.slots.active()}
        yaml = {**self._yaml, "shards": 1}
        log.info("tailsieve router: %d shards run the turns", self.config.shards)
        return [self._self_handle, *(TailSieveRouter.remote(servers, yaml)
                                     for _ in range(self.config.shards - 1))]

    def _turn_actor(self, request_id: str) -> Any:
        """The actor that runs trajectory ``request_id``'s turns."""
        if not self._shards:
            return self._self_handle
        return self._shards[zlib.crc32(request_id.encode()) % len(self._shards)]

    def _observe(self, out: Any) -> None:
        """New weights (a new ``global_steps``) end a step: it is timed for the balance gate
        and the next begins (``steps``); the servers' prefix caches were reset, so every idle
        session ends and the cache estimates go."""
        version = (out.extra_fields or {}).get("global_steps")
        gw = self.gateway
        if version is not None and version != self._weights:
            if self._weights is not None and gw is not None:
                self._time_step(gw)
                gw.end_step(self.step.observed_s, self.step.predicted_s(gw.parts.configs))
                self.step.reset()
                gw.begin_step()
                self._end_sessions(self.sessions.clear_idle())
                for slot in range(self.slots.num_slots):
                    if self.slots.in_pool(slot) and gw.healthy()[slot]:
                        gw.set_healthy(slot, False)  # drops its cache estimate
                        gw.set_healthy(slot, True)
            self._weights = version
        self._log_reason()

    def _time_step(self, gw: SessionGateway) -> None:
        """Time the training step that just ended (``steps.StepTiming``) and log it."""
        gate = gw.gate.state
        timing = self.step.timing(gate_speedup(gate.balanced, gate.round_robin))
        if timing is not None:
            self.last_step_timing = timing
            log.info("tailsieve router: %s", timing.words())

    def _end_sessions(self, keys: list[str]) -> None:
        for key in keys:
            self.step.forget(key)
            if self.gateway is not None:
                self.gateway.end_session(key)

    def _server_loads(self) -> dict[str, int]:
        if self.gateway is None:
            return {sid: 0 for sid in self.slots.active()}
        views = self.gateway.book.views(self.gateway.now())
        return {sid: int(views[self.slots.slot_of(sid) or 0].num_running)
                for sid in self.slots.active()}

    def _log_reason(self) -> None:
        why = self.moves_off_reason
        if why != self._logged_reason:
            if why is not None:
                log.warning("tailsieve router: moves are off: %s", why)
            elif self._logged_reason is not None:
                log.info("tailsieve router: moves are on again")
            self._logged_reason = why

    def _now(self) -> float:
        return time.monotonic() - self._t0


TailSieveRouter = ray.remote(max_concurrency=MAX_CONCURRENCY)(  # type: ignore[call-overload]
    VerlSessionRouter)
"""The Ray actor class verl builds from ``router_class`` (``(servers, yaml_dict)``)."""


def _own_handle() -> Any:
    """This actor's handle (None in-process, outside Ray actors)."""
    if not ray.is_initialized():
        return None
    try:
        return ray.get_runtime_context().current_actor
    except Exception:
        return None


def _piece_kwargs(call: dict[str, Any]) -> dict[str, Any]:
    """verl's generate keywords besides the prompt and sampling that every piece carries."""
    skip = {"prompt_ids", "sampling_params", "request_id"}
    return {k: v for k, v in call.items() if k not in skip and v is not None}


def _stats_dict(stats: Any, slots: ServerSlots) -> dict[str, Any]:
    d = asdict(stats)
    d["replicas"] = [dict(r, server=slots.id_of(r["replica"])) for r in d["replicas"]
                     if slots.id_of(r["replica"]) is not None]
    d["prefix_hit_rate"] = stats.prefix_hit_rate
    return d
