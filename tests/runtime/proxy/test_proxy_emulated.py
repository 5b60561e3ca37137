"""The proxy over emulated vLLM and SGLang servers (HTTP, in this process): every answer is
exactly the chain of the pieces the servers returned (checked on the wire), each piece's
prompt is the prompt plus the tokens before it, later turns of a session hit its server's
prefix cache, servers that register themselves (``POST /workers``), a server that crashes
mid-request, and ``/metrics``."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
import pytest
from openai import AsyncOpenAI
from prometheus_client.parser import text_string_to_metric_families
from proxy_wire import Wire, check_chain

from tailsieve.runtime.emulator import EmulatorConfig, EmulatorServer
from tailsieve.runtime.engine.backends import Backend
from tailsieve.runtime.proxy import ProxyConfig, RoutingProxy
from tailsieve.runtime.sessions import GatewayConfig

PROFILE = "qwen3-4b-h100"
MODEL = "tailsieve-emulated"


async def emulators(stack: AsyncExitStack, n: int, **kw: Any) -> list[EmulatorServer]:
    out = []
    for i in range(n):
        cfg = EmulatorConfig.from_profile(PROFILE, time_scale=0.002, seed=i,
                                          prompt_tokens_details=True, **kw)
        out.append(await stack.enter_async_context(EmulatorServer(cfg)))
    return out


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as st:
        yield st


async def proxy_over(stack: AsyncExitStack, servers: list[EmulatorServer], backend: Backend,
                     wire: Wire | None = None, **gw: Any) -> RoutingProxy:
    cfg = ProxyConfig(endpoints=tuple(s.url for s in servers), backend=backend,
                      gateway=GatewayConfig(piece_tokens=16, profile=PROFILE,
                                            probe_interval_s=0.05, **gw))
    proxy = await stack.enter_async_context(RoutingProxy(cfg, transport=wire))
    await proxy.start()
    return proxy


async def test_openai_client_over_vllm_servers_gets_the_chain(stack: AsyncExitStack) -> None:
    srv = await emulators(stack, 2)
    wire = Wire()
    proxy = await proxy_over(stack, srv, Backend.VLLM, wire)
    c = AsyncOpenAI(base_url=proxy.url + "/v1", api_key="none", max_retries=0)
    prompt = list(range(100, 140))
    out = await c.completions.create(model=MODEL, prompt=prompt, max_tokens=120, logprobs=1,
                                     extra_body={"return_token_ids": True})
    ch = out.choices[0]
    ids = ch.model_extra["token_ids"]
    assert ch.logprobs is not None
    check_chain(wire.pieces(Backend.VLLM), prompt, ids, ch.text,
                list(ch.logprobs.token_logprobs))
    assert len(wire.seen) == -(-len(ids) // 16)  # pieces of 16
    assert ch.logprobs.tokens == [" tok"] * len(ids)
    assert ch.logprobs.text_offset == [4 * i for i in range(len(ids))]
    assert out.usage is not None and out.usage.completion_tokens == len(ids)


async def test_streamed_pieces_reach_the_servers_streamed_and_join_to_the_chain(
        stack: AsyncExitStack) -> None:
    """``GatewayConfig(stream=True)`` behind the proxy: every piece goes to its vLLM server
    streamed (so that a move ends it at once), in chunks of ``stream_interval`` tokens, and
    the client's unstreamed answer is still the pieces' chain."""
    srv = await emulators(stack, 2)
    wire = Wire()
    proxy = await proxy_over(stack, srv, Backend.VLLM, wire, stream=True, stream_interval=4)
    c = AsyncOpenAI(base_url=proxy.url + "/v1", api_key="none", max_retries=0)
    prompt = list(range(100, 140))
    out = await c.completions.create(model=MODEL, prompt=prompt, max_tokens=120,
                                     extra_body={"return_token_ids": True})
    ids = out.choices[0].model_extra["token_ids"]
    assert not wire.seen and len(wire.streams) == -(-len(ids) // 16)  # pieces of 16, streamed
    assert all(p["stream"] and p["stream_interval"] == 4 for _, p, _ in wire.streams)
    check_chain(wire.streamed_pieces(Backend.VLLM), prompt, ids, out.choices[0].text, None)


async def test_chat_goes_as_the_server_s_template_ids(stack: AsyncExitStack) -> None:
    srv = await emulators(stack, 2)
    wire = Wire()
    proxy = await proxy_over(stack, srv, Backend.VLLM, wire)
    c = AsyncOpenAI(base_url=proxy.url + "/v1", api_key="none", max_retries=0)
    msgs = [{"role": "user", "content": "one two three"}]
    out = await c.chat.completions.create(model=MODEL, messages=msgs,  # type: ignore[arg-type]
                                          max_tokens=50)
    # the emulator's chat template: 3 words + 5 per message + 3 for the generation prompt
    assert len(wire.seen[0][1]["prompt"]) == 11
    assert out.choices[0].message.content == " tok" * out.usage.completion_tokens  # type: ignore[union-attr]


async def test_sglang_servers_and_sglang_clients(stack: AsyncExitStack) -> None:
    srv = await emulators(stack, 2)
    wire = Wire()
    proxy = await proxy_over(stack, srv, Backend.SGLANG, wire)
    prompt = list(range(7, 60))
    body = {"input_ids": prompt, "return_logprob": True,
            "sampling_params": {"max_new_tokens": 90, "temperature": 0.7}}
    async with aiohttp.ClientSession() as s:
        async with s.post(proxy.url + "/generate", json=body,
                          headers={"X-SMG-Routing-Key": "traj-1"}) as r:
            assert r.status == 200, await r.text()
            out = await r.json()
        lps = out["meta_info"]["output_token_logprobs"]
        check_chain(wire.pieces(Backend.SGLANG), prompt, out["output_ids"], out["text"],
                    [e[0] for e in lps])
        assert [e[1] for e in lps] == out["output_ids"]
        assert out["meta_info"]["finish_reason"]["type"] in ("stop", "length")
        # streamed: cumulative outputs, the last one the whole answer
        events = []
        async with s.post(proxy.url + "/generate", json={**body, "stream": True}) as r:
            async for line in r.content:
                if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
                    events.append(json.loads(line[6:]))
        assert events[-1]["meta_info"]["finish_reason"] is not None
        assert all(e["meta_info"]["finish_reason"] is None for e in events[:-1])
        ids = [e["output_ids"] for e in events]
        assert all(a == b[:len(a)] for a, b in itertools.pairwise(ids))


async def test_a_session_s_next_turn_hits_its_server_s_cache(stack: AsyncExitStack) -> None:
    srv = await emulators(stack, 2)
    proxy = await proxy_over(stack, srv, Backend.VLLM)
    c = AsyncOpenAI(base_url=proxy.url + "/v1", api_key="none", max_retries=0)
    ctx = list(range(1000, 1200))
    hdr = {"X-Session-ID": "agent-7"}
    for turn in range(3):
        out = await c.completions.create(model=MODEL, prompt=ctx, max_tokens=40,
                                         extra_headers=hdr,
                                         extra_body={"return_token_ids": True})
        if turn:
            assert out.usage is not None and out.usage.prompt_tokens_details is not None
            assert out.usage.prompt_tokens_details.cached_tokens >= 192
        ctx = ctx + out.choices[0].model_extra["token_ids"] + list(range(5000, 5020))
    st = proxy.service.gateway.stats()  # type: ignore[union-attr]
    assert st.num_turns == 3 and st.moves_at_boundary == 0


async def test_servers_that_register_themselves(stack: AsyncExitStack) -> None:
    srv = await emulators(stack, 2)
    cfg = ProxyConfig(num_workers=2, backend=Backend.SGLANG,
                      gateway=GatewayConfig(profile=PROFILE), ready_timeout_s=30)
    proxy = await stack.enter_async_context(RoutingProxy(cfg))
    await proxy.start()
    admin = await proxy.start_admin()  # registering is an admin call
    body = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 8}}
    async with aiohttp.ClientSession() as s:
        async with s.get(proxy.url + "/health") as r:
            assert r.status == 503
        pending = asyncio.create_task(s.post(proxy.url + "/generate", json=body))
        for server in srv:  # what slime's engines do at start
            async with s.post(admin + "/workers",
                              json={"url": server.url, "worker_type": "regular"}) as r:
                assert r.status == 202
        async with await pending as r:
            assert r.status == 200
            assert len((await r.json())["output_ids"]) >= 1
        async with s.post(admin + "/workers", json={"url": "http://127.0.0.1:1"}) as r:
            assert r.status == 409 and "2 servers" in (await r.json())["error"]["message"]
        async with s.delete(admin + "/workers/0") as r:
            assert r.status == 200
        assert proxy.service.gateway.healthy() == (False, True)  # type: ignore[union-attr]


async def test_a_server_crash_mid_request_is_continued(stack: AsyncExitStack) -> None:
    srv = await emulators(stack, 2, length_median_tokens=400.0, length_sigma=0.1)
    wire = Wire()
    proxy = await proxy_over(stack, srv, Backend.VLLM, wire)
    svc = proxy.service
    assert svc is not None
    body = {"model": MODEL, "prompt": [list(range(10 + k, 50 + k)) for k in range(4)],
            "max_tokens": 300, "return_token_ids": True}
    async with aiohttp.ClientSession() as s:
        task = asyncio.create_task(s.post(proxy.url + "/v1/completions", json=body))
        while len(wire.seen) < 4:
            await asyncio.sleep(0.005)
        await srv[0].crash()
        async with await task as r:
            assert r.status == 200, await r.text()
            out = await r.json()
    pieces = wire.pieces(Backend.VLLM)
    for ch in out["choices"]:
        check_chain(pieces, body["prompt"][ch["index"]], ch["token_ids"], ch["text"], None)
    st = svc.gateway.stats()
    assert st.num_relocations >= 1 and not st.replicas[0].healthy


async def test_metrics_report_moves_hits_and_load(stack: AsyncExitStack) -> None:
    srv = await emulators(stack, 2)
    proxy = await proxy_over(stack, srv, Backend.VLLM, policy="verl-sticky")
    c = AsyncOpenAI(base_url=proxy.url + "/v1", api_key="none", max_retries=0)
    await c.completions.create(model=MODEL, prompt=list(range(1, 30)), max_tokens=10)
    async with aiohttp.ClientSession() as s, s.get(proxy.url + "/metrics") as r:
        text = await r.text()
    got = {(smp.name, tuple(sorted(smp.labels.items()))): smp.value
           for fam in text_string_to_metric_families(text) for smp in fam.samples}
    st = proxy.service.gateway.stats()  # type: ignore[union-attr]
    assert got[("tailsieve_session_turns_total", ())] == st.num_turns == 1
    assert got[("tailsieve_session_moves_total", (("kind", "mid_turn"),))] == 0
    assert got[("tailsieve_prefix_query_tokens_total", ())] == st.prefix_query_tokens
    assert got[("tailsieve_proxy_requests_total", (("code", "200"), ("route", "completions")))] == 1
    assert got[("tailsieve_moves_active", ())] == 0
    reasons = [dict(k[1])["reason"] for k in got if k[0] == "tailsieve_moves_off"]
    assert len(reasons) == 1 and "verl-sticky" in reasons[0]
    assert ("tailsieve_replica_healthy", (("replica", "1"), ("url", srv[1].url))) in got
