"""The session gateway and an agentic rollout on the real model (SmolLM2-135M-Instruct on two
vLLM CPU servers): every piece's prompt, as the server echoes it, is exactly the turn's context
plus the tokens before it, a turn moved mid-way joins into one response, later turns hit the
home server's prefix cache (vLLM's own counter), and a rollout's groups come back whole.
Skips with the reason when ``TAILSIEVE_REAL_ENDPOINTS`` is unset."""

from __future__ import annotations

import asyncio
from typing import Any

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families
from real_servers import REAL_ENDPOINTS, REAL_MODEL, needs_real

from tailsieve.runtime.engine.backends import SamplingParams
from tailsieve.runtime.engine.transport import JSON, AiohttpTransport
from tailsieve.runtime.sessions import (
    AgenticConfig,
    AgenticRollout,
    GatewayConfig,
    HttpPieceRunner,
    SessionGateway,
    ToolCall,
    ToolResult,
)

pytestmark = pytest.mark.vllm
SYSTEM = "You are an agent. Tools: search(query) returns a passage. " * 8
OBS = "<|im_end|>\n<|im_start|>user\nObservation: the search returned nothing new.<|im_end|>" \
    "\n<|im_start|>assistant\n"


class Echo(AiohttpTransport):
    """Records (sent prompt, echoed prompt, generated ids) of every completion."""

    def __init__(self) -> None:
        super().__init__()
        self.seen: list[tuple[list[int], list[int], list[int]]] = []

    async def post_json(self, url: str, payload: JSON, timeout_s: float | None) -> Any:
        raw = await super().post_json(url, payload, timeout_s)
        if url.endswith("/v1/completions"):
            ch = raw["choices"][0]
            self.seen.append((list(payload["prompt"]), list(ch["prompt_token_ids"]),
                              list(ch["token_ids"])))
        return raw


async def prefix_hits(url: str) -> float:
    async with aiohttp.ClientSession() as s, s.get(url + "/metrics") as r:
        text = await r.text()
    return sum(sm.value for fam in text_string_to_metric_families(text) for sm in fam.samples
               if sm.name == "vllm:prefix_cache_hits_total")


@needs_real(2)
async def test_a_moved_multi_turn_session_on_the_real_model() -> None:
    echo = Echo()
    cfg = GatewayConfig(piece_tokens=8, profile="cpu")
    async with SessionGateway.over_http(REAL_ENDPOINTS[:2], cfg, model=REAL_MODEL,
                                        transport=echo) as gw:
        runner = gw.runner
        assert isinstance(runner, HttpPieceRunner)
        ctx = list(await runner.tokenize_chat(
            [{"role": "system", "content": SYSTEM},
             {"role": "user", "content": "Find the height of Mont Blanc."}]))
        obs = list(await runner.tokenize(OBS))
        hits0 = [await prefix_hits(u) for u in REAL_ENDPOINTS[:2]]
        outs = []
        for turn in range(3):
            task = asyncio.create_task(gw.generate("traj", None, ctx, SamplingParams(
                max_tokens=24, temperature=0.0, logprobs=0, extra={"ignore_eos": True})))
            if turn == 1:  # move it while its first piece runs
                while (rt := gw._turns.get("traj")) is None or rt.piece_on is None:
                    await asyncio.sleep(0.005)
                assert gw.moves.move("traj", 1 - rt.replica)
            out = await task
            outs.append((list(ctx), out))
            ctx = [*ctx, *out.token_ids, *obs]
        hits1 = [await prefix_hits(u) for u in REAL_ENDPOINTS[:2]]
    for sent, echoed, _ in echo.seen:
        assert sent == echoed  # the server saw exactly what was sent
    for prompt, out in outs:  # each piece: the turn's context plus the tokens before it
        assert len(out.token_ids) == out.pieces[-1].end and out.logprobs is not None
        for span in out.pieces:
            want = prompt + list(out.token_ids[:span.start])
            assert any(sent == want for sent, _, _ in echo.seen), span
    assert outs[1][1].num_mid_turn_moves == 1
    home = outs[0][1].replica
    assert hits1[home] > hits0[home]  # later turns hit the home server's prefix cache


@needs_real(2)
async def test_an_agentic_rollout_on_the_real_model() -> None:
    cfg = AgenticConfig(group_size=2, max_turns=3,
                        sampling=SamplingParams(max_tokens=16, temperature=1.0),
                        model=REAL_MODEL, gateway=GatewayConfig(piece_tokens=8, profile="cpu"))
    async with AgenticRollout(REAL_ENDPOINTS[:2], cfg) as ro:
        obs = await ro.tokenize(OBS)
        prompts = [{"prompt_id": f"p{i}", "prompt_token_ids": list(await ro.tokenize_chat(
            [{"role": "system", "content": SYSTEM},
             {"role": "user", "content": f"Question {i}: search twice, then answer."}]))}
            for i in range(2)]

        def tool(call: ToolCall) -> ToolResult:
            return ToolResult(done=call.turn >= 1 + int(call.prompt_id[1:]) % 2,
                              observation_ids=obs)

        batch = await ro.run(prompts, tool)
    assert [len(g.trajectories) for g in batch.groups] == [2, 2]
    assert [len(t.turns) for g in batch.groups for t in g.trajectories] == [2, 2, 3, 3]
    for g in batch.groups:
        for t in g.trajectories:
            t.check()
    assert batch.stats.num_failed_turns == 0
