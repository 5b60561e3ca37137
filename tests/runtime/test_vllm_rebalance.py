"""The live rebalancer on two real vLLM servers serving the real model (temperature 0), through
recording wire proxies: every group dealt to the first server, the rebalancer moves responses
to the idle second one while the step runs, and every group is delivered exactly once.

The router's guarantees are checked exactly on the wire (``vllm_wire.check_chains``): each
continued prompt is the prompt plus the tokens kept so far, each delivered response is its
pieces' tokens in order, and no finished piece is delivered twice. The engine's outputs are
compared with one-go references with vLLM's semantics (``check_logprobs_close``), not token
for token: a batch of 8, a continued prefill or another CPU's kernels may flip a near-tie.
Needs the real servers (scripts/test.sh starts them):

    TAILSIEVE_REAL_ENDPOINTS=http://127.0.0.1:8111,http://127.0.0.1:8112 \\
    pytest -m vllm tests/runtime/test_vllm_rebalance.py -s
"""

from __future__ import annotations

import pytest
from engine_outputs import EngineOutput, check_logprobs_close
from real_servers import REAL_ENDPOINTS, needs_real
from test_vllm_continuation import one_go, served_name
from vllm_wire import as_engine_output, check_chains, proxies

from tailsieve.core.balancer import BalanceSettings
from tailsieve.core.plan import GroupAssignment, StepPlan
from tailsieve.core.pool import Pool
from tailsieve.core.protocol import validate_outcome
from tailsieve.model.profiles import load_profile
from tailsieve.model.replica_config import ReplicaConfig
from tailsieve.runtime.engine.backends import PromptInput, SamplingParams
from tailsieve.runtime.step.executor import LiveExecutor
from tailsieve.runtime.step.executor_config import ExecutorConfig

pytestmark = [pytest.mark.vllm, needs_real(2)]

ENDPOINTS = REAL_ENDPOINTS
MAX_TOKENS, GROUPS, GROUP_SIZE, TOP_K = 64, 4, 2, 5
PROMPTS = [  # each runs to the cap (greedy, SmolLM2-135M-Instruct): long enough to be moved
    "Once upon a time, there was a little robot named",
    "The history of the Roman Empire begins",
    "Here is a list of ten fruits:",
    "In the year 2050, the city of",
]


def piled_plan(ids: list[str]) -> StepPlan:
    out = tuple(GroupAssignment(p, Pool.BULK, 0, True, k) for k, p in enumerate(ids))
    return StepPlan(
        step=1, num_replicas=2, group_size=GROUP_SIZE, num_required=len(ids), q=0, m=0,
        num_extra=0, tail_replicas=(), bulk_replicas=(0, 1), assignments=out,
        num_fresh_to_deliver=0, fresh_prompt_ids=(), is_warmup=False, is_flush=False,
        balance=BalanceSettings(interval_s=0.2, horizon_s=10.0, seam_s=0.01),
    )  # fmt: skip


@pytest.mark.parametrize(("stream", "interval"), [(True, None), (True, 4), (False, None)])
async def test_live_rebalancer_moves_on_real_vllm_and_delivers_exactly_once(
    stream: bool, interval: int | None
) -> None:
    """A response moved mid-chunk (its unsent tokens decoded again on the destination,
    ``interval``: vLLM's stream_interval) keeps exactly the tokens the router received."""
    name = await served_name(ENDPOINTS[0])
    ids = [f"bal-{i}" for i in range(GROUPS)]
    text_of = dict(zip(ids, PROMPTS, strict=True))
    refs = {}
    for pid, text in text_of.items():
        body = {"model": name, "prompt": text, "max_tokens": MAX_TOKENS, "temperature": 0,
                "logprobs": TOP_K, "return_token_ids": True}  # fmt: skip
        refs[pid] = EngineOutput.of_completion(await one_go(ENDPOINTS[1], body))
    cfg = ExecutorConfig(
        model=name, sampling=SamplingParams(max_tokens=MAX_TOKENS, temperature=0.0,
                                            logprobs=TOP_K),
        continuation=True, piece_tokens=None if stream else 8, stream=stream,
        stream_interval=interval, request_timeout_s=600.0, max_retries=0,
    )  # fmt: skip
    plan = piled_plan(ids)
    async with proxies(ENDPOINTS[:2]) as (urls, log):
        ex = LiveExecutor(urls, cfg, balance_costs=ReplicaConfig.from_profile(
            load_profile("cpu")))
        try:
            res = await ex.run(plan, {p: PromptInput(p, text=t) for p, t in text_of.items()})
        finally:
            await ex.aclose()
    validate_outcome(plan, res.outcome)
    delivered = [g.prompt_id for g in res.outcome.delivered]
    assert sorted(delivered) == sorted(ids)  # each once
    tally = ex.last_moves
    pieces_on = {p.replica for chains in ex.chains.values() for c in chains for p in c.pieces}
    print(f"\nstream={stream} interval={interval}: {tally}; pieces on replicas {sorted(pieces_on)}, "
          f"makespan {res.outcome.makespan_s:.2f} s, {len(log)} requests on the wire")
    assert tally.num_moves >= 1 and 1 in pieces_on
    responses = {text_of[pid]: [list(r.token_ids or ()) for r in res.groups[pid].responses]
                 for pid in ids}  # fmt: skip
    assert all(len(v) == GROUP_SIZE for v in responses.values())
    lps = {text_of[pid]: [r.logprobs for r in res.groups[pid].responses] for pid in ids}
    segments = check_chains(log, responses, MAX_TOKENS, lps)  # exact: the router's guarantees
    spliced = sum(len(s) > 1 for v in segments.values() for s in v)
    kept_twice = sum(sum(bool(p.token_ids) for p in c.pieces) > 1
                     for chains in ex.chains.values() for c in chains)  # fmt: skip
    assert spliced == kept_twice  # the wire shows every response the router joined from pieces
    if not stream:  # pieces of 8: every response is joined from several
        assert spliced >= 1
    divergences = []
    for pid in ids:
        text = text_of[pid]
        for r, toks, segs in zip(res.groups[pid].responses, responses[text], segments[text],
                                 strict=True):  # fmt: skip
            mine = as_engine_output(toks, segs)
            assert r.logprobs == mine.logprobs  # delivered as the pieces returned them
            close = check_logprobs_close(mine, refs[pid], "moved", "one go")
            divergences.append(close.divergence)
    print(f"{spliced} responses spliced; first divergence from one go per response: {divergences}")
