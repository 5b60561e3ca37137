"""End-to-end over HTTP against emulated vLLM replicas (in-process and subprocesses)."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal

import aiohttp
import pytest

from tailsieve.runtime.emulator import EmulatorConfig, EmulatorFleet, EmulatorServer
from tailsieve.runtime.engine.backends import Backend, PromptInput, SamplingParams
from tailsieve.runtime.engine.transport import AiohttpTransport
from tailsieve.runtime.step.observe import RuntimeMetrics
from tailsieve.runtime.step.replay import ReplayLengths
from tailsieve.runtime.step.rollout import TailSieveRollout
from tailsieve.runtime.step.rollout_config import RolloutConfig

MODEL = "tailsieve-emulated"


def replay(seed: int = 0) -> ReplayLengths:
    import random

    rng = random.Random(seed)
    table = {}
    for i in range(200):
        base = 900 if i % 9 == 0 else rng.choice([30, 60, 120])
        table[f"q{i}"] = tuple(max(1, int(base * rng.uniform(0.6, 1.4))) for _ in range(4))
    return ReplayLengths(table)


def config(policy: str = "tailsieve", **kw: object) -> RolloutConfig:
    return RolloutConfig(
        num_groups=6,
        group_size=4,
        policy=policy,
        model=MODEL,
        replay=replay(),
        sampling=SamplingParams(max_tokens=2000, seed=1),
        request_timeout_s=30.0,
        **kw,  # type: ignore[arg-type]
    )


async def drive(ro: TailSieveRollout, rl: ReplayLengths, steps: int) -> list[str]:
    source = rl.prompts()
    delivered: list[str] = []
    for _ in range(steps):
        k = ro.num_fresh_needed()
        new, source = source[:k], source[k:]
        batch = await ro.step(new)
        assert len(batch.groups) == 6
        for g in batch.groups:  # exact forced lengths, from one complete attempt
            assert [r.num_tokens for r in g.responses] == [rl(g.prompt_id, i) for i in range(4)]
            assert all(r.finish_reason == "length" for r in g.responses)
        delivered += [g.prompt_id for g in batch.groups]
        print("step", batch.step, "makespan", round(batch.metrics.makespan_s, 3))
    last = await ro.flush()
    if last is not None:
        delivered += [g.prompt_id for g in last.groups]
    return delivered


async def test_steps_against_inprocess_emulators() -> None:
    ecfg = EmulatorConfig.from_profile("cpu", time_scale=0.002, model_name=MODEL)
    async with contextlib.AsyncExitStack() as stack:
        servers = [await stack.enter_async_context(EmulatorServer(ecfg)) for _ in range(3)]
        metrics = RuntimeMetrics()
        ro = await stack.enter_async_context(
            TailSieveRollout([s.url for s in servers], config(), metrics=metrics)
        )
        delivered = await drive(ro, replay(), 4)
        assert len(delivered) == len(set(delivered))
        text = metrics.render().decode()
        assert "tailsieve_step_makespan_seconds" in text
        assert 'tailsieve_replica_healthy{replica="2"} 1.0' in text


async def test_chat_and_streaming_against_emulator() -> None:
    ecfg = EmulatorConfig.from_profile("cpu", time_scale=0.002, model_name=MODEL)
    async with (
        EmulatorServer(ecfg) as srv,
        TailSieveRollout(
            [srv.url], config("uniform", backend=Backend.VLLM_CHAT, stream=True)
        ) as ro,
    ):
        msgs = ({"role": "user", "content": "hi"},)
        prompts = [PromptInput(f"q{i}", messages=msgs) for i in range(6)]
        batch = await ro.step(prompts)
        assert [r.num_tokens for r in batch.groups[0].responses] == [
            replay()("q0", i) for i in range(4)
        ]


async def test_crash_mid_step_restarts_elsewhere() -> None:
    ecfg = EmulatorConfig.from_profile("cpu", time_scale=0.05, model_name=MODEL)
    rl = replay()
    async with contextlib.AsyncExitStack() as stack:
        servers = [await stack.enter_async_context(EmulatorServer(ecfg)) for _ in range(3)]
        ro = await stack.enter_async_context(
            TailSieveRollout([s.url for s in servers], config("tailsieve-fixed"))
        )
        source = rl.prompts()
        delivered: list[str] = []
        relocated = 0
        for i in range(4):
            k = ro.num_fresh_needed()
            new, source = source[:k], source[k:]
            crash = None
            if i == 2:  # the emulator drops every connection and stops listening mid-step

                async def crash_soon() -> None:
                    await asyncio.sleep(0.05)
                    await servers[0].crash()

                crash = asyncio.create_task(crash_soon())
            batch = await ro.step(new)
            if crash is not None:
                await crash
            relocated += batch.metrics.num_relocated
            for g in batch.groups:
                assert [r.num_tokens for r in g.responses] == [rl(g.prompt_id, j) for j in range(4)]
            delivered += [g.prompt_id for g in batch.groups]
        last = await ro.flush()
        delivered += [g.prompt_id for g in last.groups] if last else []
        assert len(delivered) == len(set(delivered))
        assert relocated >= 1
        assert ro.executor.healthy[0] is False


async def test_emulator_crash_after_fault_mid_step() -> None:
    """The emulator's own ``crash_after_s`` fault lands while replica 0 runs the long group."""
    ok = EmulatorConfig.from_profile("cpu", time_scale=0.2, model_name=MODEL)
    bad = EmulatorConfig.from_profile(
        "cpu", time_scale=0.2, model_name=MODEL, crash_after_s=0.3, crash_mode="close"
    )
    rl = replay()
    async with contextlib.AsyncExitStack() as stack:
        servers = [await stack.enter_async_context(EmulatorServer(c)) for c in (bad, ok, ok)]
        ro = await stack.enter_async_context(
            TailSieveRollout([s.url for s in servers], config("uniform"))
        )
        prompts = rl.prompts()[:6]
        batch = await ro.step(prompts)
        assert sorted(g.prompt_id for g in batch.groups) == sorted(p.prompt_id for p in prompts)
        assert batch.metrics.num_relocated >= 1 and batch.metrics.num_regenerated == 0
        q0 = next(g for g in batch.groups if g.prompt_id == "q0")
        assert q0.attempt == 0 and any(q0.response_replica(i) != 0 for i in range(4))
        assert [r.num_tokens for r in q0.responses] == [rl("q0", i) for i in range(4)]
        assert ro.executor.healthy[0] is False


@pytest.mark.slow
async def test_process_kill_mid_step() -> None:
    fleet = await asyncio.to_thread(
        EmulatorFleet.start, 3, profile="cpu", time_scale=0.2, model_name=MODEL
    )
    try:
        rl = replay()
        async with TailSieveRollout(fleet.urls, config("uniform")) as ro:
            victim = fleet.processes[0]  # holds q0, the long group

            async def kill_soon() -> None:
                # on state: the victim is generating (its own /metrics), however long a
                # loaded machine takes to get there
                async with aiohttp.ClientSession() as probe:
                    while True:
                        async with probe.get(fleet.urls[0] + "/metrics") as r:
                            text = await r.text()
                        if any(line.startswith("vllm:num_requests_running")
                               and float(line.rsplit(" ", 1)[1]) > 0
                               for line in text.splitlines()):
                            break
                        await asyncio.sleep(0.02)
                os.kill(victim.pid, signal.SIGKILL)

            killer = asyncio.create_task(kill_soon())
            prompts = rl.prompts()[:6]
            batch = await ro.step(prompts)
            await killer
            assert sorted(g.prompt_id for g in batch.groups) == sorted(p.prompt_id for p in prompts)
            assert batch.metrics.num_relocated >= 1
            assert ro.executor.healthy[0] is False
            for g in batch.groups:
                assert [r.num_tokens for r in g.responses] == [rl(g.prompt_id, i) for i in range(4)]
            # the dead replica stays out after a probe
            assert (await ro.executor.probe())[0] is False
    finally:
        await asyncio.to_thread(fleet.close)


async def test_transport_against_emulator_health() -> None:
    ecfg = EmulatorConfig.from_profile("cpu", time_scale=0.002, model_name=MODEL)
    async with EmulatorServer(ecfg) as srv:
        t = AiohttpTransport()
        try:
            status, _ = await t.get(srv.url + "/health", 2.0)
            assert status == 200
        finally:
            await t.aclose()
