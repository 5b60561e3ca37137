"""TailSieve's router on two real vLLM CPU servers serving the real model (SmolLM2-135M-Instruct,
greedy), through verl's ``LLMServerClient``: the model's stop ids are found from the model
directory vLLM serves (the YAML names none), turns are cut into pieces, and every turn is
exactly its chain of pieces. Compared with one unbroken request, a turn agrees token for token
up to a near-tie: vLLM's greedy decoding is not batch-invariant (see
``tests/runtime/test_vllm_batch_variance.py``). Needs the real servers (scripts/test.sh starts
them):

    TAILSIEVE_REAL_ENDPOINTS=http://127.0.0.1:8111,http://127.0.0.1:8112 \\
    .venv-verl/bin/python -m pytest tests/integrations/verl/test_verl_router_vllm.py -s
"""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

pytest.importorskip("verl", reason="verl is not installed (bash scripts/setup_verl.sh)")

from router_harness import (
    Pool,
    chains,
    match_delivered,
    ray_session,  # noqa: F401 - the fixture
    rollout_dict,
    run,
    status,
    verl_config,
    write_yaml,
)
from verl.workers.rollout.llm_server import LLMServerClient
from verl.workers.rollout.router import get_router_handle

ENDPOINTS = [u for u in os.environ.get("TAILSIEVE_REAL_ENDPOINTS", "").split(",") if u]
MODEL = os.environ.get("TAILSIEVE_REAL_MODEL", "smollm2")
MODEL_DIR = Path(os.environ.get("TAILSIEVE_REAL_MODEL_DIR",
                                Path(__file__).resolve().parents[3] / ".cache"
                                / "smollm2-135m-instruct"))
NEAR_TIE = 0.2  # |logprob| apart: two tokens greedy decoding may swap between batches (on
# vLLM CPU a batch moves logprobs by up to 0.077 nat before a swap: BENCHMARKS.md, batch variance)
QUESTIONS = ["What is 2 + 3?", "Name a colour.", "Say hello in French.", "Count to five."]

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.usefixtures("ray_session"),
    pytest.mark.skipif(len(ENDPOINTS) < 2, reason="TAILSIEVE_REAL_ENDPOINTS: two real-model "
                       "vLLM servers (scripts/start_real_servers.sh)"),
]


@pytest.fixture(scope="module")
def real_pool() -> Iterator[Pool]:
    p = Pool(ENDPOINTS[:2], MODEL, rollout_dict(max_model_len=2048, response_length=48))
    yield p
    p.close()


def prompt_ids(question: str) -> list[int]:
    from transformers import AutoTokenizer

    tok = AutoTokenizer.from_pretrained(str(MODEL_DIR))
    ids = tok.apply_chat_template([{"role": "user", "content": question}],
                                  add_generation_prompt=True, tokenize=True)
    # transformers 5 returns a BatchEncoding (a UserDict, not a dict); 4.x a list of ids
    return [int(t) for t in (ids if isinstance(ids, list) else ids["input_ids"])]


def test_greedy_turns_on_real_vllm_are_their_chains(tmp_path: Path, real_pool: Pool) -> None:
    router = get_router_handle(real_pool.servers, write_yaml(
        tmp_path / "r.yaml", piece_tokens=6, balance={"interval_s": 0.2, "seam_s": 0.0}))
    client = LLMServerClient(verl_config(None), router)
    greedy = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "logprobs": True}
    prompts = [prompt_ids(q) for q in QUESTIONS]

    async def trajectories() -> list[list[tuple[list[int], Any]]]:
        async def one(i: int, prompt: list[int]) -> list[tuple[list[int], Any]]:
            turns, ctx = [], list(prompt)
            for _ in range(2):
                out = await client.generate(f"q{i}", prompt_ids=ctx, sampling_params=greedy)
                turns.append((ctx, out))
                ctx = ctx + out.token_ids + prompt_ids("And then?")[-8:]  # an observation
            return turns
        return await asyncio.gather(*[one(i, p) for i, p in enumerate(prompts)])

    trajs = run(trajectories())
    st = status(router)
    assert st["moves_off_reason"] is None, st["moves_off_reason"]  # stop ids were found
    turns = [t for traj in trajs for t in traj]
    ch = chains(real_pool.calls())
    match_delivered(ch, [(p, o.token_ids) for p, o in turns])
    assert ch.num_pieces > len(turns), "no turn was cut into pieces"
    eos_ended = 0
    for ctx, out in turns:
        ref = run(_one_go(real_pool, ctx, greedy))
        k = _divergence(out.token_ids, ref.token_ids)
        if k is None:
            eos_ended += bool(out.token_ids) and out.token_ids[-1] == 2
            continue
        assert k < min(len(out.token_ids), len(ref.token_ids))
        assert abs(out.log_probs[k] - ref.log_probs[k]) < NEAR_TIE, (
            f"diverged at token {k} without a near-tie")
    print(f"\n{len(turns)} turns, {ch.num_pieces} pieces, {ch.num_moved} moved mid-turn, "
          f"{eos_ended} ended at EOS exactly as one go")


async def _one_go(pool: Pool, prompt: list[int], sampling: dict[str, Any]) -> Any:
    actor = next(iter(pool.actors.values()))
    return await actor.generate.remote(prompt_ids=prompt, sampling_params=dict(sampling),
                                       request_id=f"ref-{hash(tuple(prompt))}")


def _divergence(a: list[int], b: list[int]) -> int | None:
    for k, (x, y) in enumerate(zip(a, b, strict=False)):
        if x != y:
            return k
    return None if len(a) == len(b) else min(len(a), len(b))
