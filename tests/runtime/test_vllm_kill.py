"""A real vLLM replica SIGKILLed mid-step loses nothing.

Starts its own vLLM CPU server (``VllmFleet``, port ``TAILSIEVE_VLLM_KILL_PORT``, default 8131,
core 1, one request at a time), runs one live replay step on a 2-replica ``LiveExecutor`` over
[that server, the first CI server] with two groups on each, SIGKILLs the started server's
process group (API server, EngineCore, Worker) while it is generating, and checks: the step
completes, every group is delivered exactly once, complete and exact (forced lengths), the
killed replica's unfinished responses started again on the healthy replica (what it had
finished is kept; no group starts again whole), and the dead replica is marked unhealthy. Needs the CI servers:

    TAILSIEVE_VLLM_ENDPOINTS=http://127.0.0.1:8101,http://127.0.0.1:8102 \\
    pytest -m vllm tests/runtime/test_vllm_kill.py -s

The kill is decided on the server's side of the race, by a process of its own
(``kill_when_running.py``) that watches the engine's CPU time: on a loaded machine the client's
view and the server's HTTP answers can come seconds late while the engine finishes everything,
so neither tells that it is still generating. Should the victim still have finished every
request before the kill, what the step delivered shows it (no response relocated, each group
delivered whole from where it was planned); such a try is run again, on a fresh victim when it was
killed, up to ``TRIES`` times in all. Every try must deliver each group exactly once, and one
must land its kill mid-step.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import time
from dataclasses import replace
from pathlib import Path

import aiohttp
import pytest

from tailsieve.core.plan import GroupAssignment, StepPlan
from tailsieve.core.pool import Pool
from tailsieve.runtime.engine.backends import PromptInput, SamplingParams
from tailsieve.runtime.launcher import LaunchConfig, VllmFleet
from tailsieve.runtime.step.executor import LiveExecutor
from tailsieve.runtime.step.executor_config import ExecutorConfig
from tailsieve.runtime.step.step_state import StepResult

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[2]
MODEL_DIR = Path(os.environ.get("TAILSIEVE_TINY_MODEL_DIR", ROOT / ".cache" / "tiny-qwen2"))
VLLM_PYTHON = os.environ.get("TAILSIEVE_VLLM_PYTHON", str(ROOT / ".venv-vllm" / "bin" / "python"))
ENDPOINTS = [u for u in os.environ.get("TAILSIEVE_VLLM_ENDPOINTS", "").split(",") if u]
# outside the CI servers' ports (8101.., real model 8111..) and the emulators' (free ports)
PORT = int(os.environ.get("TAILSIEVE_VLLM_KILL_PORT", "8131"))
GROUPS, GROUP_SIZE, FORCED = 4, 4, 400  # 2 groups per replica; ~3-4 s of decoding per group
STEP_BOUND_S = 1200.0  # the whole step, restarts included: a bound on state, not speed
TRIES = 3  # scenarios run until one lands its kill mid-step
KILLER = Path(__file__).with_name("kill_when_running.py")
READY_S = 120.0  # the killer has its first reading (a bound: a loaded machine starts it)


def forced(prompt_id: str, sample: int) -> int:
    """Distinct exact lengths per response so a mix-up would show."""
    return FORCED + 10 * sample + int(prompt_id.rsplit("-", 1)[1])


def uniform_plan() -> StepPlan:
    """Step 0 style plan: GROUPS fresh bulk groups dealt round-robin over 2 replicas, all
    delivered (no extra groups, so nothing is aborted at the cutoff)."""
    ids = [f"kill-{i}" for i in range(GROUPS)]
    assignments = tuple(
        GroupAssignment(pid, Pool.BULK, i % 2, False, i // 2) for i, pid in enumerate(ids)
    )
    return StepPlan(
        step=0, num_replicas=2, group_size=GROUP_SIZE, num_required=GROUPS, q=0, m=0,
        num_extra=0, tail_replicas=(), bulk_replicas=(0, 1), assignments=assignments,
        num_fresh_to_deliver=GROUPS, fresh_prompt_ids=tuple(ids), is_warmup=True, is_flush=False,
    )


async def served_name(url: str) -> str:
    async with aiohttp.ClientSession() as s, s.get(url + "/v1/models") as r:
        return str((await r.json())["data"][0]["id"])


def check_delivered(plan: StepPlan, result: StepResult) -> None:
    """Every group delivered exactly once, complete and token-exact."""
    out = result.outcome
    ids = [g.prompt_id for g in out.delivered]
    assert sorted(ids) == sorted(plan.fresh_prompt_ids)  # each exactly once
    assert len(set(ids)) == len(ids) and not out.aborted
    for g in out.delivered:
        want = tuple(forced(g.prompt_id, j) for j in range(GROUP_SIZE))
        assert g.response_tokens == want, g.prompt_id
        resp = result.groups[g.prompt_id].responses
        assert [r.num_tokens for r in resp] == list(want)
        assert all(r.finish_reason == "length" for r in resp)


async def one_try(victim_url: str, pgid: int, healthy_url: str,
                  name: str) -> tuple[StepPlan, StepResult, LiveExecutor, float | None, float]:
    """The scenario once: the step, with the killer watching the victim; when it killed it
    (``time.monotonic()``; None: it did not) and when the step began."""
    ex = LiveExecutor(
        [victim_url, healthy_url],
        ExecutorConfig(model=name, sampling=SamplingParams(max_tokens=1000), stream=True,
                       request_timeout_s=STEP_BOUND_S, max_retries=0),
        forced_length=forced,
    )
    plan = uniform_plan()
    prompts = {pid: PromptInput(pid, text=pid) for pid in plan.fresh_prompt_ids}
    killer = await asyncio.create_subprocess_exec(
        sys.executable, str(KILLER), str(pgid), stdout=asyncio.subprocess.PIPE)
    try:
        assert killer.stdout is not None
        await asyncio.wait_for(killer.stdout.readline(), READY_S)  # it is watching
        t0 = time.monotonic()
        result = await asyncio.wait_for(ex.run(plan, prompts), STEP_BOUND_S)
    finally:
        with contextlib.suppress(ProcessLookupError):
            killer.terminate()  # it has decided, or the step ended first
        said, _ = await killer.communicate()
        await ex.aclose()
    return plan, result, ex, json.loads(said)["killed_s"], t0


@pytest.mark.skipif(not ENDPOINTS, reason="TAILSIEVE_VLLM_ENDPOINTS not set")
@pytest.mark.skipif(not MODEL_DIR.joinpath("config.json").exists(), reason="no tiny model")
async def test_real_replica_killed_mid_step_loses_nothing(tmp_path: Path) -> None:
    healthy_url = ENDPOINTS[0]
    name = await served_name(healthy_url)
    cfg = LaunchConfig(
        model=str(MODEL_DIR), replicas=1, base_port=PORT, python=VLLM_PYTHON, cores=(1,),
        served_model_name=name, log_dir=str(tmp_path / "launch"), health_timeout_s=600.0,
        extra_args=("--max-num-seqs", "1"),
    )
    fleets: list[VllmFleet] = []
    missed: list[str] = []
    killed = True  # a victim is started for the first try and after each kill
    try:
        for k in range(TRIES):
            if killed:
                if fleets:
                    fleets[-1].stop()
                fleets.append(VllmFleet(replace(cfg, log_dir=f"{cfg.log_dir}-{k}")))
                fleets[-1].start_processes()
                await fleets[-1].wait_healthy()
            victim = fleets[-1].replicas[0]
            plan, result, ex, killed_s, t0 = await one_try(victim.endpoint, victim.pid,
                                                           healthy_url, name)
            killed = killed_s is not None
            out = result.outcome
            print(f"\ntry {k + 1}: killed at "
                  f"{'-' if killed_s is None else f'{killed_s - t0:.2f} s'}, step makespan "
                  f"{out.makespan_s:.2f} s, relocated {out.num_relocated}, wasted "
                  f"{out.wasted_tokens} tokens, healthy {ex.healthy}, reason "
                  f"{ex.replicas[0].reason!r}")
            check_delivered(plan, result)
            if out.num_relocated:
                break
            # the victim had finished every request before the kill, or was not killed: nothing
            # was in flight, the step ran as planned
            assert all(set(result.groups[a.prompt_id].replicas) == {a.replica}
                       and result.groups[a.prompt_id].attempt == 0 for a in plan.assignments)
            assert ex.healthy == (True, True) and ex.replicas[0].num_faults == 0
            missed.append("killed late" if killed else "not killed")
        assert out.num_relocated, f"no kill landed mid-step in {TRIES} tries: {missed}"
        assert killed_s is not None and killed_s - t0 < out.makespan_s
        on_victim = {a.prompt_id for a in plan.assignments if a.replica == 0}
        # the victim's unfinished responses started again on the healthy replica; what it had
        # finished before it died is kept; no group started again whole
        assert out.num_regenerated == 0
        assert all(g.attempt == 0 for g in result.groups.values())
        moved = sum(r == 1 for pid in on_victim for r in result.groups[pid].replicas)
        assert moved == out.num_relocated >= 1
        for pid, g in result.groups.items():
            assert set(g.replicas) <= ({0, 1} if pid in on_victim else {1}), pid
        assert ex.healthy == (False, True)
        assert ex.replicas[0].num_faults == 1
    finally:
        for fleet in fleets:
            fleet.stop()  # SIGTERM/SIGKILL the process group it started (dead: no-op)
    for fleet_pid in [f.replicas[0].pid for f in fleets]:  # nothing of a victim is left
        with pytest.raises(ProcessLookupError):
            os.killpg(fleet_pid, 0)
