"""Multi-turn (agentic) rollouts on live replicas: the Python API an RL trainer calls per step.

::

    async def tool(call: ToolCall) -> ToolResult:           # the user's environment
        if finished(call.output.text):
            return ToolResult(done=True)
        return ToolResult(observation_ids=await ro.tokenize(run_tool(call.output.text)))

    cfg = AgenticConfig(group_size=8, max_turns=6, sampling=SamplingParams(max_tokens=512),
                        gateway=GatewayConfig(policy="tailsieve"))   # or "verl-sticky", ...
    async with AgenticRollout(endpoints, cfg) as ro:
        batch = await ro.run(prompts, tool)       # every group whole, every trajectory once
        train_on(batch.groups)

Each prompt becomes a group of ``group_size`` trajectories (one session each, sharing the
prompt prefix); all of them run at once. A trajectory alternates a turn (one
``SessionGateway.generate``: placed by the policy's router, a chain of pieces, moved mid-turn
with the ``tailsieve`` policy, continued elsewhere when a replica dies) and a call of the tool
the caller supplies, which returns the observation's token ids or ends the trajectory. It
also ends after ``max_turns`` turns, or when the next turn would not fit ``max_context_tokens``.
Every turn's prompt is exactly the context before it (``AgentTrajectory.check``, run on every
batch). A turn that fails (a request error beyond retries, no healthy replica) fails the step
with that error; the same prompts can be run again (trajectories start from their prompts).
The balance gate sees each step: its time against the agentic simulator's yardstick of the
step's own turns.
"""

from __future__ import annotations

import asyncio
import inspect
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from types import TracebackType

from tailsieve.errors import ConfigError
from tailsieve.runtime.engine.backends import Backend, PromptInput, PromptLike, SamplingParams
from tailsieve.runtime.engine.http_runner import HttpPieceRunner
from tailsieve.runtime.engine.pieces import PieceRunner
from tailsieve.runtime.engine.transport import Transport
from tailsieve.runtime.sessions.config import GatewayConfig
from tailsieve.runtime.sessions.gateway import SessionGateway
from tailsieve.runtime.sessions.trajectory import (
    AgentGroup,
    AgenticBatch,
    AgentTrajectory,
    ToolCall,
    ToolResult,
    TurnRecord,
    check_groups,
    stats_delta,
)
from tailsieve.session.yardstick import yardstick_s

ToolFn = Callable[[ToolCall], ToolResult | Awaitable[ToolResult]]
TurnSampling = Callable[[str, int, int], SamplingParams]  # (prompt id, sample, turn) -> sampling


@dataclass(frozen=True, slots=True)
class AgenticConfig:
    """Settings of an agentic rollout."""

    group_size: int = 8  # trajectories per prompt
    max_turns: int = 8  # turns per trajectory at most
    sampling: SamplingParams = field(default_factory=SamplingParams)  # per turn (max_tokens:
    # a turn's cap)
    max_context_tokens: int | None = None  # a trajectory ends before a turn whose prompt plus
    # max_tokens would exceed this (the servers' --max-model-len); None: no limit
    backend: Backend = Backend.VLLM  # HTTP replicas: "vllm" (completions) or "sglang"
    model: str | None = None  # served model name; None: ask the servers
    gateway: GatewayConfig = field(default_factory=GatewayConfig)  # policy, moves, profile
    turn_sampling: TurnSampling | None = None  # (prompt id,
    # sample, turn) -> that turn's sampling, in place of ``sampling`` (e.g. a replay's
    # forced lengths: ``TurnReplay.sampling``)

    def __post_init__(self) -> None:
        if self.group_size < 1 or self.max_turns < 1:
            raise ConfigError("group_size and max_turns must be >= 1")
        object.__setattr__(self, "backend", Backend(self.backend))
        if self.max_context_tokens is not None and \
                self.max_context_tokens <= self.sampling.max_tokens:
            raise ConfigError(f"max_context_tokens ({self.max_context_tokens}) must exceed a "
                              f"turn's max_tokens ({self.sampling.max_tokens})")


class AgenticRollout:
    """Agentic rollout steps over ``endpoints`` (HTTP), or over ``runner`` for
    ``num_replicas`` replicas (any ``PieceRunner``: a stub in tests, Ray handles in verl)."""

    def __init__(self, endpoints: Sequence[str] = (), config: AgenticConfig | None = None,
                 runner: PieceRunner | None = None, num_replicas: int | None = None,
                 transport: Transport | None = None,
                 clock: Callable[[], float] | None = None) -> None:
        """``clock``: the gateway's seconds (default the event loop's; emulated replicas
        running at a time scale pass their model's, ``ModelClock(time_scale)``, so that the
        cost model's times and the gateway's agree and its checks come at the simulator's
        interval in model seconds)."""
        self.config = config or AgenticConfig()
        if runner is None:
            if not endpoints:
                raise ConfigError("give endpoints, or a runner and num_replicas")
            self.gateway = SessionGateway.over_http(endpoints, self.config.gateway,
                                                    self.config.backend, self.config.model,
                                                    transport, clock)
        else:
            if num_replicas is None:
                raise ConfigError("a runner needs num_replicas")
            self.gateway = SessionGateway(num_replicas, runner, self.config.gateway,
                                          clock=clock)
        self.gateway.book.lapse_tool_waits = False  # every session ends here (``step``)
        self._endpoints = list(endpoints)
        self._transport = transport
        self.num_steps = 0

    async def __aenter__(self) -> AgenticRollout:
        await self.gateway.__aenter__()
        return self

    async def __aexit__(self, exc_type: type[BaseException] | None,
                        exc: BaseException | None, tb: TracebackType | None) -> None:
        await self.gateway.aclose()

    async def tokenize(self, text: str) -> tuple[int, ...]:
        """``text`` as the servers' tokenizer gives it (vLLM's ``POST /tokenize``, no special
        tokens added): for tools that answer in text."""
        runner, replica = self._http()
        return await runner.tokenize(text, replica)

    async def tokenize_chat(self, messages: Sequence[dict[str, str]]) -> tuple[int, ...]:
        """Chat ``messages`` as token ids under the model's chat template, with the
        generation prompt: a prompt for ``run``."""
        runner, replica = self._http()
        return await runner.tokenize_chat(messages, replica)

    def _http(self) -> tuple[HttpPieceRunner, int]:
        runner = self.gateway.runner
        if not isinstance(runner, HttpPieceRunner):
            raise ConfigError("tokenizing needs HTTP replicas (endpoints)")
        up = [i for i, ok in enumerate(self.gateway.healthy()) if ok]
        return runner, up[0] if up else 0

    async def run(self, prompts: Sequence[PromptLike], tool: ToolFn,
                  turn_sampling: TurnSampling | None = None) -> AgenticBatch:
        """One step: every prompt's group of trajectories, all at once, to their ends.
        ``turn_sampling``: this step's per-turn sampling (in place of the config's)."""
        items = [p if isinstance(p, PromptInput) else PromptInput.from_dict(p, "prompts")
                 for p in prompts]
        if not items:
            raise ConfigError("run needs at least one prompt")
        if len({p.prompt_id for p in items}) != len(items):
            raise ConfigError("prompt ids must be unique within a step")
        for p in items:
            if p.token_ids is None:
                raise ConfigError(f"prompt {p.prompt_id!r}: an agentic rollout needs token "
                                  "ids (prompt_token_ids; e.g. from ro.tokenize)")
        gw = self.gateway
        step = self.num_steps
        before = gw.stats()
        moves = gw.begin_step()
        t0 = gw.now()
        per_turn = turn_sampling or self.config.turn_sampling
        groups = await asyncio.gather(*(self._group(step, p, tool, t0, per_turn)
                                        for p in items))
        step_s = gw.now() - t0
        self.num_steps += 1
        check_groups(groups, self.config.group_size)
        batch = AgenticBatch(step, tuple(groups), step_s, moves, stats_delta(gw.stats(), before))
        gw.end_step(step_s, predicted_step_s(batch, gw))
        return batch

    async def _group(self, step: int, prompt: PromptInput, tool: ToolFn, t0: float,
                     per_turn: TurnSampling | None) -> AgentGroup:
        trajs = await asyncio.gather(*(self._trajectory(step, prompt, i, tool, t0, per_turn)
                                       for i in range(self.config.group_size)))
        return AgentGroup(prompt.prompt_id, tuple(trajs))

    async def _trajectory(self, step: int, prompt: PromptInput, sample: int, tool: ToolFn,
                          t0: float, per_turn: TurnSampling | None) -> AgentTrajectory:
        cfg, gw = self.config, self.gateway
        pid = prompt.prompt_id
        sid, gid = f"{step}:{pid}:{sample}", f"{step}:{pid}"
        ids = tuple(prompt.token_ids or ())
        ctx = list(ids)
        turns: list[TurnRecord] = []
        ending = "max_turns"
        try:
            for t in range(cfg.max_turns):
                sp = cfg.sampling if per_turn is None else per_turn(pid, sample, t)
                sent, start = tuple(ctx), gw.now() - t0
                out = await gw.generate(sid, gid, sent, sp, prompt_tokens=len(ids))
                end = gw.now() - t0
                ctx += out.token_ids
                if t + 1 == cfg.max_turns:
                    turns.append(TurnRecord(sent, out, (), start, end, 0.0))
                    break
                res = await _call(tool, ToolCall(pid, sample, t, tuple(ctx), out))
                tool_s = gw.now() - t0 - end
                fits = cfg.max_context_tokens is None or (
                    len(ctx) + len(res.observation_ids) + cfg.sampling.max_tokens
                    <= cfg.max_context_tokens)  # the default turn cap bounds the next turn
                if res.done or not fits:
                    ending = "done" if res.done else "max_context"
                    turns.append(TurnRecord(sent, out, (), start, end, 0.0))
                    break
                turns.append(TurnRecord(sent, out, tuple(res.observation_ids), start, end,
                                        tool_s))
                ctx += res.observation_ids
        finally:
            gw.end_session(sid)
        return AgentTrajectory(pid, sample, ids, tuple(turns), ending)


async def _call(tool: ToolFn, call: ToolCall) -> ToolResult:
    res = tool(call)
    if inspect.isawaitable(res):
        res = await res
    if not isinstance(res, ToolResult):
        raise ConfigError(f"the tool returned {type(res).__name__}, not a ToolResult")
    return res


def predicted_step_s(batch: AgenticBatch, gw: SessionGateway) -> float:
    """The balance gate's yardstick for a step, the agentic simulator's
    (``session.yardstick.yardstick_s``: the step's own work as time, the same for steps with
    and without moves, so its error cancels)."""
    return yardstick_s(batch.turn_trace().trajectories, gw.parts.configs)
