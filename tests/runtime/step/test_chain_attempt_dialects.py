"""Whole responses (``runtime.step.chain_attempt.ChainedAttempt`` without continuation: one piece
per response) go through the one engine client (``HttpPieceRunner``): a group as one request
with ``n`` (streamed or not), chat prompts, counts without token ids, and the chunk timings a streamed response keeps, against the emulator's
vLLM and SGLang wire formats."""

from __future__ import annotations

import asyncio
import gc
from typing import Any, cast

import pytest

from tailsieve.runtime.emulator import EmulatorConfig, EmulatorServer
from tailsieve.runtime.engine.backends import Backend, PromptInput, Response, SamplingParams
from tailsieve.runtime.engine.faults import ReplicaDownError
from tailsieve.runtime.engine.http_runner import HttpPieceRunner
from tailsieve.runtime.engine.pieces import PieceRequest, TokenDelta
from tailsieve.runtime.execution.chain import ResponseChain
from tailsieve.runtime.step.chain_attempt import ChainedAttempt
from tailsieve.runtime.step.executor import LiveExecutor
from tailsieve.runtime.step.executor_config import ExecutorConfig
from tailsieve.runtime.step.waste import AttemptProgress

MODEL = "tailsieve-emulated"
CHAT = ({"role": "user", "content": "What is 2 + 3?"},)


def _no_fault(samples: object, replica: int, url: str, exc: BaseException) -> int:
    raise exc


async def _group(url: str, prompt: PromptInput, n: int, **kw: object) -> list[Response]:
    cfg = ExecutorConfig(model=MODEL, sampling=SamplingParams(max_tokens=24, seed=3),
                         **kw)  # type: ignore[arg-type]
    ex = LiveExecutor([url], cfg)
    try:
        chains = [ResponseChain(24, prompt.token_ids) for _ in range(n)]
        att = ChainedAttempt(ex.piece_runner(), [0] * n, cfg, prompt, chains, None,
                             AttemptProgress(), _no_fault)
        return await att.run()
    finally:
        await ex.aclose()


@pytest.mark.parametrize("backend", [Backend.VLLM, Backend.VLLM_CHAT, Backend.SGLANG])
@pytest.mark.parametrize("stream", [False, True])
@pytest.mark.parametrize("split", [True, False])
async def test_a_group_comes_back_whole_on_every_dialect(backend: Backend, stream: bool,
                                                         split: bool) -> None:
    prompt = (PromptInput("c", messages=CHAT) if backend is Backend.VLLM_CHAT
              else PromptInput("t", text="hello there"))
    async with EmulatorServer(EmulatorConfig.from_profile("cpu", model_name=MODEL,
                                                          time_scale=0.01)) as s:
        got = await _group(s.url, prompt, 3, backend=backend, stream=stream,
                           split_groups=split)
    assert len(got) == 3
    for r in got:
        assert r.finish_reason in ("stop", "length") and 0 < r.num_tokens <= 24
        if r.token_ids is not None:
            assert len(r.token_ids) == r.num_tokens
        if stream:  # each chunk's arrival and the tokens so far, ending at the count
            assert r.chunk_times_s is not None and r.chunk_tokens is not None
            assert len(r.chunk_times_s) == len(r.chunk_tokens)
            assert list(r.chunk_times_s) == sorted(r.chunk_times_s)
            assert r.chunk_tokens[-1] == r.num_tokens
        else:
            assert r.chunk_times_s is None


@pytest.mark.parametrize("stream", [False, True])
async def test_counts_without_token_ids_come_from_the_server(stream: bool) -> None:
    async with EmulatorServer(EmulatorConfig.from_profile("cpu", model_name=MODEL,
                                                          time_scale=0.01)) as s:
        got = await _group(s.url, PromptInput("t", text="hi"), 2, stream=stream,
                           return_token_ids=False)
    assert all(r.token_ids is None and 0 < r.num_tokens <= 24 for r in got)


async def test_run_samples_gives_each_response_of_one_request() -> None:
    async with EmulatorServer(EmulatorConfig.from_profile("cpu", model_name=MODEL,
                                                          time_scale=0.01)) as s:
        runner = HttpPieceRunner([s.url], model=MODEL, stream=True)
        try:
            piece = PieceRequest((1, 2, 3), SamplingParams(max_tokens=8), 8, "r", forced=True,
                                 num_samples=4)
            outs = await runner.run_samples(0, piece)
        finally:
            await runner.aclose()
    assert [o.num_generated for o in outs] == [8] * 4
    assert all(o.finish_reason == "length" and o.chunk_tokens and o.chunk_tokens[-1] == 8
               for o in outs)


class _DyingReplica:
    """A runner whose replica dies under every request; the first failure also cancels the
    attempt (as the executor does when it regenerates the group) before it reads the others."""

    def __init__(self) -> None:
        self.endpoints = ["http://127.0.0.1:9"]
        self.attempt: asyncio.Future[Any] | None = None
        self.num_requests = 0

    async def run_piece(self, _replica: int, _piece: PieceRequest) -> Any:
        self.num_requests += 1
        if self.attempt is not None:
            self.attempt.cancel()
            self.attempt = None
        raise ReplicaDownError("the replica died")


async def test_a_group_cancelled_after_its_requests_failed_leaves_no_error_unread() -> None:
    loop = asyncio.get_running_loop()
    unread: list[str] = []
    loop.set_exception_handler(lambda _loop, ctx: unread.append(str(ctx.get("message"))))
    try:
        runner = _DyingReplica()
        chains = [ResponseChain(24, None) for _ in range(4)]
        att = ChainedAttempt(cast(HttpPieceRunner, runner), [0] * 4, ExecutorConfig(model=MODEL),
                             PromptInput("p", text="hi"), chains, None, AttemptProgress(),
                             _no_fault)
        runner.attempt = asyncio.ensure_future(att.run())
        await asyncio.wait({runner.attempt})
        assert runner.num_requests == 4  # every request failed before the attempt resumed
        del att
        gc.collect()
        assert unread == []  # each request's error was read, none is "never retrieved"
    finally:
        loop.set_exception_handler(None)


@pytest.mark.parametrize("split", [True, False])
async def test_a_stream_without_token_ids_still_shows_each_responses_progress(split: bool,
                                                                             ) -> None:
    """Streamed without token ids (``return_token_ids=False``): each chunk counts one token at
    least, so a running response's progress (and the waste of a cut) is not read as 0."""
    async with EmulatorServer(EmulatorConfig.from_profile("cpu", model_name=MODEL,
                                                          time_scale=1.0)) as s:
        cfg = ExecutorConfig(model=MODEL, sampling=SamplingParams(max_tokens=3000, seed=3),
                             stream=True, return_token_ids=False, split_groups=split)
        ex = LiveExecutor([s.url], cfg)
        progress = AttemptProgress()
        att = ChainedAttempt(ex.piece_runner(), [0, 0], cfg, PromptInput("t", text="hi"),
                             [ResponseChain(3000, None) for _ in range(2)], None, progress,
                             _no_fault)
        run = asyncio.ensure_future(att.run())
        try:
            for _ in range(200):
                await asyncio.sleep(0.02)
                if len(progress.live_tokens) == 2 and min(progress.live_tokens.values()) > 5:
                    break
            assert sorted(progress.live_tokens) == [0, 1]
            assert min(progress.live_tokens.values()) > 5, progress.live_tokens
        finally:
            run.cancel()
            await asyncio.gather(run, return_exceptions=True)
            await ex.aclose()


@pytest.mark.parametrize("ids", [True, False])
async def test_a_streams_last_chunk_without_a_token_counts_none(ids: bool) -> None:
    """Asked with token ids, a chunk without any (the finish reason's, with or without text)
    adds no token, so the running index and a read of the running responses agree up to the
    piece's end; asked without, each chunk counts one."""
    progress = AttemptProgress()
    cfg = ExecutorConfig(model=MODEL, stream=True, return_token_ids=ids)
    att = ChainedAttempt(cast(HttpPieceRunner, _DyingReplica()), [0], cfg,
                         PromptInput("p", text="hi"), [ResponseChain(24, None)], None,
                         progress, _no_fault)
    took = att._sink(0)
    took(0, TokenDelta((7, 8) if ids else (), "ab"))
    took(2 if ids else 0, TokenDelta((), "ab"))
    assert progress.live_tokens == {0: 2}
