"""A real vLLM replica SIGKILLed mid-step loses nothing.

Starts its own vLLM CPU server (``VllmFleet``, port ``TAILSIEVE_VLLM_KILL_PORT``, default 8131,
core 1), runs one live replay step
on a 2-replica ``LiveExecutor`` over [that server, the first CI server] with groups on both,
SIGKILLs the started server's process group (API server, EngineCore, Worker) once its groups
are generating (the server runs one request at a time, and the test kills it when its first
streamed token reaches the executor, however long a loaded machine takes to get there, up to
``WAIT_RUNNING_S``), and checks: the step completes, every group is delivered exactly once, complete
and exact (forced lengths), the killed replica's unfinished responses started again on the healthy
replica, and the dead replica is marked unhealthy. Needs the CI servers:

    TAILSIEVE_VLLM_ENDPOINTS=http://127.0.0.1:8101,http://127.0.0.1:8102 \\
    pytest -m vllm tests/runtime/test_vllm_kill.py -s
"""

from __future__ import annotations

import asyncio
import os
import signal
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tailsieve.core.plan import GroupAssignment, StepPlan
from tailsieve.core.pool import Pool
from tailsieve.runtime.backends import PromptInput, SamplingParams
from tailsieve.runtime.executor import LiveExecutor
from tailsieve.runtime.executor_config import ExecutorConfig
from tailsieve.runtime.launcher import LaunchConfig, VllmFleet
from tailsieve.runtime.lean_http import LeanTransport
from tailsieve.runtime.transport import JSON

pytestmark = pytest.mark.vllm

ROOT = Path(__file__).resolve().parents[2]
MODEL_DIR = Path(os.environ.get("TAILSIEVE_TINY_MODEL_DIR", ROOT / ".cache" / "tiny-qwen2"))
VLLM_PYTHON = os.environ.get("TAILSIEVE_VLLM_PYTHON", str(ROOT / ".venv-vllm" / "bin" / "python"))
ENDPOINTS = [u for u in os.environ.get("TAILSIEVE_VLLM_ENDPOINTS", "").split(",") if u]
# outside the CI servers' ports (8101.., real model 8111..) and the emulators' (free ports)
PORT = int(os.environ.get("TAILSIEVE_VLLM_KILL_PORT", "8131"))
GROUPS, GROUP_SIZE, FORCED = 4, 4, 400  # 2 groups per replica; ~3-4 s of decoding per group
# bounds on state, not deadlines for speed: generous enough for a machine under full load
WAIT_RUNNING_S = 600.0  # the victim has its groups running
STEP_BOUND_S = 1200.0  # the whole step, regeneration included


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


class WatchedTransport(LeanTransport):
    """The executor's own transport; ``victim_streamed`` is set when a streamed token arrives
    from ``victim_url`` (client-side evidence that the victim is decoding). Only a choice with
    a token counts: not the usage chunk, nor the engine's error message (vLLM's front end
    ends a stream with one when its worker died; the transport raises it as a replica fault)."""

    def __init__(self, victim_url: str) -> None:
        super().__init__()
        self.victim_url = victim_url
        self.victim_streamed = asyncio.Event()

    async def stream_json(
        self, url: str, payload: JSON, timeout_s: float | None
    ) -> AsyncIterator[JSON]:
        async for obj in super().stream_json(url, payload, timeout_s):
            if url.startswith(self.victim_url) and has_token(obj):
                self.victim_streamed.set()
            yield obj


def has_token(chunk: JSON) -> bool:
    """A streamed chunk carries at least one generated token of a choice."""
    return any(isinstance(c, dict) and (c.get("token_ids") or c.get("text"))
               for c in chunk.get("choices") or ())


async def running_on(url: str) -> float:
    """``vllm:num_requests_running`` of a server (0 when it does not answer)."""
    try:
        timeout = aiohttp.ClientTimeout(total=2)
        async with aiohttp.ClientSession(timeout=timeout) as s, s.get(url + "/metrics") as r:
            text = await r.text()
    except (aiohttp.ClientError, TimeoutError):
        return 0.0
    return sum(float(line.rsplit(" ", 1)[1]) for line in text.splitlines()
               if line.startswith("vllm:num_requests_running"))


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
    fleet = VllmFleet(cfg)
    try:
        fleet.start_processes()
        await fleet.wait_healthy()
        victim = fleet.replicas[0]
        transport = WatchedTransport(victim.endpoint)
        ex = LiveExecutor(
            [victim.endpoint, healthy_url],
            ExecutorConfig(model=name, sampling=SamplingParams(max_tokens=1000), stream=True,
                           request_timeout_s=STEP_BOUND_S, max_retries=0),
            forced_length=forced, transport=transport,
        )
        plan = uniform_plan()
        prompts = {pid: PromptInput(pid, text=pid) for pid in plan.fresh_prompt_ids}
        killed_at: list[float] = []

        async def killer(run: asyncio.Task[Any]) -> None:
            # wait until the victim streams its first token, however long that takes, then
            # kill the whole tree. It runs one request at a time (--max-num-seqs 1), so no group
            # of its can complete before GROUP_SIZE of its responses have finished: the kill
            # lands while both its groups are running, whatever the load
            loop = asyncio.get_running_loop()
            start = loop.time()
            first = asyncio.ensure_future(transport.victim_streamed.wait())
            await asyncio.wait({first, run}, timeout=WAIT_RUNNING_S,
                               return_when=asyncio.FIRST_COMPLETED)
            first.cancel()
            waited = loop.time() - start
            assert transport.victim_streamed.is_set(), (
                f"{'the step ended' if run.done() else 'gave up'} after {waited:.0f} s before "
                f"the victim ({victim.endpoint}) streamed a token")
            killed_at.append(loop.time())
            os.killpg(victim.pid, signal.SIGKILL)

        try:
            t0 = asyncio.get_running_loop().time()
            run_task = asyncio.create_task(asyncio.wait_for(ex.run(plan, prompts), STEP_BOUND_S))
            kill_task = asyncio.create_task(killer(run_task))
            try:
                await kill_task
            except BaseException:
                run_task.cancel()
                raise
            result = await run_task
        finally:
            await ex.aclose()
        out = result.outcome
        print(f"\nkilled at {killed_at[0] - t0:.2f} s, step makespan {out.makespan_s:.2f} s, "
              f"relocated {out.num_relocated}, wasted {out.wasted_tokens} tokens, "
              f"healthy {ex.healthy}, reason {ex.replicas[0].reason!r}")
        assert killed_at and killed_at[0] - t0 < out.makespan_s  # the kill was mid-step
        ids = [g.prompt_id for g in out.delivered]
        assert sorted(ids) == sorted(plan.fresh_prompt_ids)  # each exactly once
        assert len(set(ids)) == len(ids) and not out.aborted
        for g in out.delivered:
            want = tuple(forced(g.prompt_id, j) for j in range(GROUP_SIZE))
            assert g.response_tokens == want, g.prompt_id
            resp = result.groups[g.prompt_id].responses
            assert [r.num_tokens for r in resp] == list(want)
            assert all(r.finish_reason == "length" for r in resp)
        on_victim = [a.prompt_id for a in plan.assignments if a.replica == 0]
        # the victim's unfinished responses started again on the healthy replica; what it
        # had finished before it died is kept; no group started again whole
        assert any(1 in result.groups[pid].replicas for pid in on_victim)
        assert out.num_relocated >= 1 and out.num_regenerated == 0
        assert ex.healthy == (False, True)
        assert ex.replicas[0].num_faults == 1
    finally:
        fleet.stop()  # SIGTERM/SIGKILL the process group it started (already dead: no-op)
    assert await running_on(f"http://127.0.0.1:{PORT}") == 0.0
