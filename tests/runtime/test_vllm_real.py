"""Real vLLM CPU servers: several TailSieve steps in replay mode with AIME lengths, then the same
steps with Uniform routing; every batch complete and exact. Needs servers:

    TAILSIEVE_VLLM_ENDPOINTS=http://127.0.0.1:8101,http://127.0.0.1:8102 \\
    TAILSIEVE_VLLM_MODEL=tiny pytest -m vllm tests/runtime/test_vllm_real.py -s

Step times are printed and written to ``$TAILSIEVE_VLLM_RESULTS`` (a JSON file) when set.
No check depends on speed: after a step with aborts the servers are awaited until they hold
nothing (a hang guard, not a deadline), and that a closed connection frees the server is shown
by the tokens it generated (fewer than the request's length), not by how soon it went.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import aiohttp
import pytest

from tailsieve.runtime.engine.backends import SamplingParams
from tailsieve.runtime.step.replay import ReplayLengths
from tailsieve.runtime.step.rollout import TailSieveRollout
from tailsieve.runtime.step.rollout_config import RolloutConfig
from tailsieve.workload.presets import AIME_TRACE_IN_REPO

pytestmark = pytest.mark.vllm

AIME = AIME_TRACE_IN_REPO
ENDPOINTS = [u for u in os.environ.get("TAILSIEVE_VLLM_ENDPOINTS", "").split(",") if u]
NUM_GROUPS, GROUP_SIZE, NUM_STEPS = 4, 4, 4
LENGTH_SCALE = 0.05  # AIME max 16,000 -> 800 tokens, inside --max-model-len 1024
HANG_GUARD_S = 600.0  # ends a wait that would never end; not a speed requirement


async def served_model(url: str) -> str:
    """The served model id: TAILSIEVE_VLLM_MODEL when it names one (id or root path), else the
    first id the server lists."""
    async with aiohttp.ClientSession() as s, s.get(url + "/v1/models") as r:
        data = (await r.json())["data"]
    want = os.environ.get("TAILSIEVE_VLLM_MODEL", "")
    for d in data:
        if want and want in (d.get("id"), d.get("root")):
            return str(d["id"])
    return str(data[0]["id"])


async def metric(url: str, name: str) -> float:
    """The sum of a metric's series on a server (``/metrics``)."""
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        text = await r.text()
    return sum(
        float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(name + "{") or line.startswith(name + " ")
    )


async def num_running(url: str) -> float:
    return await metric(url, "vllm:num_requests_running")


async def wait_until(cond: Callable[[], Awaitable[bool]], what: str,
                     guard_s: float = HANG_GUARD_S) -> None:
    """Wait on state: poll ``cond`` until it holds. ``guard_s`` only ends a hang (no speed is
    asserted); its message says what never happened."""
    loop = asyncio.get_running_loop()
    give_up = loop.time() + guard_s
    while not await cond():
        assert loop.time() < give_up, f"{what}: not after {guard_s:.0f} s (hang guard)"
        await asyncio.sleep(0.1)


async def servers_drained() -> bool:
    return not any([await num_running(u) for u in ENDPOINTS])


async def run_policy(policy: str, model: str, lengths: ReplayLengths) -> dict[str, Any]:
    cfg = RolloutConfig(
        num_groups=NUM_GROUPS,
        group_size=GROUP_SIZE,
        policy=policy,
        model=model,
        sampling=SamplingParams(max_tokens=1000, temperature=1.0, seed=0),
        replay=lengths,
        request_timeout_s=600.0,
    )
    source = lengths.prompts()
    steps: list[dict[str, Any]] = []
    delivered: list[str] = []
    async with TailSieveRollout(ENDPOINTS, cfg) as ro:
        for i in range(NUM_STEPS + 1):
            if i < NUM_STEPS:
                k = ro.num_fresh_needed()
                new, source = source[:k], source[k:]
                batch = await ro.step(new)
                assert len(batch.groups) == NUM_GROUPS
            else:
                flushed = await ro.flush()
                if flushed is None:
                    break
                batch = flushed
            for g in batch.groups:
                assert len(g.responses) == GROUP_SIZE
                got = [r.num_tokens for r in g.responses]
                assert got == [lengths(g.prompt_id, j) for j in range(GROUP_SIZE)], g.prompt_id
                assert all(r.finish_reason == "length" for r in g.responses)
            delivered += [g.prompt_id for g in batch.groups]
            m = batch.metrics
            if m.num_aborted:  # the aborted requests leave the servers before the next step
                await wait_until(servers_drained, "the servers to hold no request")
            steps.append(
                {
                    "step": m.step,
                    "makespan_s": round(m.makespan_s, 3),
                    "q": m.q,
                    "m": m.m,
                    "aborted": m.num_aborted,
                    "flush": m.is_flush,
                    "tokens": m.delivered_tokens,
                    "wasted": m.wasted_tokens,
                }
            )
    assert len(delivered) == len(set(delivered))
    return {
        "policy": policy,
        "steps": steps,
        "total_s": round(sum(s["makespan_s"] for s in steps), 3),
    }


@pytest.mark.skipif(not ENDPOINTS, reason="TAILSIEVE_VLLM_ENDPOINTS not set")
@pytest.mark.skipif(not AIME.exists(), reason="AIME trace not available")
async def test_real_vllm_tailsieve_and_uniform_replay() -> None:
    model = await served_model(ENDPOINTS[0])
    lengths = ReplayLengths.from_file(AIME, length_scale=LENGTH_SCALE, max_tokens=1000)
    results = [await run_policy(p, model, lengths) for p in ("tailsieve", "uniform")]
    for r in results:
        print(f"\n{r['policy']}: total {r['total_s']} s")
        for s in r["steps"]:
            print("  ", s)
    out = os.environ.get("TAILSIEVE_VLLM_RESULTS")
    if out:
        Path(out).write_text(json.dumps(results, indent=2))


@pytest.mark.skipif(not ENDPOINTS, reason="TAILSIEVE_VLLM_ENDPOINTS not set")
def test_real_vllm_rollout_cli_without_model(tmp_path: Path) -> None:
    """``tailsieve rollout`` with no --model asks the servers (GET /v1/models) and runs."""
    from tailsieve.cli.main import main

    out = tmp_path / "run"
    rc = main([
        "rollout", "--endpoints", ",".join(ENDPOINTS), "--replay-trace", "aime",
        "--length-scale", "0.01", "--max-tokens", "200", "--groups", "2", "--group-size", "2",
        "--steps", "2", "--policy", "tailsieve", "--request-timeout", "600", "--out", str(out),
    ])
    assert rc == 0
    steps = [json.loads(x) for x in (out / "steps.jsonl").read_text().splitlines()]
    assert all(s["num_groups"] == 2 for s in steps if not s["is_flush"])
    rows = [json.loads(x) for f in sorted((out / "batches").iterdir())
            for x in f.read_text().splitlines()]
    assert rows and all(r["finish_reason"] == "length" for r in rows)


@pytest.mark.skipif(not ENDPOINTS, reason="TAILSIEVE_VLLM_ENDPOINTS not set")
async def test_real_vllm_stream_interval_sends_whole_chunks() -> None:
    """vLLM's per-request ``stream_interval`` (what ``--stream-interval`` sends): the first
    token at once, then chunks of that many, the rest with the finish reason. The emulator
    mirrors this (tests/runtime/emulator)."""
    model = await served_model(ENDPOINTS[0])
    body = {"model": model, "prompt": "Count: 1 2 3", "max_tokens": 21, "ignore_eos": True,
            "stream": True, "stream_interval": 4, "return_token_ids": True, "temperature": 0}
    sizes, reasons = [], []
    async with aiohttp.ClientSession() as s, s.post(ENDPOINTS[0] + "/v1/completions",
                                                    json=body) as r:
        assert r.status == 200
        async for raw in r.content:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            for ch in json.loads(line[5:])["choices"]:
                sizes.append(len(ch["token_ids"]))
                reasons.append(ch["finish_reason"])
    assert sum(sizes) == 21 and sizes == [1, 4, 4, 4, 4, 4]
    assert reasons[-1] == "length" and not any(reasons[:-1])


@pytest.mark.skipif(not ENDPOINTS, reason="TAILSIEVE_VLLM_ENDPOINTS not set")
async def test_a_closed_connection_frees_the_server() -> None:
    """Abort on disconnect, by state: a request of 8 x 900 forced tokens is closed once the
    server runs it; the server then holds nothing, having generated fewer than its 7,200 tokens
    (run to the end, it would have generated them all, however slow the machine)."""
    url = ENDPOINTS[0]
    model = await served_model(url)
    await wait_until(lambda: no_request(url), "the server to be idle before the test")
    before = await metric(url, "vllm:generation_tokens_total")
    body = {"model": model, "prompt": "Count: 1 2 3", "max_tokens": 900, "ignore_eos": True,
            "n": 8, "temperature": 1.0}

    async def call() -> None:
        async with aiohttp.ClientSession() as s, s.post(url + "/v1/completions",
                                                        json=body) as r:
            await r.read()

    task = asyncio.create_task(call())

    async def started() -> bool:
        assert not task.done(), "the request ended before the server reported it running"
        return await metric(url, "vllm:generation_tokens_total") > before

    await wait_until(started, "the server to generate the request's first tokens")
    task.cancel()  # closes the connection
    with contextlib.suppress(asyncio.CancelledError):
        await task
    await wait_until(lambda: no_request(url), "the closed request to leave the server")
    generated = await metric(url, "vllm:generation_tokens_total") - before
    assert 0 < generated < 8 * 900


async def no_request(url: str) -> bool:
    return await num_running(url) == 0 and await metric(url, "vllm:num_requests_waiting") == 0
