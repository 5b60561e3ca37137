"""Streaming that stays streaming: a streamed request through the proxy is relayed chunk by
chunk as the servers stream it, and a turn moved (or relocated) mid-stream continues from the
last token sent: no gap, no repeat, one finish. Over emulated vLLM and SGLang servers, and over
stub replicas that stream a deterministic model (token-exact against one uninterrupted
request)."""

from __future__ import annotations

import asyncio
import itertools
import json
from collections.abc import AsyncIterator, Hashable
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
import pytest
from openai import AsyncOpenAI
from proxy_stub import STUB_MODEL, expected, long_prompt, stub_logprob, stub_proxy, stub_text
from proxy_wire import Wire, check_chain

from tailsieve.runtime.emulator import EmulatorConfig, EmulatorServer
from tailsieve.runtime.engine.backends import Backend
from tailsieve.runtime.engine.pieces import PieceOutput, PieceRequest, TokenDelta
from tailsieve.runtime.proxy import ProxyConfig, RoutingProxy
from tailsieve.runtime.sessions import GatewayConfig
from tailsieve.runtime.stub import StubPieceRunner

PROFILE = "qwen3-4b-h100"
MODEL = "tailsieve-emulated"
FILLER, FILLER_ID = " tok", 42  # the emulator's every token


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as st:
        yield st


async def emulated(stack: AsyncExitStack, n: int, backend: Backend = Backend.VLLM,
                   time_scale: float = 1.0, **gw: Any) -> tuple[RoutingProxy, Wire]:
    """A started proxy over ``n`` emulated servers slow enough to move a turn mid-stream."""
    servers = []
    for i in range(n):
        cfg = EmulatorConfig.from_profile(PROFILE, time_scale=time_scale, seed=i)
        servers.append(await stack.enter_async_context(EmulatorServer(cfg)))
    wire = Wire()
    config = ProxyConfig(endpoints=tuple(s.url for s in servers), backend=backend,
                         gateway=GatewayConfig(profile=PROFILE, probe_interval_s=0.05, **gw))
    proxy = await stack.enter_async_context(RoutingProxy(config, transport=wire))
    await proxy.start()
    return proxy, wire


def running(proxy: RoutingProxy) -> Hashable:
    """The session of the one running turn."""
    assert proxy.gateway is not None
    (sid,) = proxy.gateway._turns
    return sid


def move_now(proxy: RoutingProxy) -> int:
    """Move the running turn to the other replica; returns its destination."""
    gw = proxy.gateway
    assert gw is not None
    rt = gw._turns[running(proxy)]
    dst = 1 - rt.replica
    assert gw.moves.move(rt.session_id, dst)
    return dst


async def sse(resp: aiohttp.ClientResponse) -> AsyncIterator[dict[str, Any]]:
    async for line in resp.content:
        if line.startswith(b"data: ") and line.strip() != b"data: [DONE]":
            yield json.loads(line[6:])


async def test_chunks_arrive_while_the_turn_runs(stack: AsyncExitStack) -> None:
    """As many content chunks as tokens (vLLM's default stream_interval), the first of them
    while the turn still runs at the gateway, in one piece that streamed."""
    proxy, wire = await emulated(stack, 2)
    gw = proxy.gateway
    assert gw is not None
    body = {"model": MODEL, "prompt": list(range(100, 140)), "max_tokens": 200,
            "ignore_eos": True, "stream": True, "return_token_ids": True}
    ids: list[int] = []
    running_at_first: int | None = None
    finishes = []
    async with aiohttp.ClientSession() as s, s.post(proxy.url + "/v1/completions",
                                                    json=body) as r:
        assert r.status == 200
        async for ev in sse(r):
            ch = ev["choices"][0]
            if ch["token_ids"] and running_at_first is None:
                running_at_first = gw.stats().num_running
            ids += ch["token_ids"] or []
            finishes += [ch["finish_reason"]] if ch["finish_reason"] else []
    assert running_at_first == 1  # relayed before the turn ended
    assert ids == [FILLER_ID] * 200 and finishes == ["length"]
    assert len(wire.streams) == 1 and not wire.seen  # one streamed piece, not 512-token ones


@pytest.mark.parametrize("chat", [False, True])
async def test_a_move_mid_stream_continues_from_the_last_token(stack: AsyncExitStack,
                                                               chat: bool) -> None:
    proxy, wire = await emulated(stack, 2)
    prompt = list(range(300, 364))
    n = 300
    body: dict[str, Any] = {"model": MODEL, "max_tokens": n, "ignore_eos": True,
                            "stream": True, "return_token_ids": True}
    if chat:
        body["messages"] = [{"role": "user", "content": "tell me a long story"}]
    else:
        body["prompt"] = prompt
    ids: list[int] = []
    text, finishes, moved = "", [], False
    path = "/v1/chat/completions" if chat else "/v1/completions"
    async with aiohttp.ClientSession() as s, s.post(proxy.url + path, json=body) as r:
        assert r.status == 200
        async for ev in sse(r):
            if not ev["choices"]:
                continue
            ch = ev["choices"][0]
            ids += ch.get("token_ids") or []
            text += (ch["delta"].get("content") or "") if chat else ch["text"]
            finishes += [ch["finish_reason"]] if ch["finish_reason"] else []
            if len(ids) >= 40 and not moved:
                move_now(proxy)
                moved = True
    assert ids == [FILLER_ID] * n and text == FILLER * n and finishes == ["length"]
    pieces = wire.streamed_pieces()
    assert len(pieces) == 2 and 40 <= len(pieces[0][1]) < n  # cut where it was moved
    if not chat:
        assert check_chain(pieces, prompt, ids, text, None) == 2
    st = proxy.gateway.stats()  # type: ignore[union-attr]
    assert st.moves_mid_turn == 1


async def test_sglang_stream_moved_mid_stream(stack: AsyncExitStack) -> None:
    proxy, wire = await emulated(stack, 2, Backend.SGLANG)
    prompt = list(range(7, 60))
    n = 250
    body = {"input_ids": prompt, "stream": True, "return_logprob": True,
            "sampling_params": {"max_new_tokens": n, "ignore_eos": True}}
    events = []
    async with aiohttp.ClientSession() as s, s.post(proxy.url + "/generate", json=body) as r:
        assert r.status == 200
        async for ev in sse(r):
            events.append(ev)
            if len(events) == 30:
                move_now(proxy)
    outs = [e["output_ids"] for e in events]
    assert all(a == b[:len(a)] for a, b in itertools.pairwise(outs))  # cumulative
    assert outs[-1] == [FILLER_ID] * n and events[-1]["text"] == FILLER * n
    assert [e["meta_info"]["finish_reason"] is not None for e in events].count(True) == 1
    assert len(events) > 30  # relayed as it came
    lps = events[-1]["meta_info"]["output_token_logprobs"]
    assert [e[1] for e in lps] == outs[-1]
    pieces = wire.streamed_pieces(Backend.SGLANG)
    assert check_chain(pieces, prompt, outs[-1], events[-1]["text"], None) == 2


async def test_a_server_crash_mid_stream_keeps_what_was_sent(stack: AsyncExitStack) -> None:
    """The replica dies mid-stream: the tokens it streamed are kept (they were sent), the
    turn continues elsewhere from the last one."""
    servers = []
    for i in range(2):
        cfg = EmulatorConfig.from_profile(PROFILE, time_scale=1.0, seed=i)
        servers.append(await stack.enter_async_context(EmulatorServer(cfg)))
    wire = Wire()
    config = ProxyConfig(endpoints=tuple(s.url for s in servers),
                         gateway=GatewayConfig(profile=PROFILE, probe_interval_s=0.05))
    proxy = await stack.enter_async_context(RoutingProxy(config, transport=wire))
    await proxy.start()
    gw = proxy.gateway
    assert gw is not None
    prompt = list(range(500, 560))
    body = {"model": MODEL, "prompt": prompt, "max_tokens": 300, "ignore_eos": True,
            "stream": True, "return_token_ids": True}
    ids: list[int] = []
    finishes = []
    async with aiohttp.ClientSession() as s, s.post(proxy.url + "/v1/completions",
                                                    json=body) as r:
        async for ev in sse(r):
            ch = ev["choices"][0]
            ids += ch["token_ids"] or []
            finishes += [ch["finish_reason"]] if ch["finish_reason"] else []
            if len(ids) >= 50 and not servers[0].crashed and not servers[1].crashed:
                await servers[gw._turns[running(proxy)].replica].crash()
    assert ids == [FILLER_ID] * 300 and finishes == ["length"]
    pieces = wire.streamed_pieces()
    assert check_chain(pieces, prompt, ids, None, None) == 2
    assert gw.stats().num_relocations == 1


async def test_the_openai_client_streams_unchanged(stack: AsyncExitStack) -> None:
    proxy, _ = await emulated(stack, 2)
    c = AsyncOpenAI(base_url=proxy.url + "/v1", api_key="none", max_retries=0)
    text, chunks, usage = "", 0, None
    async for ch in await c.completions.create(
            model=MODEL, prompt="once upon a time", max_tokens=64, stream=True,
            stream_options={"include_usage": True}, extra_body={"ignore_eos": True}):
        if ch.choices:
            text += ch.choices[0].text
            chunks += bool(ch.choices[0].text)
        usage = ch.usage or usage
    assert text == FILLER * 64 and chunks == 64
    assert usage is not None and usage.completion_tokens == 64
    content, roles = "", []
    async for cc in await c.chat.completions.create(
            model=MODEL, messages=[{"role": "user", "content": "hi"}], max_tokens=32,
            stream=True, extra_body={"ignore_eos": True}):
        if cc.choices:
            content += cc.choices[0].delta.content or ""
            roles += [cc.choices[0].delta.role] if cc.choices[0].delta.role else []
    assert content == FILLER * 32 and roles == ["assistant"]


class StreamingStub(StubPieceRunner):
    """Stub replicas that stream a piece with a sink token by token (every ``token_s``) and
    end it at once when interrupted, keeping what it streamed."""

    streams_sinks = True

    def __init__(self, num_replicas: int, token_s: float) -> None:
        super().__init__(num_replicas)
        self.token_s = token_s
        self.stops: dict[str, asyncio.Event] = {}
        self.streamed: list[tuple[int, tuple[int, ...], tuple[int, ...]]] = []

    def interrupt(self, replica: int, request_id: str) -> None:
        if request_id in self.stops:
            self.stops[request_id].set()

    async def run_piece(self, replica: int, piece: PieceRequest) -> PieceOutput:
        if piece.sink is None:
            return await super().run_piece(replica, piece)
        ids, reason = self.stub.model.generate(piece.prompt_ids, piece.max_tokens)
        stop = self.stops[piece.request_id] = asyncio.Event()
        got: list[int] = []
        for t in ids:
            await asyncio.sleep(self.token_s)
            if stop.is_set():
                reason = "abort"
                break
            got.append(t)
            piece.sink(TokenDelta((t,), f"<{t}>", (stub_logprob(t),), (0,)))
        self.streamed.append((replica, piece.prompt_ids, tuple(got)))
        text = "".join(f"<{t}>" for t in got)
        offs = tuple(text.index(f"<{t}>", sum(len(f"<{u}>") for u in got[:k]))
                     for k, t in enumerate(got))
        return PieceOutput(tuple(got), reason, text, tuple(stub_logprob(t) for t in got),
                           offs)


async def test_moves_mid_stream_are_token_exact() -> None:
    """Three moves while a real-looking model streams: the client's chunks join into exactly
    the tokens one uninterrupted request generates, each piece's prompt the prompt plus every
    token sent before it, with one finish."""
    runner = StreamingStub(2, token_s=0.003)
    proxy = await stub_proxy(runner=runner)
    try:
        prompt_text = "A streamed story, moved three times."
        prompt = long_prompt(prompt_text, 380)
        want, reason = expected(prompt, 400)
        c = AsyncOpenAI(base_url=proxy.url + "/v1", api_key="none", max_retries=0)
        text, lps, finishes, n = "", [], [], 0
        async for ch in await c.completions.create(
                model=STUB_MODEL, prompt="".join(map(chr, prompt)), max_tokens=400,
                logprobs=0, stream=True):
            choice = ch.choices[0]
            text += choice.text
            n += 1
            if choice.logprobs is not None:
                lps += choice.logprobs.token_logprobs
            finishes += [choice.finish_reason] if choice.finish_reason else []
            if n in (10, 40, 80):
                move_now(proxy)
        assert text == stub_text(want) and finishes == [reason]
        assert lps == pytest.approx([stub_logprob(t) for t in want])
        assert len(runner.streamed) == 4
        so_far: tuple[int, ...] = ()
        for k, (replica, p_ids, got) in enumerate(runner.streamed):
            assert p_ids == tuple(prompt) + so_far and replica == k % 2
            so_far += got
        assert list(so_far) == want
    finally:
        await proxy.aclose()


async def test_the_server_s_chunking_is_kept(stack: AsyncExitStack) -> None:
    """A client's ``stream_interval`` reaches the server, and the proxy relays one chunk per
    server chunk: the same content chunks as the server sends straight (the proxy's finish
    reason may come in a chunk of its own)."""
    proxy, wire = await emulated(stack, 1, time_scale=0.01)
    body = {"model": MODEL, "prompt": list(range(10, 30)), "max_tokens": 100,
            "ignore_eos": True, "stream": True, "stream_interval": 16}
    sizes: dict[str, list[int]] = {}
    async with aiohttp.ClientSession() as s:
        for name, url in (("direct", proxy.endpoints[0]), ("proxy", proxy.url)):
            async with s.post(url + "/v1/completions", json=body) as r:
                sizes[name] = [len(ev["choices"][0]["text"]) // len(FILLER)
                               async for ev in sse(r)
                               if ev["choices"] and ev["choices"][0]["text"]]
    assert wire.streams[0][1]["stream_interval"] == 16
    assert sizes["proxy"] == sizes["direct"] == [1, *[16] * 6, 3]


async def test_an_aborted_stream_ends_with_what_was_sent() -> None:
    """SGLang's per-request abort mid-stream: the stream ends with finish reason "abort" and
    every token it streamed, a prefix of the uninterrupted answer."""
    proxy = await stub_proxy(runner=StreamingStub(2, token_s=0.002))
    try:
        prompt = long_prompt("Abort me while I stream.", 290)
        want, _ = expected(prompt, 300)
        body = {"input_ids": prompt, "stream": True, "rid": "mine",
                "sampling_params": {"max_new_tokens": 300}}
        events = []
        async with aiohttp.ClientSession() as s, s.post(proxy.url + "/generate",
                                                        json=body) as r:
            async for ev in sse(r):
                events.append(ev)
                if len(events) == 20:
                    async with s.post(proxy.url + "/abort_request",
                                      json={"rid": "mine"}) as a:
                        assert (await a.json())["aborted"] == 1
        last = events[-1]
        assert last["meta_info"]["finish_reason"]["type"] == "abort"
        n = len(last["output_ids"])
        assert 20 <= n < len(want) and last["output_ids"] == want[:n]
        assert last["text"] == stub_text(want[:n])
        assert all(a["output_ids"] == b["output_ids"][:len(a["output_ids"])]
                   for a, b in itertools.pairwise(events))
    finally:
        await proxy.aclose()
