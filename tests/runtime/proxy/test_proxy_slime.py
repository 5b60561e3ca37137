"""slime's rollout HTTP calls pointed at the proxy (as ``--sglang-router-ip/port``), replayed
here without slime: the exact ``/generate`` request of ``slime/rollout/sglang_rollout.py``
(``input_ids``, its sampling params, ``return_logprob``, the ``X-SMG-Routing-Key`` header
of ``--router-policy consistent_hashing``), how it reads the answer (``meta_info.
output_token_logprobs``), and its abort at the end of a step (``GET /workers``, then
``POST {url}/abort_request {"abort_all": true}`` and ``GET {url}/v1/loads?include=core``
until no request is left). slime sends all of these to one address, its router's, and both
registering and ``abort_all`` are admin calls: slime is pointed at the proxy's admin listener
(``tailsieve serve --admin-port``)."""

from __future__ import annotations

import asyncio
import itertools
import json
from typing import Any

import aiohttp
import pytest
from proxy_stub import char_ids, expected, long_prompt, stub_logprob, stub_proxy, stub_text

from tailsieve.runtime.stub import StubPieceRunner


def slime_sampling(max_new_tokens: int) -> dict[str, Any]:
    """``GenerateState.sampling_params`` with slime's defaults (temperature 1, top_p 1,
    top_k -1, no stop, special tokens kept)."""
    return {"temperature": 1.0, "top_p": 1.0, "top_k": -1, "max_new_tokens": max_new_tokens,
            "stop": None, "stop_token_ids": None, "skip_special_tokens": False,
            "no_stop_trim": True, "spaces_between_special_tokens": False}


async def slime_generate(s: aiohttp.ClientSession, router: str, prompt_ids: list[int],
                         session_id: str | None, max_new_tokens: int) -> dict[str, Any]:
    payload = {"sampling_params": slime_sampling(max_new_tokens), "return_logprob": True,
               "input_ids": prompt_ids}
    headers = {"X-SMG-Routing-Key": session_id} if session_id else None
    async with s.post(router + "/generate", json=payload, headers=headers) as r:
        assert r.status == 200, await r.text()
        out: dict[str, Any] = await r.json()
        return out


def slime_reads(out: dict[str, Any]) -> tuple[list[int], list[float], str, str]:
    """What slime takes from an answer: tokens and logprobs from output_token_logprobs,
    the text and the finish reason's type."""
    meta = out["meta_info"]
    lps = meta["output_token_logprobs"]
    return [x[1] for x in lps], [x[0] for x in lps], out["text"], meta["finish_reason"]["type"]


def slime_load(load: Any) -> int:
    """Requests a /v1/loads answer reports (running + waiting over its entries)."""
    return sum(e.get("num_running_reqs", 0) + e.get("num_waiting_reqs", 0)
               for e in load["loads"])


async def test_slime_generate_is_exact_and_sticky_per_routing_key() -> None:
    proxy = await stub_proxy()
    try:
        prompt = char_ids("Solve 2+2. Think step by step.")
        async with aiohttp.ClientSession() as s:
            outs = await asyncio.gather(*(slime_generate(s, proxy.url, prompt, f"sample-{k}", 50)
                                          for k in range(4)))
            want, reason = expected(prompt, 50)
            for out in outs:
                ids, lps, _text, fin = slime_reads(out)
                assert ids == want and out["output_ids"] == want
                assert lps == pytest.approx([stub_logprob(t) for t in want])
                assert fin == reason
            # a second turn of each sample goes to its session: the same replica (it holds
            # the context), no boundary move with moves priced and nothing else running
            gw = proxy.service.gateway  # type: ignore[union-attr]
            first = {r.replica: r.num_turns for r in gw.stats().replicas}
            turn2 = prompt + want + char_ids(" Observation: 4.")
            for k in range(4):
                await slime_generate(s, proxy.url, turn2, f"sample-{k}", 20)
            assert gw.stats().moves_at_boundary == 0
            second = {r.replica: r.num_turns - first[r.replica] for r in gw.stats().replicas}
            assert second == first
    finally:
        await proxy.aclose()


async def test_slime_abort_ends_every_request_with_its_partial_output() -> None:
    runner = StubPieceRunner(2, seconds_per_token=0.01)
    proxy = await stub_proxy(runner=runner)
    router = await proxy.start_admin()  # slime's --sglang-router-ip / -port
    svc = proxy.service
    assert svc is not None
    try:
        prompts = [long_prompt(f"A long story {k}:", 250, 400) for k in range(3)]
        async with aiohttp.ClientSession() as s:
            tasks = [asyncio.create_task(slime_generate(s, router, prompts[k], f"s{k}", 400))
                     for k in range(3)]
            while sum(len(t.pieces) for r in list(svc.runs) for t in r.traces) < 3:
                await asyncio.sleep(0.01)
            async with s.get(router + "/workers") as r:
                urls = [w["url"] for w in (await r.json())["workers"]]
            assert urls == [router]
            for url in urls:
                async with s.post(url + "/abort_request", json={"abort_all": True}) as r:
                    assert r.status == 200
            outs = await asyncio.gather(*tasks)
            for url in urls:
                async with s.get(url + "/v1/loads", params={"include": "core"}) as r:
                    assert slime_load(await r.json()) == 0
        for k, out in enumerate(outs):
            ids, _, _, fin = slime_reads(out)
            want, _ = expected(prompts[k], 400)
            assert fin == "abort"
            assert ids == want[:len(ids)]  # what the finished pieces generated, nothing else
            assert len(ids) < len(want)
        assert svc.num_aborted_samples == 3
    finally:
        await proxy.aclose()


async def test_generate_with_n_and_a_batch_answers_a_list_in_sglang_s_shape() -> None:
    proxy = await stub_proxy()
    try:
        a, b = long_prompt("first", 30, 40), long_prompt("second", 30, 40)
        body = {"input_ids": [a, b], "return_logprob": True,
                "sampling_params": {"max_new_tokens": 40, "n": 2}, "rid": "batch-1"}
        async with aiohttp.ClientSession() as s, s.post(proxy.url + "/generate",
                                                        json=body) as r:
            assert r.status == 200, await r.text()
            outs = await r.json()
        assert [o["index"] for o in outs] == [0, 1, 2, 3]
        for o in outs:
            prompt = (a, b)[o["index"] // 2]
            want, reason = expected(prompt, 40)
            assert o["output_ids"] == want
            assert o["meta_info"]["finish_reason"]["type"] == reason
            assert o["meta_info"]["prompt_tokens"] == len(prompt)
            assert o["meta_info"]["completion_tokens"] == len(want)
            assert o["meta_info"]["id"] == f"batch-1-{o['index']}"
            assert [e[1] for e in o["meta_info"]["output_token_logprobs"]] == want
    finally:
        await proxy.aclose()


async def test_slime_streaming_generate_reads_cumulative_chunks() -> None:
    """``slime/rollout/sglang_streaming_rollout.py``: the same payload with ``stream: true``;
    every chunk is the sample so far (its tokens from output_token_logprobs), the last one
    the whole, exact answer."""
    proxy = await stub_proxy()
    try:
        prompt = long_prompt("Stream me", 60, 80)
        payload = {"sampling_params": slime_sampling(80), "return_logprob": True,
                   "stream": True, "input_ids": prompt}
        seen: list[list[int]] = []
        text = ""
        async with aiohttp.ClientSession() as s, s.post(
                proxy.url + "/generate", json=payload,
                headers={"X-SMG-Routing-Key": "sample-9"}) as r:
            assert r.status == 200
            async for raw in r.content:
                line = raw.decode().strip()
                if not line.startswith("data:") or line[5:].strip() == "[DONE]":
                    continue
                chunk = json.loads(line[5:])
                text = chunk.get("text", text)
                seen.append([x[1] for x in chunk["meta_info"]["output_token_logprobs"]])
        want, _ = expected(prompt, 80)
        assert seen[-1] == want and text == stub_text(want)
        assert len(seen) > 1 and all(a == b[:len(a)] for a, b in itertools.pairwise(seen))
    finally:
        await proxy.aclose()
