"""The emulator serves multi-turn trajectories: a later turn's context (the prompt, earlier
turns' outputs, the tool's tokens) hits the replica's prefix cache where the trajectory ran
before, its uncached part is prefilled at the profile's prefill model and stalls the replica's
decoding, and ``/metrics`` reports the cache under vLLM's own names."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest

from tailsieve.errors import ConfigError
from tailsieve.model.replica_config import prefill_model_of
from tailsieve.model.replica_engine import ReplicaEngine
from tailsieve.runtime.emulator import EmulatorConfig, EmulatorServer

ServerFactory = Any  # conftest.make_server
PROFILE = "qwen3-4b-h100"  # a derived profile: it carries a prefill model
PROMPT = list(range(1000, 1100))  # 100 prompt tokens
OBSERVATION = list(range(5000, 5040))  # a tool's 40 tokens
BLOCK = 16


async def complete(session: aiohttp.ClientSession, url: str, prompt: list[int],
                   max_tokens: int) -> list[int]:
    body = {"prompt": prompt, "max_tokens": max_tokens, "ignore_eos": True,
            "return_token_ids": True}
    async with session.post(url + "/v1/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        out = await resp.json()
    ids: list[int] = out["choices"][0]["token_ids"]
    assert len(ids) == max_tokens
    return ids


def cached_blocks(n: int) -> int:
    """Tokens of ``n`` a block-granular cache holds (the last token is always computed)."""
    return min((n // BLOCK) * BLOCK, n - 1)


async def test_a_later_turn_hits_where_its_trajectory_ran_and_misses_elsewhere(
    make_server: ServerFactory, session: aiohttp.ClientSession, metrics: Any
) -> None:
    async with make_server(PROFILE, time_scale=0.001) as home, \
            make_server(PROFILE, time_scale=0.001) as other:
        out = await complete(session, home.url, PROMPT, 50)
        turn2 = PROMPT + out + OBSERVATION
        before = home.driver.stats.prompt_tokens
        await complete(session, home.url, turn2, 10)
        held = cached_blocks(len(PROMPT) + len(out))  # the prompt and the turn's output
        assert home.driver.stats.prompt_tokens - before == len(turn2) - held
        await complete(session, other.url, turn2, 10)  # elsewhere: all of it is prefilled
        assert other.driver.stats.prompt_tokens == len(turn2)
        m_home = await metrics(session, home.url)
        m_other = await metrics(session, other.url)
    assert m_home["vllm:prefix_cache_queries_total"] == len(PROMPT) + len(turn2)
    assert m_home["vllm:prefix_cache_hits_total"] == held
    assert m_other["vllm:prefix_cache_queries_total"] == len(turn2)
    assert m_other["vllm:prefix_cache_hits_total"] == 0


async def test_a_later_turn_is_prefilled_at_the_profile_rate(
    make_server: ServerFactory, session: aiohttp.ClientSession,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    async with make_server(PROFILE, time_scale=0.001) as srv:
        calls: list[tuple[int, int, bool]] = []
        submit = srv.driver.submit

        def spy(sid: str, k: int, prompt: int, cached_tokens: int = 0,
                continuation: bool = False, priority: int = 0) -> Any:
            calls.append((prompt, cached_tokens, continuation))
            return submit(sid, k, prompt, cached_tokens=cached_tokens, continuation=continuation,
                          priority=priority)

        monkeypatch.setattr(srv.driver, "submit", spy)
        out = await complete(session, srv.url, PROMPT, 20)
        await complete(session, srv.url, PROMPT + out + OBSERVATION, 5)
    assert calls[0] == (len(PROMPT), 0, False)  # a new prompt: the first-prefill cost
    n = len(PROMPT) + len(out) + len(OBSERVATION)
    assert calls[1] == (n, cached_blocks(len(PROMPT) + len(out)), True)


def test_an_uncached_context_stalls_the_running_requests_by_its_prefill() -> None:
    cfg = EmulatorConfig.from_profile(PROFILE).replica_config()
    pre = prefill_model_of(cfg.throughput)
    assert pre.s_per_token > 0
    context, cached = 20_000, 4_096

    def finish_of_running(with_turn: bool) -> float:
        eng = ReplicaEngine(cfg)
        eng.submit("running", 2_000, 500)
        eng.advance(1.0)
        if with_turn:
            eng.submit("turn", 1, context, cached_tokens=cached, continuation=True)
        done = {c.request_id: c.time_s for c in eng.advance(1e6)}
        return done["running"]

    delay = finish_of_running(True) - finish_of_running(False)
    stall = cfg.recompute_cost_s(context - cached, cached)
    assert stall == pytest.approx(pre.cost_s(context - cached, cached) + cfg.prefill_s)
    # the running request waits out the prefill, then decodes one token beside the turn
    assert stall <= delay <= stall + 2 * cfg.throughput.tau(2) + 1e-9


def test_prefill_profile_charges_new_prompts_too() -> None:
    plain = EmulatorConfig.from_profile(PROFILE).replica_config()
    full = EmulatorConfig.from_profile(PROFILE, prefill_profile=True).replica_config()
    assert plain.prefill_cost_s(1_000) == 0.0  # the decode-only step model
    assert full.prefill_cost_s(1_000) == pytest.approx(full.recompute_cost_s(1_000))
    assert full.prefill_cost_s(1_000) > 0
    with pytest.raises(ConfigError, match="prefill_profile or prefill_s_per_token"):
        EmulatorConfig.from_profile(PROFILE, prefill_profile=True, prefill_s_per_token=1e-4)


async def test_the_prefix_cache_holds_what_the_kv_budget_holds(
    make_server: ServerFactory, session: aiohttp.ClientSession
) -> None:
    async with make_server(PROFILE, time_scale=0.001, kv_capacity_tokens=256) as srv:
        assert srv.prefix_cache.max_blocks == 256 // BLOCK
        first = await complete(session, srv.url, PROMPT, 20)  # 7 blocks of 16 cached
        await complete(session, srv.url, list(range(7000, 7200)), 20)  # 13 more: evicts
        before = srv.prefix_cache.hit_tokens
        await complete(session, srv.url, PROMPT + first + OBSERVATION, 5)
    assert srv.prefix_cache.hit_tokens - before < cached_blocks(len(PROMPT) + len(first))


async def test_running_requests_take_their_kv_from_the_prefix_cache(
    make_server: ServerFactory, session: aiohttp.ClientSession
) -> None:
    """As vLLM (and the simulator's ``fit_cache``): a block freed by a finished request stays
    cached only until a running request needs it, so while one holds most of the budget the
    cache keeps what is left, least recently used out first."""
    async with make_server(PROFILE, time_scale=0.05, kv_capacity_tokens=1024) as srv:
        await complete(session, srv.url, PROMPT, 20)
        assert len(srv.prefix_cache) == (len(PROMPT) + 20) // BLOCK  # 7 blocks
        big = asyncio.create_task(complete(session, srv.url, list(range(7000, 7960)), 40))
        while srv.driver.engine.num_running == 0:
            await asyncio.sleep(0.001)
        held = len(srv.prefix_cache)  # 960 of 1024 tokens running: 4 blocks left
        await big
    assert held <= (1024 - 960) // BLOCK < (len(PROMPT) + 20) // BLOCK


async def test_a_text_prompt_is_not_looked_up(
    fast_server: EmulatorServer, session: aiohttp.ClientSession, metrics: Any
) -> None:
    body = {"prompt": "one two three", "max_tokens": 2}
    async with session.post(fast_server.url + "/v1/completions", json=body) as resp:
        assert resp.status == 200
    m = await metrics(session, fast_server.url)
    assert m["vllm:prefix_cache_queries_total"] == 0


async def test_cached_tokens_are_reported_per_request(
    make_server: ServerFactory, session: aiohttp.ClientSession
) -> None:
    async with make_server(PROFILE, time_scale=0.001, prompt_tokens_details=True) as srv:
        out = await complete(session, srv.url, PROMPT, 30)
        turn2 = PROMPT + out + OBSERVATION
        body = {"prompt": turn2, "max_tokens": 3, "ignore_eos": True}
        async with session.post(srv.url + "/v1/completions", json=body) as resp:
            usage = (await resp.json())["usage"]
        sg = {"input_ids": turn2, "sampling_params": {"max_new_tokens": 3, "ignore_eos": True}}
        async with session.post(srv.url + "/generate", json=sg) as resp:
            meta = (await resp.json())["meta_info"]
    held = cached_blocks(len(PROMPT) + len(out))
    assert usage["prompt_tokens_details"] == {"cached_tokens": held}
    assert meta["cached_tokens"] == cached_blocks(len(turn2))  # the turn ran here just now


def words(ids: list[int]) -> str:
    """Token ids as the text words the emulator reads back as those ids (``t<N>``)."""
    return " ".join(f"t{i}" for i in ids)


async def test_a_text_turn_of_id_words_hits_as_its_token_ids_do(
    make_server: ServerFactory, session: aiohttp.ClientSession, metrics: Any
) -> None:
    """A client that may send only text (behind smg) sends ``t<N>`` words: the prompt and the
    earlier output (``t42``) are cached as the token ids are; plain words stay uncached."""
    async with make_server(PROFILE, time_scale=0.001) as home:
        body = {"prompt": words(PROMPT), "max_tokens": 50, "ignore_eos": True}
        async with session.post(home.url + "/v1/completions", json=body) as resp:
            assert resp.status == 200, await resp.text()
        turn2 = PROMPT + [42] * 50 + OBSERVATION
        body = {"prompt": words(turn2), "max_tokens": 10, "ignore_eos": True}
        async with session.post(home.url + "/v1/completions", json=body) as resp:
            assert resp.status == 200, await resp.text()
        async with session.post(home.url + "/tokenize", json={"prompt": "a t5 b"}) as resp:
            assert (await resp.json())["tokens"] == [7, 5, 7]
        m = await metrics(session, home.url)
    assert m["vllm:prefix_cache_queries_total"] == len(PROMPT) + len(turn2)
    assert m["vllm:prefix_cache_hits_total"] == cached_blocks(len(PROMPT) + 50)
