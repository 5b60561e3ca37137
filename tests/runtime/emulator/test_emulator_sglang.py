"""The emulator's SGLang-native endpoints (/generate, /abort_request) and TailSieve's SGLang
backend against them (request shape, token ids, logprobs, per-request abort)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import aiohttp

from tailsieve.runtime.emulator import EmulatorServer
from tailsieve.runtime.emulator.responses import FILLER_TOKEN_ID
from tailsieve.runtime.engine.backends import Backend, SamplingParams
from tailsieve.runtime.step.rollout import TailSieveRollout
from tailsieve.runtime.step.rollout_config import RolloutConfig


async def test_generate_single_with_logprobs(
    fast_server: EmulatorServer, session: aiohttp.ClientSession
) -> None:
    body = {
        "input_ids": [1, 2, 3, 4],
        "sampling_params": {"max_new_tokens": 12, "ignore_eos": True, "temperature": 1.0},
        "return_logprob": True,
    }
    async with session.post(f"{fast_server.url}/generate", json=body) as r:
        assert r.status == 200
        out = await r.json()
    meta = out["meta_info"]
    assert meta["finish_reason"] == {"type": "length", "length": 12}
    assert meta["completion_tokens"] == 12 and meta["prompt_tokens"] == 4
    assert out["output_ids"] == [FILLER_TOKEN_ID] * 12
    assert len(meta["output_token_logprobs"]) == 12
    assert [e[1] for e in meta["output_token_logprobs"]] == out["output_ids"]


async def test_generate_n_returns_list(
    fast_server: EmulatorServer, session: aiohttp.ClientSession
) -> None:
    body = {"text": "a b c", "sampling_params": {"max_new_tokens": 64, "n": 3}}
    async with session.post(f"{fast_server.url}/generate", json=body) as r:
        out = await r.json()
    assert isinstance(out, list) and len(out) == 3
    for o in out:
        k = o["meta_info"]["completion_tokens"]
        assert 1 <= k <= 64 and len(o["output_ids"]) == k
        assert o["meta_info"]["finish_reason"]["type"] in ("stop", "length")
        assert "output_token_logprobs" not in o["meta_info"]


async def test_bad_request(fast_server: EmulatorServer, session: aiohttp.ClientSession) -> None:
    async with session.post(f"{fast_server.url}/generate", json={"sampling_params": {}}) as r:
        assert r.status == 400
        assert "text or input_ids" in (await r.json())["error"]["message"]


async def test_abort_request_returns_partial(
    make_server: Any, session: aiohttp.ClientSession
) -> None:
    async with make_server(time_scale=0.05) as srv:
        body = {
            "input_ids": [5] * 8,
            "rid": "r-1",
            "sampling_params": {"max_new_tokens": 2000, "ignore_eos": True},
        }
        task = asyncio.create_task(session.post(f"{srv.url}/generate", json=body))
        while True:  # on state: the request runs and has generated tokens
            srv.driver.sync()
            if srv.driver.running_tokens() > 0:
                break
            await asyncio.sleep(0.005)
        async with session.post(f"{srv.url}/abort_request", json={"rid": "r-1"}) as r:
            assert r.status == 200
        resp = await asyncio.wait_for(task, 60.0)
        out = await resp.json()
        meta = out["meta_info"]
        assert meta["finish_reason"]["type"] == "abort"
        assert 0 < meta["completion_tokens"] < 2000
        assert srv.driver.num_running == 0


async def test_stream_is_cumulative(
    fast_server: EmulatorServer, session: aiohttp.ClientSession
) -> None:
    body = {
        "text": "x",
        "stream": True,
        "sampling_params": {"max_new_tokens": 30, "ignore_eos": True},
    }
    counts: list[int] = []
    async with session.post(f"{fast_server.url}/generate", json=body) as r:
        async for raw in r.content:
            line = raw.decode().strip()
            if not line.startswith("data:") or line == "data: [DONE]":
                continue
            counts.append(json.loads(line[5:])["meta_info"]["completion_tokens"])
    assert counts == sorted(counts) and counts[-1] == 30


async def test_rollout_over_sglang_backend(make_server: Any) -> None:
    """TailSieve's SGLang backend against two emulated replicas: complete groups with token ids
    and logprobs; the aborted groups leave nothing running (per-request abort)."""
    async with make_server(time_scale=0.01) as a, make_server(time_scale=0.01, seed=1) as b:
        cfg = RolloutConfig(
            num_groups=4,
            group_size=2,
            backend=Backend.SGLANG,
            sampling=SamplingParams(max_tokens=2000, logprobs=0),
            controller={"m0": 1},  # a tail pool and a cutoff from the first step
        )
        aborted = 0
        async with TailSieveRollout([a.url, b.url], cfg) as ro:
            for step in range(3):
                fresh = [
                    {"prompt_id": f"s{step}-{i}", "prompt_token_ids": [3, 4, 5]}
                    for i in range(ro.num_fresh_needed())
                ]
                batch = await ro.step(fresh)
                aborted += batch.metrics.num_aborted
                assert len(batch.groups) == 4
                for g in batch.groups:
                    assert len(g.responses) == 2
                    for r in g.responses:
                        assert r.token_ids is not None and len(r.token_ids) == r.num_tokens
                        assert r.logprobs is not None and len(r.logprobs) == r.num_tokens
        assert a.driver.num_running == 0 and b.driver.num_running == 0
        # cut-off requests were aborted by id (POST /abort_request), not only by disconnecting;
        # each abort is best effort with a 2 s limit, so on a loaded machine some may time out
        assert aborted > 0 and a.num_abort_requests + b.num_abort_requests > 0
