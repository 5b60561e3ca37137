"""A hung replica (``SIGSTOP``: it accepts connections and never answers) is taken out by the
stall watch (``runtime.execution.stall_watch``) and its responses continue elsewhere from the last token
received: through a single-turn step (``TailSieveRollout`` / ``LiveExecutor``) and the session
gateway over HTTP (``HttpPieceRunner``, unstreamed and streamed pieces). Nothing is lost or
generated twice (exact forced lengths), and the hung replica's responses finish elsewhere
within the stall limit (twice the expected piece time, at least the floor) plus the check and
probe intervals and the time to generate them again. Without the watch they waited for the
request timeout (an hour by default)."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import os
import signal
import time
from collections.abc import Callable, Iterator, Sequence

import aiohttp
import pytest
from test_live_emulator import MODEL, replay

from tailsieve.model.profiles import builtin_profile
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.runtime.emulator import EmulatorFleet
from tailsieve.runtime.engine.backends import PromptInput, SamplingParams
from tailsieve.runtime.execution.stall_watch import StallSettings, piece_time_s
from tailsieve.runtime.sessions import GatewayConfig, HttpPieceRunner, SessionGateway
from tailsieve.runtime.step.rollout import TailSieveRollout
from tailsieve.runtime.step.rollout_config import RolloutConfig

TIME_SCALE = 0.5
STALL = StallSettings(factor=2.0, floor_s=1.0, check_interval_s=0.2)
PROBE_S = 0.2
PROBE_TIMEOUT_S = 1.0  # the health probe's timeout (default 5 s): it confirms a stall
COST = ReplicaConfig.from_profile(builtin_profile("cpu"))  # the emulators' and the watch's


@pytest.fixture(scope="module")
def fleet() -> Iterator[EmulatorFleet]:
    f = EmulatorFleet.start(3, profile="cpu", time_scale=TIME_SCALE, model_name=MODEL)
    try:
        yield f
    finally:
        for p in f.processes:  # whatever a test left stopped, by PID
            with contextlib.suppress(ProcessLookupError):
                os.kill(p.pid, signal.SIGCONT)
        f.close()


async def running_on(url: str) -> None:
    """Wait until the emulator at ``url`` is generating (its own /metrics)."""
    async with aiohttp.ClientSession() as probe:
        while True:
            async with probe.get(url + "/metrics") as r:
                text = await r.text()
            if any(line.startswith("vllm:num_requests_running")
                   and float(line.rsplit(" ", 1)[1]) > 0 for line in text.splitlines()):
                return
            await asyncio.sleep(0.02)


@contextlib.contextmanager
def stopped(pid: int) -> Iterator[float]:
    """SIGSTOP ``pid`` for the block (yields when); SIGCONT in any case."""
    os.kill(pid, signal.SIGSTOP)
    try:
        yield time.monotonic()
    finally:
        os.kill(pid, signal.SIGCONT)


def bound_s(num_running: int, cap: int, probe_timeout_s: float) -> float:
    """The most a hung replica's pieces may wait before they continue elsewhere: the stall
    limit of a piece of ``cap`` tokens among ``num_running`` (at most), one check interval,
    the probe that confirms it (its timeout), and 1 s for a loaded machine."""
    limit = STALL.limit_s(piece_time_s(COST, num_running, 0.0, 0, cap))
    return limit + STALL.check_interval_s + probe_timeout_s + 1.0


async def taken_out(healthy: Callable[[], Sequence[bool]], t0: float) -> float:
    """Seconds from ``t0`` until replica 0 reads out of service."""
    while healthy()[0]:
        await asyncio.sleep(0.01)
    return time.monotonic() - t0


async def readmitted(gw: SessionGateway) -> None:
    while not gw.healthy()[0]:
        await asyncio.sleep(0.05)


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True])
async def test_a_hung_replica_in_a_single_turn_step(fleet: EmulatorFleet, stream: bool) -> None:
    rl = replay()
    cfg = RolloutConfig(num_groups=6, group_size=4, policy="uniform", model=MODEL, replay=rl,
                        sampling=SamplingParams(max_tokens=2000, seed=1), continuation=True,
                        piece_tokens=128, stream=stream, stall=STALL)
    victim = fleet.processes[0]
    async with TailSieveRollout(fleet.urls, cfg) as ro:
        ro.executor.config = dataclasses.replace(ro.executor.config, probe_interval_s=PROBE_S,
                                                 health_timeout_s=PROBE_TIMEOUT_S)
        prompts = [PromptInput(p.prompt_id, token_ids=(7, 8, 9, k))  # continuable
                   for k, p in enumerate(rl.prompts()[:6])]
        step = asyncio.create_task(ro.step(prompts))
        await running_on(victim.url)
        with stopped(victim.pid) as t_stop:
            out = asyncio.create_task(taken_out(lambda: ro.executor.healthy, t_stop))
            batch = await asyncio.wait_for(step, 120)
            took = time.monotonic() - t_stop
            detected = await out
            assert ro.executor.healthy[0] is False
            assert ro.executor.stalls.num_stalls >= 1
            assert (await ro.executor.probe())[0] is False  # the probe times out: still hung
        assert (await ro.executor.probe())[0] is True  # answers again: re-admitted
    assert sorted(g.prompt_id for g in batch.groups) == sorted(p.prompt_id for p in prompts)
    for g in batch.groups:  # exact: nothing lost, nothing generated twice
        assert [r.num_tokens for r in g.responses] == [rl(g.prompt_id, i) for i in range(4)]
        assert all(r.finish_reason == "length" for r in g.responses)
    assert batch.metrics.num_regenerated == 0  # continued from the last seam, not restarted
    assert ro.executor.num_relocations >= 1
    print(f"stream={stream}: taken out {detected:.2f} s after the SIGSTOP (bound "
          f"{bound_s(24, 128, PROBE_TIMEOUT_S):.2f} s); the step ended {took:.2f} s after it")
    assert detected <= bound_s(24, 128, PROBE_TIMEOUT_S)


@pytest.mark.slow
@pytest.mark.parametrize("stream", [False, True])
async def test_a_hung_replica_under_the_session_gateway(fleet: EmulatorFleet,
                                                        stream: bool) -> None:
    victim = fleet.processes[0]
    n_turns, length = 9, 600
    cfg = GatewayConfig(policy="verl-sticky", profile="cpu", piece_tokens=128, stream=stream,
                        stall=STALL, probe_interval_s=PROBE_S)
    runner = HttpPieceRunner(fleet.urls, model=MODEL, stream=stream,
                             health_timeout_s=PROBE_TIMEOUT_S)
    async with contextlib.AsyncExitStack() as stack:
        stack.push_async_callback(runner.aclose)
        gw = await stack.enter_async_context(SessionGateway(3, runner, cfg))

        async def turn(k: int) -> tuple[int, str, int]:
            out = await gw.generate(f"s{k}", None, [1 + k, 2, 3, 4],
                                    {"ignore_eos": True, "temperature": 1.0},
                                    max_tokens=length)
            return len(out.token_ids), out.finish_reason, out.num_relocations

        turns = asyncio.gather(*(turn(k) for k in range(n_turns)))
        await running_on(victim.url)
        with stopped(victim.pid) as t_stop:
            out = asyncio.create_task(taken_out(gw.healthy, t_stop))
            got = await asyncio.wait_for(turns, 120)
            took = time.monotonic() - t_stop
            detected = await out
            assert gw.healthy()[0] is False
        assert gw.stalls.num_stalls >= 1
        await asyncio.wait_for(readmitted(gw), 30)  # its probe answers again
    assert [(n, r) for n, r, _ in got] == [(length, "length")] * n_turns  # exact, once
    assert sum(m for _, _, m in got) >= 1  # the hung replica's turns continued elsewhere
    bound = bound_s(n_turns, length, PROBE_TIMEOUT_S)  # moves off: one piece per turn
    print(f"stream={stream}: taken out {detected:.2f} s after the SIGSTOP (bound "
          f"{bound:.2f} s); every turn ended {took:.2f} s after it")
    assert detected <= bound
