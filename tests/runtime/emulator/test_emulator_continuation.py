"""The emulator serves continuations: token-id prompts, a per-replica prefix cache (prefill
only for uncached tokens), and a continued response's length consistent with its one-go draw."""

from __future__ import annotations

import asyncio
import warnings
from typing import Any

import aiohttp
import pytest

from tailsieve.core.plan import GroupAssignment, StepPlan
from tailsieve.core.pool import Pool
from tailsieve.runtime.emulator import EmulatorServer
from tailsieve.runtime.emulator.prefix_cache import PrefixCache
from tailsieve.runtime.emulator.responses import FILLER_TOKEN_ID
from tailsieve.runtime.engine.backends import Backend, PromptInput, SamplingParams
from tailsieve.runtime.step.executor import LiveExecutor
from tailsieve.runtime.step.executor_config import ExecutorConfig
from tailsieve.runtime.step.step_state import StepResult

ServerFactory = Any  # conftest.make_server

PROMPT = list(range(1000, 1100))  # 100 prompt token ids
GROUP = {"g": PromptInput("g", token_ids=tuple(PROMPT))}  # the executor tests' one group
# a moved response's length: ~1.8 s of emulated decoding at time_scale 0.05, so the move (once
# the source generated 20-40 tokens) lands mid-response even when a loaded machine's event loop
# runs the mover 100s of ms late (400 tokens, ~0.24 s, finished first under two CPU hogs)
MOVED = 3000  # + the 100-token prompt: inside the emulator's 4,096-token context
# a moved-from replica decodes at model speed (MOVED tokens take ~10 s; the move comes after a
# few dozen), so no stall of a loaded event loop lets it finish before the move
SOURCE_SCALE = 1.0


def one_group_plan(num_replicas: int, group_size: int) -> StepPlan:
    """A step of one group "g", dealt to replica 0, over ``num_replicas`` bulk replicas."""
    return StepPlan(
        step=0, num_replicas=num_replicas, group_size=group_size, num_required=1, q=0, m=0,
        num_extra=0, tail_replicas=(), bulk_replicas=tuple(range(num_replicas)),
        assignments=(GroupAssignment("g", Pool.BULK, 0, False, 0),), num_fresh_to_deliver=1,
        fresh_prompt_ids=("g",), is_warmup=True, is_flush=False,
    )  # fmt: skip


def chained_executor(
    servers: list[EmulatorServer], backend: Backend, max_tokens: int, forced: int,
    piece_tokens: int | None = None, stream_interval: int | None = None,
) -> LiveExecutor:
    """A continuation executor over ``servers``; sample i's length is ``forced + i``
    (``stream_interval``: streamed, in chunks of that many tokens)."""
    cfg = ExecutorConfig(
        backend=backend, model=servers[0].config.model_name,
        sampling=SamplingParams(max_tokens=max_tokens), continuation=True,
        piece_tokens=piece_tokens, stream=stream_interval is not None,
        stream_interval=stream_interval,
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # per-request seeds across seams: not used here
        return LiveExecutor([s.url for s in servers], cfg, forced_length=lambda p, i: forced + i)


async def until_running(srv: EmulatorServer, tokens: int) -> None:
    """Wait until ``srv``'s running requests have generated ``tokens`` tokens."""
    while True:
        srv.driver.sync()
        if srv.driver.running_tokens() >= tokens:
            return
        await asyncio.sleep(0.005)


async def run_moving_after(ex: LiveExecutor, src: EmulatorServer, tokens: int) -> StepResult:
    """Run the one-group step of two replicas, moving response 0 to replica 1 once ``src``
    (replica 0) has generated ``tokens`` tokens; closes the executor."""

    async def mover() -> None:
        await until_running(src, tokens)
        assert ex.move("g", 0, 1)

    task = asyncio.create_task(mover())
    res = await asyncio.wait_for(ex.run(one_group_plan(2, 1), GROUP), 600)  # bounds, not speed
    await asyncio.wait_for(task, 60)
    await ex.aclose()
    return res


async def complete(session: aiohttp.ClientSession, url: str, body: dict) -> dict:  # type: ignore[type-arg]
    async with session.post(url + "/v1/completions", json=body) as resp:
        assert resp.status == 200
        out: dict = await resp.json()  # type: ignore[type-arg]
        return out


def test_prefix_cache_blocks_and_lru() -> None:
    c = PrefixCache(block_tokens=4, max_blocks=3)
    assert c.lookup(list(range(10))) == 0
    c.insert(list(range(10)))  # 2 full blocks
    assert c.lookup(list(range(10))) == 8
    assert c.lookup([*range(8), 99, 98]) == 8
    assert c.lookup([1, *range(1, 10)]) == 0  # first block differs: nothing after it counts
    c.insert(list(range(100, 112)))  # 3 more blocks: the oldest are evicted
    assert c.lookup(list(range(10))) == 0
    assert c.lookup(list(range(4))) == 0  # the last prompt token is always computed


async def test_continuation_length_matches_the_one_go_draw(
    fast_server: EmulatorServer, session: aiohttp.ClientSession
) -> None:
    body = {"prompt": PROMPT, "max_tokens": 4000, "seed": 5, "return_token_ids": True}
    one = await complete(session, fast_server.url, body)
    total = len(one["choices"][0]["token_ids"])
    assert total > 20
    first = await complete(session, fast_server.url, {**body, "max_tokens": 20})
    ids = first["choices"][0]["token_ids"]
    assert len(ids) == 20 and first["choices"][0]["finish_reason"] == "length"
    rest = await complete(
        session, fast_server.url, {**body, "prompt": PROMPT + ids, "max_tokens": 4000 - 20}
    )
    assert len(rest["choices"][0]["token_ids"]) == total - 20
    assert rest["choices"][0]["finish_reason"] == one["choices"][0]["finish_reason"]


async def test_prefill_is_charged_only_for_uncached_tokens(
    make_server: ServerFactory, session: aiohttp.ClientSession
) -> None:
    async with make_server(time_scale=0.01) as a, make_server(time_scale=0.01) as b:
        body = {"prompt": PROMPT, "max_tokens": 64, "ignore_eos": True}
        await complete(session, a.url, body)
        cont = {**body, "prompt": PROMPT + [FILLER_TOKEN_ID] * 64}
        before_a = a.driver.stats.prompt_tokens
        await complete(session, a.url, cont)  # same replica: prompt and piece are cached
        assert a.driver.stats.cached_prompt_tokens == 160  # 10 full blocks of 16
        assert a.driver.stats.prompt_tokens - before_a == 164 - 160
        await complete(session, b.url, cont)  # another replica: the whole prefix is prefilled
        assert b.driver.stats.cached_prompt_tokens == 0
        assert b.driver.stats.prompt_tokens == 164


@pytest.mark.parametrize("done", [1, 50, 500])
def test_conditional_draw_exceeds_done(done: int) -> None:
    from tailsieve.runtime.emulator.replica import _conditional_draw

    for u in (0.0, 0.3, 0.999):
        assert round(_conditional_draw(u, done, 200.0, 1.0)) > done


@pytest.mark.parametrize("backend", ["vllm", "sglang"])
async def test_live_chains_over_the_emulator(make_server: ServerFactory, backend: str) -> None:
    """The live executor's pieces against the emulator (vLLM token-id prompts, SGLang
    ``input_ids``): each response is its forced length, in several pieces, and the pieces after
    the first find their prefix in the replica's cache."""
    async with make_server(time_scale=0.01) as srv:
        ex = chained_executor([srv], Backend(backend), 500, 40, piece_tokens=16)
        res = await ex.run(one_group_plan(1, 2), GROUP)
        await ex.aclose()
    got = res.groups["g"].responses
    assert [r.num_tokens for r in got] == [40, 41]
    assert all(r.token_ids == (FILLER_TOKEN_ID,) * r.num_tokens for r in got)
    assert [len(c.pieces) for c in ex.chains["g"]] == [3, 3]
    assert srv.prefix_cache.hit_tokens >= 2 * 2 * 96  # pieces 2 and 3 of both: prompt cached


async def test_sglang_move_keeps_the_aborted_pieces_partial_output(
    make_server: ServerFactory,
) -> None:
    """A move on SGLang aborts the running piece by id (/abort_request): its partial output is
    kept as a piece and the response continues on the destination, token-exact."""
    async with make_server(time_scale=SOURCE_SCALE) as a, make_server(time_scale=0.05) as b:
        ex = chained_executor([a, b], Backend.SGLANG, 5000, MOVED)
        res = await run_moving_after(ex, a, 20)
    (r,) = res.groups["g"].responses
    assert r.num_tokens == MOVED and r.finish_reason == "length"
    first, second = ex.chains["g"][0].pieces
    assert first.replica == 0 and first.finish_reason == "moved" and len(first.token_ids) >= 20
    assert second.replica == 1 and len(first.token_ids) + len(second.token_ids) == MOVED
    assert a.num_abort_requests == 1


async def test_vllm_streamed_in_chunks_move_keeps_the_streamed_tokens(
    make_server: ServerFactory,
) -> None:
    """Streaming with vLLM's ``stream_interval``: a move aborts the running request at once and
    keeps every token streamed so far (whole chunks); the tokens generated but not yet sent
    are generated again on the destination."""
    async with make_server(time_scale=SOURCE_SCALE) as a, make_server(time_scale=0.05) as b:
        ex = chained_executor([a, b], Backend.VLLM, 5000, MOVED, stream_interval=16)
        res = await run_moving_after(ex, a, 40)
    (r,) = res.groups["g"].responses
    assert r.num_tokens == MOVED and r.token_ids == (FILLER_TOKEN_ID,) * MOVED
    first, second = ex.chains["g"][0].pieces
    assert first.replica == 0 and second.replica == 1
    kept = len(first.token_ids)
    assert kept >= 17 and (kept - 1) % 16 == 0  # the first token, then whole chunks of 16
    assert kept + len(second.token_ids) == MOVED


async def test_sglang_piece_of_a_cancelled_response_is_aborted_by_id(
    make_server: ServerFactory,
) -> None:
    """Cancelling a chained response (a cutoff, the step's end) closes its running piece's
    connection and aborts it on SGLang by id, so nothing keeps running on the replica."""
    async with make_server(time_scale=0.05) as a:
        ex = chained_executor([a], Backend.SGLANG, 5000, 4000)
        run = asyncio.create_task(ex.run(one_group_plan(1, 2), GROUP))
        await until_running(a, 20)
        run.cancel()
        with pytest.raises(asyncio.CancelledError):
            await run
        for _ in range(200):  # the aborts are sent in the background
            a.driver.sync()
            if a.num_abort_requests == 2 and a.driver.num_running == 0:
                break
            await asyncio.sleep(0.01)
        await ex.aclose()
    assert a.num_abort_requests == 2  # one per running piece
    assert a.driver.num_running == 0
