"""Batch variance on a real vLLM CPU server, and why it does not touch the router's guarantees.

vLLM's greedy decoding is not batch-invariant: the same prompt decoded alone and decoded in a
batch of other requests runs other kernel shapes (and, with chunked prefill, other splits), so
its logits differ in the low bits and a near-tie can flip a token; from there the two texts
differ. These tests document that, with the real model (SmolLM2-135M-Instruct):

* a response decoded alone and the same response decoded beside a batch of others are the same
  up to a near-tie (``check_logprobs_close``), whether or not they diverge on this CPU;
* a response continued in pieces while other requests come and go (the batch changes at every
  piece) still satisfies the router's guarantees exactly (``vllm_wire.check_chains``): the
  splice never depends on the engine being deterministic.

Needs the real servers (scripts/test.sh starts them). See docs/vllm-cpu-notes.md.
"""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
from engine_outputs import EngineOutput, check_logprobs_close
from real_servers import REAL_ENDPOINTS, needs_real
from test_vllm_continuation import chained, one_go, served_name
from vllm_wire import as_engine_output, check_chains, proxies

from tailsieve.runtime.engine.backends import SamplingParams

pytestmark = [pytest.mark.vllm, needs_real(2)]

PROMPT = "The history of the Roman Empire begins"
OTHERS = [f"Write a poem about the number {i}." for i in range(7)]
MAX_TOKENS, TOP_K = 48, 5


def body(name: str, prompt: str, **kw: Any) -> dict[str, Any]:
    return {"model": name, "prompt": prompt, "max_tokens": MAX_TOKENS, "temperature": 0,
            "logprobs": TOP_K, "return_token_ids": True, **kw}  # fmt: skip


async def test_alone_and_in_a_batch_are_close_not_necessarily_equal() -> None:
    url = REAL_ENDPOINTS[0]
    name = await served_name(url)
    alone = EngineOutput.of_completion(await one_go(url, body(name, PROMPT)))
    # the same request in a batch of 8: the others run at the same time (ignore_eos: they are
    # still decoding for the whole response)
    batch = await asyncio.gather(
        one_go(url, body(name, PROMPT)),
        *(one_go(url, body(name, p, ignore_eos=True)) for p in OTHERS),
    )
    batched = EngineOutput.of_completion(batch[0])
    close = check_logprobs_close(batched, alone, "in a batch of 8", "alone")
    print(f"\nalone vs in a batch of 8: first divergence {close.divergence}, max |logprob "
          f"difference| {close.max_logprob_diff:.2e} over {close.common} tokens")
    assert close.common >= 1


async def test_pieces_under_a_changing_batch_are_spliced_exactly() -> None:
    name = await served_name(REAL_ENDPOINTS[0])
    ref = EngineOutput.of_completion(await one_go(REAL_ENDPOINTS[0], body(name, PROMPT)))
    sp = SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0, logprobs=TOP_K)

    async def traffic() -> None:  # requests of several lengths on both servers, in waves
        for wave in range(100):
            await asyncio.gather(*(
                one_go(REAL_ENDPOINTS[k % 2], body(name, p, max_tokens=4 + 5 * k + wave % 3,
                                                    ignore_eos=True, logprobs=None))
                for k, p in enumerate(OTHERS)))  # fmt: skip

    noise = asyncio.create_task(traffic())
    try:
        async with proxies(REAL_ENDPOINTS[:2]) as (urls, log):
            got, servers = await chained(urls, name, sp, 6, move=True, prompt=PROMPT)
    finally:
        noise.cancel()
    ids = list(got.token_ids or ())
    segs = check_chains(log, {PROMPT: [ids]}, MAX_TOKENS, {PROMPT: [got.logprobs]})[PROMPT][0]
    assert len(segs) == len(servers) >= 2 and servers[-1] == 1
    close = check_logprobs_close(as_engine_output(ids, segs), ref, "pieces under load", "alone")
    print(f"\n{len(segs)} pieces on {servers} under changing batches: first divergence from "
          f"alone {close.divergence}, max |logprob difference| {close.max_logprob_diff:.2e}")
