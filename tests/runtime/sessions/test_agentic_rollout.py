"""Agentic rollouts: a tool decides each trajectory's turns; every policy delivers whole groups,
each trajectory once, every turn sent exactly its context and generated token-exact (stub
replicas, under random replica deaths); over HTTP on emulated replicas with the servers'
tokenizer."""

from __future__ import annotations

import asyncio
import random
from collections.abc import AsyncIterator

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.core.balancer import BalanceSettings
from tailsieve.errors import ConfigError
from tailsieve.runtime.emulator import EmulatorConfig, EmulatorServer
from tailsieve.runtime.engine.backends import PromptInput, SamplingParams
from tailsieve.runtime.sessions import (
    AgenticConfig,
    AgenticRollout,
    GatewayConfig,
    ToolCall,
    ToolResult,
)
from tailsieve.runtime.stub import StubModel, StubPieceRunner
from tailsieve.session.routers import SessionPolicy

POLICIES = [p.value for p in SessionPolicy if p is not SessionPolicy.ORACLE]


def turns_wanted(prompt_ids: tuple[int, ...]) -> int:
    """The scripted tool's rule: the prompt says how many turns its trajectories take."""
    return prompt_ids[0] % 4 + 1


def scripted_tool(call: ToolCall) -> ToolResult:
    first = call.context_ids[0]
    if call.turn + 1 >= turns_wanted(call.context_ids):
        return ToolResult(done=True)
    return ToolResult(observation_ids=tuple(900_000 + 100 * call.sample + call.turn * 7 + k
                                            for k in range(3 + first % 5)))


def prompts(num: int, seed: int) -> list[PromptInput]:
    rnd = random.Random(seed)
    return [PromptInput(f"p{i}", token_ids=tuple(rnd.randrange(1, 999)
                                                 for _ in range(rnd.randrange(5, 40))))
            for i in range(num)]


async def agentic_scenario(policy: str, num_replicas: int, num_prompts: int, group_size: int,
                           kills: list[tuple[int, int]], seed: int) -> None:
    runner = StubPieceRunner(num_replicas, StubModel(eos_every=29), seconds_per_token=0.0002)
    gcfg = GatewayConfig(policy=policy, piece_tokens=12, probe_interval_s=0.01,
                         balance=BalanceSettings(interval_s=0.003, horizon_s=30.0),
                         profile="qwen3-4b-h100")
    cfg = AgenticConfig(group_size=group_size, max_turns=4,
                        sampling=SamplingParams(max_tokens=60, logprobs=0), gateway=gcfg)
    ps = prompts(num_prompts, seed)

    async def chaos() -> None:
        for after, replica in kills:
            while len(runner.calls) < after:
                await asyncio.sleep(0.001)
            if sum(not r.dead for r in runner.replicas) > 1:
                runner.kill(replica % num_replicas)
                await asyncio.sleep(0.004)
                runner.revive(replica % num_replicas)

    async with AgenticRollout(config=cfg, runner=runner, num_replicas=num_replicas) as ro:
        task = asyncio.create_task(chaos())
        batch = await asyncio.wait_for(ro.run(ps, scripted_tool), 120)
        task.cancel()
    assert [g.prompt_id for g in batch.groups] == [p.prompt_id for p in ps]
    for g, p in zip(batch.groups, ps, strict=True):
        assert len(g.trajectories) == group_size
        for tr in g.trajectories:
            tr.check()  # every turn sent exactly its context
            assert tr.prompt_ids == p.token_ids
            assert len(tr.turns) == turns_wanted(p.token_ids)
            assert tr.ending == ("max_turns" if len(tr.turns) == 4 else "done")
            for rec in tr.turns:  # token-exact: the one-go generation of what was sent
                want = runner.stub.model.generate(rec.prompt_ids, 60)[0]
                assert list(rec.output.token_ids) == want
            assert len(tr.loss_mask) == len(tr.token_ids) - len(tr.prompt_ids)
    st_ = batch.stats
    assert st_.num_turns == batch.num_turns and st_.num_failed_turns == 0
    assert batch.turn_trace().trajectories[0].num_turns == len(batch.groups[0]
                                                               .trajectories[0].turns)


@settings(max_examples=20, deadline=None)
@given(policy=st.sampled_from(POLICIES), num_replicas=st.integers(1, 3),
       num_prompts=st.integers(1, 4), group_size=st.integers(1, 4),
       kills=st.lists(st.tuples(st.integers(1, 80), st.integers(0, 2)), max_size=2),
       seed=st.integers(0, 10**6))
def test_whole_groups_exactly_once_token_exact(policy: str, num_replicas: int,
                                               num_prompts: int, group_size: int,
                                               kills: list[tuple[int, int]],
                                               seed: int) -> None:
    asyncio.run(agentic_scenario(policy, num_replicas, num_prompts, group_size, kills, seed))


async def test_every_policy_runs_and_only_tailsieve_moves_mid_turn() -> None:
    for policy in POLICIES:
        runner = StubPieceRunner(2, StubModel(eos_every=10**9))
        cfg = AgenticConfig(group_size=2, max_turns=2,
                            sampling=SamplingParams(max_tokens=20),
                            gateway=GatewayConfig(policy=policy, profile="qwen3-4b-h100"))
        async with AgenticRollout(config=cfg, runner=runner, num_replicas=2) as ro:
            batch = await ro.run(prompts(2, 1), scripted_tool)
        assert batch.mid_turn_moves == (policy == "tailsieve"), policy
        assert batch.stats.moves_mid_turn == 0 or policy == "tailsieve"


async def test_the_context_limit_ends_a_trajectory() -> None:
    runner = StubPieceRunner(1, StubModel(eos_every=10**9))
    cfg = AgenticConfig(group_size=1, max_turns=5, sampling=SamplingParams(max_tokens=30),
                        max_context_tokens=100)
    async with AgenticRollout(config=cfg, runner=runner, num_replicas=1) as ro:
        batch = await ro.run([PromptInput("p", token_ids=tuple(range(3, 23)))],
                             lambda call: ToolResult(observation_ids=(5,) * 10))
    tr = batch.groups[0].trajectories[0]
    assert tr.ending == "max_context" and len(tr.turns) == 2  # 20 + 40 + 40 > 100 - 30


async def test_bad_input() -> None:
    with pytest.raises(ConfigError, match="max_context_tokens"):
        AgenticConfig(sampling=SamplingParams(max_tokens=64), max_context_tokens=64)
    runner = StubPieceRunner(1)
    async with AgenticRollout(config=AgenticConfig(group_size=1), runner=runner,
                              num_replicas=1) as ro:
        with pytest.raises(ConfigError, match="token ids"):
            await ro.run([PromptInput("p", text="hello")], scripted_tool)
        with pytest.raises(ConfigError, match="not a ToolResult"):
            await ro.run(prompts(1, 0), lambda call: None)  # type: ignore[arg-type,return-value]


@pytest.fixture
async def emulated() -> AsyncIterator[list[str]]:
    cfgs = [EmulatorConfig.from_profile("qwen3-4b-h100", time_scale=0.002, seed=i,
                                        prompt_tokens_details=True) for i in range(2)]
    async with EmulatorServer(cfgs[0]) as a, EmulatorServer(cfgs[1]) as b:
        yield [a.url, b.url]


async def test_an_agentic_rollout_over_http(emulated: list[str]) -> None:
    cfg = AgenticConfig(group_size=3, max_turns=3, sampling=SamplingParams(max_tokens=80),
                        gateway=GatewayConfig(piece_tokens=32, profile="qwen3-4b-h100"))
    async with AgenticRollout(emulated, cfg) as ro:
        obs = await ro.tokenize("the tool says hello")
        assert len(obs) == 4

        async def tool(call: ToolCall) -> ToolResult:
            await asyncio.sleep(0.001)
            return ToolResult(observation_ids=tuple(o + 100 * call.turn + call.sample
                                                    for o in obs))

        ps = [PromptInput(f"q{i}", token_ids=tuple(range(2000 + 50 * i, 2048 + 50 * i)))
              for i in range(2)]
        batch = await ro.run(ps, tool)
    assert batch.num_turns == 2 * 3 * 3
    assert batch.stats.prefix_hit_tokens > 0 and batch.stats.num_turns == 18
