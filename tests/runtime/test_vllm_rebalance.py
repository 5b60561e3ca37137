"""The live rebalancer on two real vLLM servers (tiny model, temperature 0): every group dealt to
the first server, the rebalancer moves responses to the idle second one while the step runs,
and every group is delivered exactly once, each response token for token what one go generates.
Needs the CI servers:

    TAILSIEVE_VLLM_ENDPOINTS=http://127.0.0.1:8101,http://127.0.0.1:8102 \\
    pytest -m vllm tests/runtime/test_vllm_rebalance.py -s
"""

from __future__ import annotations

import os

import pytest
from test_vllm_continuation import one_go, served_name

from tailsieve.core.balancer import BalanceSettings
from tailsieve.core.plan import GroupAssignment, StepPlan
from tailsieve.core.pool import Pool
from tailsieve.core.protocol import validate_outcome
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.runtime.attempt import ExecutorConfig
from tailsieve.runtime.backends import PromptInput, SamplingParams
from tailsieve.runtime.executor import LiveExecutor

pytestmark = pytest.mark.vllm

ENDPOINTS = [u for u in os.environ.get("TAILSIEVE_VLLM_ENDPOINTS", "").split(",") if u]
MAX_TOKENS, GROUPS, GROUP_SIZE = 64, 4, 2
PROMPTS = [f"Question {i}: tell me about the number {7 * i + 3}." for i in range(GROUPS)]
skip = pytest.mark.skipif(len(ENDPOINTS) < 2, reason="TAILSIEVE_VLLM_ENDPOINTS not set (2 URLs)")


def piled_plan(ids: list[str]) -> StepPlan:
    out = tuple(GroupAssignment(p, Pool.BULK, 0, True, k) for k, p in enumerate(ids))
    return StepPlan(
        step=1, num_replicas=2, group_size=GROUP_SIZE, num_required=len(ids), q=0, m=0,
        num_extra=0, tail_replicas=(), bulk_replicas=(0, 1), assignments=out,
        num_fresh_to_deliver=0, fresh_prompt_ids=(), is_warmup=False, is_flush=False,
        balance=BalanceSettings(interval_s=0.2, horizon_s=10.0, seam_s=0.01),
    )  # fmt: skip


@skip
@pytest.mark.parametrize(("stream", "interval"), [(True, None), (True, 4), (False, None)])
async def test_live_rebalancer_moves_on_real_vllm_and_delivers_exactly_once(
    stream: bool, interval: int | None
) -> None:
    """Greedy, so a response moved mid-chunk (its unsent tokens decoded again on the
    destination, ``interval``: vLLM's stream_interval) is still token-exact."""
    name = await served_name(ENDPOINTS[0])
    ids = [f"bal-{i}" for i in range(GROUPS)]
    refs = {}
    for pid, text in zip(ids, PROMPTS, strict=True):
        body = {"model": name, "prompt": text, "max_tokens": MAX_TOKENS, "temperature": 0,
                "return_token_ids": True}  # fmt: skip
        refs[pid] = (await one_go(ENDPOINTS[1], body))["token_ids"]
    cfg = ExecutorConfig(
        model=name, sampling=SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0),
        continuation=True, piece_tokens=None if stream else 8, stream=stream,
        stream_interval=interval, request_timeout_s=600.0, max_retries=0,
    )  # fmt: skip
    ex = LiveExecutor(ENDPOINTS[:2], cfg, balance_costs=ReplicaConfig.from_profile(
        load_profile("cpu")))
    plan = piled_plan(ids)
    try:
        res = await ex.run(plan, {p: PromptInput(p, text=t) for p, t in zip(ids, PROMPTS,
                                                                             strict=True)})
    finally:
        await ex.aclose()
    validate_outcome(plan, res.outcome)
    delivered = [g.prompt_id for g in res.outcome.delivered]
    assert sorted(delivered) == sorted(ids)  # each once
    tally = ex.last_moves
    pieces_on = {p.replica for chains in ex.chains.values() for c in chains for p in c.pieces}
    print(f"\nstream={stream} interval={interval}: {tally}; pieces on replicas {sorted(pieces_on)}, "
          f"makespan {res.outcome.makespan_s:.2f} s")
    assert tally.num_moves >= 1 and 1 in pieces_on
    for pid in ids:
        for r in res.groups[pid].responses:
            assert list(r.token_ids or ()) == refs[pid]
