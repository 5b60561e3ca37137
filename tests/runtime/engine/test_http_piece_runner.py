"""``HttpPieceRunner`` against emulated replicas: multi-turn sessions through the gateway on
vLLM's completions API and SGLang's ``/generate``, the servers' own prefix-cache counts, a
replica that dies mid-turn, request errors retried then raised, and the sampling dicts."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from contextlib import AsyncExitStack
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from tailsieve.core.balancer import BalanceSettings
from tailsieve.errors import ConfigError
from tailsieve.runtime.emulator import EmulatorConfig, EmulatorServer
from tailsieve.runtime.emulator.sglang import EOS_TOKEN_ID as SGLANG_EOS
from tailsieve.runtime.engine.backends import Backend, SamplingParams
from tailsieve.runtime.engine.transport import RequestError
from tailsieve.runtime.sessions import (
    GatewayConfig,
    HttpPieceRunner,
    PieceRequest,
    SessionGateway,
    sampling_dict,
    sampling_from_dict,
)

PROFILE = "qwen3-4b-h100"


async def servers(stack: AsyncExitStack, n: int, **kw: Any) -> list[EmulatorServer]:
    out = []
    for i in range(n):
        cfg = EmulatorConfig.from_profile(PROFILE, **{"time_scale": 0.002, "seed": i,
                                                      "prompt_tokens_details": True, **kw})
        out.append(await stack.enter_async_context(EmulatorServer(cfg)))
    return out


async def prefix_hits(url: str) -> float:
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        text = await r.text()
    for fam in text_string_to_metric_families(text):
        for sample in fam.samples:
            if sample.name == "vllm:prefix_cache_hits_total":
                return sample.value
    raise AssertionError("no vllm:prefix_cache_hits_total")


@pytest.fixture
async def stack() -> AsyncIterator[AsyncExitStack]:
    async with AsyncExitStack() as st:
        yield st


@pytest.mark.parametrize("backend", [Backend.VLLM, Backend.SGLANG])
async def test_a_multi_turn_session_over_http(stack: AsyncExitStack, backend: Backend) -> None:
    srv = await servers(stack, 2)
    runner = HttpPieceRunner([s.url for s in srv], backend)
    stack.push_async_callback(runner.aclose)
    gw = await stack.enter_async_context(
        SessionGateway(2, runner, GatewayConfig(piece_tokens=32, profile=PROFILE)))
    ctx = list(range(1000, 1100))
    sent = 0
    for turn in range(3):
        out = await gw.generate("traj", "g", ctx, {"max_tokens": 200, "logprobs": 0})
        assert out.token_ids and len(out.token_ids) == out.pieces[-1].end
        assert out.logprobs is not None and len(out.logprobs) == len(out.token_ids)
        assert out.text == " tok" * len(out.token_ids)
        assert out.finish_reason in ("stop", "length")
        for p in out.chain:  # what the server said beyond the tokens, read once by the runner
            if backend is Backend.VLLM:  # each token's text and alternatives
                assert p.token_texts is not None and "".join(p.token_texts) == p.text
                assert p.top_logprobs is not None and len(p.top_logprobs) == len(p.token_ids)
            else:  # SGLang's answer has neither
                assert p.token_texts is None and p.top_logprobs is None
        stopped = backend is Backend.SGLANG and out.finish_reason == "stop"
        assert out.chain[-1].stop_reason == (SGLANG_EOS if stopped else None)  # "matched"
        if turn:
            assert out.replica == home and not out.moved  # noqa: F821 - set on turn 0
            assert out.num_cached_tokens is not None and out.num_cached_tokens >= 96
        home = out.replica
        sent += len(out.pieces)
        ctx = [*ctx, *out.token_ids, *range(5000 + 10 * turn, 5010 + 10 * turn)]
    st = gw.stats()
    assert st.num_turns == 3 and st.num_pieces == sent
    assert await prefix_hits(srv[home].url) == pytest.approx(st.prefix_hit_tokens)


async def test_a_dead_replica_s_turn_continues_on_the_other(stack: AsyncExitStack) -> None:
    srv = await servers(stack, 2)
    runner = HttpPieceRunner([s.url for s in srv], request_timeout_s=30.0)
    stack.push_async_callback(runner.aclose)
    cfg = GatewayConfig(piece_tokens=16, profile=PROFILE, probe_interval_s=0.05)
    gw = await stack.enter_async_context(SessionGateway(2, runner, cfg))
    body = {"max_tokens": 400, "ignore_eos": True}
    task = asyncio.create_task(gw.generate("traj", None, list(range(1000, 1064)), body))
    while gw.stats().num_pieces < 3:
        await asyncio.sleep(0.002)
    await srv[gw._turns["traj"].replica].crash()
    out = await task
    assert len(out.token_ids) == 400 and out.finish_reason == "length"
    assert out.num_relocations == 1 and {p.replica for p in out.pieces} == {0, 1}
    assert all(p.token_texts is None for p in out.chain)  # no logprobs asked: no texts
    assert gw.stats().num_relocations == 1 and sum(gw.healthy()) == 1


async def test_request_errors_are_retried_then_raised(stack: AsyncExitStack) -> None:
    (srv,) = await servers(stack, 1, error_rate=1.0)
    runner = HttpPieceRunner([srv.url], max_retries=2, backoff_s=0.0)
    stack.push_async_callback(runner.aclose)
    piece = PieceRequest((1, 2, 3), SamplingParams(max_tokens=4), 4, "p-0")
    with pytest.raises(RequestError, match="after 2 retries"):
        await runner.run_piece(0, piece)
    gw = await stack.enter_async_context(SessionGateway(1, runner, GatewayConfig()))
    with pytest.raises(RequestError):
        await gw.generate("s", None, [1, 2, 3], {"max_tokens": 4})
    assert gw.stats().num_failed_turns == 1 and gw.stats().num_running == 0
    assert gw.healthy() == (True,)  # an answering replica stays in service


def test_sampling_dicts_round_trip() -> None:
    sp = sampling_from_dict({"temperature": 0.7, "top_p": 0.9, "max_new_tokens": 64,
                             "stop": "\n\n", "min_tokens": 3, "n": None})
    assert sp.max_tokens == 64 and sp.stop == ("\n\n",) and sp.extra == {"min_tokens": 3}
    assert sampling_dict(sp) == {"max_tokens": 64, "temperature": 0.7, "top_p": 0.9,
                                 "stop": ["\n\n"], "min_tokens": 3}
    piece = PieceRequest((1,), sp, 16, "r")
    assert piece.sampling_dict()["max_tokens"] == 16


async def test_over_http_streams_pieces_as_they_end(stack: AsyncExitStack) -> None:
    srv = await servers(stack, 2)
    cfg = GatewayConfig(piece_tokens=10, profile=PROFILE)
    gw = await stack.enter_async_context(SessionGateway.over_http([s.url for s in srv], cfg))
    seen: list[tuple[int, int]] = []
    out = await gw.generate("s", None, list(range(1000, 1040)),
                            {"max_tokens": 35, "ignore_eos": True},
                            on_piece=lambda span, piece: seen.append((span.end,
                                                                      len(piece.token_ids))))
    assert seen == [(10, 10), (20, 10), (30, 10), (35, 5)] and len(out.token_ids) == 35
    assert isinstance(gw.runner, HttpPieceRunner)


@pytest.mark.parametrize(("backend", "stream"), [(Backend.VLLM, True), (Backend.SGLANG, False)])
async def test_a_running_piece_is_interrupted_with_what_it_generated(
        stack: AsyncExitStack, backend: Backend, stream: bool) -> None:
    """SGLang's /abort_request, or a closed vLLM stream, ends a piece at once: it returns the
    tokens so far ("abort"), and the server frees the request."""
    srv = await servers(stack, 1, time_scale=0.2)
    runner = HttpPieceRunner([srv[0].url], backend, stream=stream)
    stack.push_async_callback(runner.aclose)
    assert runner.interrupts
    sp = SamplingParams(max_tokens=4000, extra={"ignore_eos": True})
    task = asyncio.create_task(runner.run_piece(0, PieceRequest(tuple(range(1000, 1100)), sp,
                                                                4000, "p-0")))
    while (srv[0].driver.sync(), srv[0].driver.running_tokens())[1] < 50:
        await asyncio.sleep(0.01)
    if stream:
        assert (runner.generated_tokens("p-0") or 0) > 0
    runner.interrupt(0, "p-0")
    out = await asyncio.wait_for(task, 10)
    assert out.finish_reason == "abort" and 0 < len(out.token_ids) < 4000
    while srv[0].driver.num_running:
        await asyncio.sleep(0.01)
    if backend is Backend.SGLANG:
        assert srv[0].num_abort_requests >= 1


async def test_unstreamed_vllm_pieces_are_not_interrupted(stack: AsyncExitStack) -> None:
    srv = await servers(stack, 1)
    runner = HttpPieceRunner([srv[0].url])
    stack.push_async_callback(runner.aclose)
    assert not runner.interrupts
    task = asyncio.create_task(runner.run_piece(0, PieceRequest(
        (5, 6, 7), SamplingParams(max_tokens=64, extra={"ignore_eos": True}), 64, "p")))
    await asyncio.sleep(0)
    runner.interrupt(0, "p")  # ignored
    out = await task
    assert out.finish_reason == "length" and len(out.token_ids) == 64


async def test_a_streamed_piece_is_the_whole_piece(stack: AsyncExitStack) -> None:
    srv = await servers(stack, 1)
    runner = HttpPieceRunner([srv[0].url], stream=True, stream_interval=4)
    stack.push_async_callback(runner.aclose)
    piece = PieceRequest(tuple(range(1000, 1040)),
                         SamplingParams(max_tokens=30, logprobs=0, extra={"ignore_eos": True}),
                         30, "p")
    first = await runner.run_piece(0, piece)
    again = await runner.run_piece(0, PieceRequest(piece.prompt_ids, piece.sampling, 30, "q"))
    assert first.finish_reason == "length" and len(first.token_ids) == 30
    assert first.logprobs is not None and len(first.logprobs) == 30
    assert first.text_offsets is not None and len(first.text_offsets) == 30
    assert again.num_cached_tokens is not None and again.num_cached_tokens >= 32
    with pytest.raises(ConfigError, match="stream"):
        HttpPieceRunner([srv[0].url], Backend.SGLANG, stream=True)


@pytest.mark.parametrize(("backend", "stream"), [(Backend.VLLM, True), (Backend.SGLANG, False)])
async def test_a_mid_turn_move_over_http_takes_effect_at_once(
        stack: AsyncExitStack, backend: Backend, stream: bool) -> None:
    srv = await servers(stack, 2, time_scale=0.2)
    cfg = GatewayConfig(profile=PROFILE, stream=stream,
                        balance=BalanceSettings(interval_s=3600.0, horizon_s=30.0))
    gw = await stack.enter_async_context(
        SessionGateway.over_http([s.url for s in srv], cfg, backend))
    ids = list(range(1000, 1040))
    task = asyncio.create_task(gw.generate("s", None, ids, {"max_tokens": 3000,
                                                            "ignore_eos": True}))
    while not gw._turns or gw._turns["s"].piece_on is None:
        await asyncio.sleep(0.005)
    await asyncio.sleep(0.2)
    src = gw._turns["s"].replica
    assert gw.moves.move("s", 1 - src)
    out = await asyncio.wait_for(task, 20)
    assert len(out.token_ids) == 3000 and out.finish_reason == "length"
    assert [p.replica for p in out.pieces] == [src, 1 - src]
    assert 0 < out.pieces[0].end < 3000


async def test_a_pieces_priority_reaches_vllm(stack: AsyncExitStack) -> None:
    # an emulator under --scheduling-policy priority takes it; one under FCFS answers 400 as
    # vLLM does, which shows the field is sent
    (prio,) = await servers(stack, 1, scheduling_policy="priority")
    (fcfs,) = await servers(stack, 1)
    runner = HttpPieceRunner([prio.url, fcfs.url], max_retries=0)
    stack.push_async_callback(runner.aclose)
    piece = PieceRequest((1, 2, 3), SamplingParams(max_tokens=4), 4, "p-0", priority=-7)
    out = await runner.run_piece(0, piece)
    assert len(out.token_ids) >= 1
    with pytest.raises(RequestError):
        await runner.run_piece(1, piece)
    plain = PieceRequest((1, 2, 3), SamplingParams(max_tokens=4), 4, "p-1")
    assert len((await runner.run_piece(1, plain)).token_ids) >= 1


class _Wire:
    """A replica behind ``Transport``: records every body; ``/generate`` and streams hold
    until cancelled; completions answer at once (echoing the prompt's ids)."""

    def __init__(self) -> None:
        self.bodies: list[tuple[str, Any]] = []
        self.streaming = asyncio.Event()

    async def post_json(self, url: str, payload: Any, timeout_s: float | None) -> Any:
        self.bodies.append((url, payload))
        if url.endswith("/generate"):
            await asyncio.Event().wait()
        if url.endswith("/abort_request"):
            return {}
        n = int(payload["max_tokens"])
        return {"choices": [{"index": 0, "text": "x" * n, "finish_reason": "length",
                             "token_ids": list(range(n)), "prompt_token_ids": [5, 6]}]}

    async def stream_json(self, url: str, payload: Any, timeout_s: float | None,
                          ) -> AsyncIterator[Any]:
        self.bodies.append((url, payload))
        for t in (7, 8, 9):  # mid-character: no text yet
            yield {"choices": [{"index": 0, "text": "", "token_ids": [t]}]}
        self.streaming.set()
        await asyncio.Event().wait()

    async def get(self, url: str, timeout_s: float | None) -> tuple[int, str]:
        return 200, ""

    async def aclose(self) -> None:
        return None


async def test_a_text_first_piece_and_a_forced_one() -> None:
    """A first piece whose prompt is text is sent as text and comes back with the ids the
    server tokenized it to; a forced piece (replay) asks for exactly its cap."""
    wire = _Wire()
    runner = HttpPieceRunner(["http://r0"], Backend.VLLM, "m", transport=wire)
    sp = SamplingParams(max_tokens=100)
    out = await runner.run_piece(0, PieceRequest((), sp, 4, "a-0", prompt_text="hi",
                                                 forced=True))
    body = wire.bodies[-1][1]
    assert body["prompt"] == "hi" and body["max_tokens"] == 4
    assert body["ignore_eos"] is True and body["min_tokens"] == 4
    assert out.prompt_ids == (5, 6) and out.token_ids == (0, 1, 2, 3)
    with pytest.raises(ConfigError, match="empty prompt"):
        PieceRequest((), sp, 4, "a-1")


async def test_cut_ends_a_streamed_piece_where_it_stands() -> None:
    """``cut`` (a stall, a single-turn move) ends a streamed piece at once with every token
    it streamed, even inside a character, where ``interrupt`` waits for whole text."""
    wire = _Wire()
    runner = HttpPieceRunner(["http://r0"], Backend.VLLM, "m", transport=wire, stream=True)
    task = asyncio.ensure_future(runner.run_piece(0, PieceRequest(
        (1, 2), SamplingParams(max_tokens=100), 50, "s-0")))
    await wire.streaming.wait()
    assert runner.generated_tokens("s-0") == 3
    runner.interrupt(0, "s-0")  # not at a text boundary: still running
    await asyncio.sleep(0.01)
    assert not task.done()
    runner.cut("s-0")
    out = await task
    assert out.token_ids == (7, 8, 9) and out.finish_reason == "abort"


async def test_a_cancelled_sglang_piece_is_aborted_by_id() -> None:
    wire = _Wire()
    runner = HttpPieceRunner(["http://r0"], Backend.SGLANG, transport=wire)
    task = asyncio.ensure_future(runner.run_piece(0, PieceRequest(
        (1, 2), SamplingParams(max_tokens=100), 50, "g-0")))
    while not wire.bodies:
        await asyncio.sleep(0)
    task.cancel()
    await asyncio.wait({task})
    for _ in range(20):
        await asyncio.sleep(0)
    assert ("http://r0/abort_request", {"rid": "g-0"}) in wire.bodies
    await runner.aclose()
