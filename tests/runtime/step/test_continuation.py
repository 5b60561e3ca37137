"""The live executor in continuation mode, with the stub transport: pieces, moves and faults
deliver every group exactly once, whole, each response a token-exact chain."""

from __future__ import annotations

import asyncio
import warnings

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st
from test_live_executor import make_plan, prompts_for

from tailsieve.core.protocol import validate_outcome
from tailsieve.errors import ConfigError
from tailsieve.runtime.engine.backends import PromptInput, SamplingParams
from tailsieve.runtime.execution.chain import ChainError
from tailsieve.runtime.step.executor import LiveExecutor
from tailsieve.runtime.step.executor_config import ExecutorConfig
from tailsieve.runtime.step.rollout import TailSieveRollout
from tailsieve.runtime.step.rollout_config import RolloutConfig
from tailsieve.runtime.step.step_state import StepResult
from tailsieve.runtime.stub import StubFault, StubTransport, token_at

URLS = ["http://r0", "http://r1", "http://r2"]
warnings.filterwarnings("ignore", message="per-request seeds")


def ccfg(piece_tokens: int | None = 64, **kw: object) -> ExecutorConfig:
    base: dict[str, object] = dict(
        model="m",
        sampling=SamplingParams(max_tokens=1000, seed=0),
        backoff_s=0.001,
        continuation=True,
        piece_tokens=piece_tokens,
    )
    base.update(kw)
    return ExecutorConfig(**base)  # type: ignore[arg-type]


def lengths_fn(table: dict[str, int]):  # type: ignore[no-untyped-def]
    def length_of(prompt: str, sample: int) -> int:
        return table[prompt] + 7 * sample

    return length_of


def assert_exact(  # type: ignore[no-untyped-def]
    res: StepResult, length_of, stub: StubTransport, text: bool = True
) -> None:
    """Whole groups; each response token for token what one go generates (the stub's text of
    a streamed piece comes only with its end, so a moved stream is checked on tokens)."""
    assert stub.log.broken_chains == []
    for pid, g in res.groups.items():
        assert len(g.responses) == 2  # whole group
        for s, r in enumerate(g.responses):
            want = length_of(pid, s)
            assert r.token_ids == tuple(token_at(s, j) for j in range(want))
            assert r.num_tokens == want and r.finish_reason == "stop"
            assert r.text == f"{pid}:{s}" or not text


LENGTHS = {"t0": 300, "p0": 250, "f0": 10, "f1": 20, "f2": 30, "f3": 400, "f4": 500}
PLAN = make_plan(["t0"], ["p0"], ["f0", "f1", "f2", "f3", "f4"], cut=3)


async def test_pieces_join_to_the_one_go_response() -> None:
    length_of = lengths_fn(LENGTHS)
    stub = StubTransport(length_of, seconds_per_token=0.0002)
    ex = LiveExecutor(URLS, ccfg(piece_tokens=64), transport=stub)
    res = await ex.run(PLAN, prompts_for(PLAN))
    validate_outcome(PLAN, res.outcome)
    assert_exact(res, length_of, stub)
    # t0 sample 1 (307 tokens) took 5 pieces: continuations at 64, 128, 192, 256
    done = sorted(d for _, p, s, d in stub.log.continued if p == "t0" and s == 1)
    assert done == [64, 128, 192, 256]


async def test_fault_continues_only_the_dead_replicas_responses_from_the_last_seam() -> None:
    length_of = lengths_fn(LENGTHS)
    # r2 (the tail replica) dies mid-step: t0's responses continue on a bulk replica
    stub = StubTransport(
        length_of, seconds_per_token=0.001, faults={"http://r2": StubFault(die_after_s=0.15)}
    )
    ex = LiveExecutor(URLS, ccfg(piece_tokens=50), transport=stub)
    res = await ex.run(PLAN, prompts_for(PLAN))
    validate_outcome(PLAN, res.outcome)
    assert_exact(res, length_of, stub)
    assert res.outcome.num_regenerated == 0  # no group started again
    assert all(g.attempt == 0 for g in res.groups.values())
    assert not ex.replicas[2].healthy and ex.num_relocations == 2
    # the continuations after the fault start from a seam > 0 on a healthy replica
    moved = [(u, d) for u, p, _, d in stub.log.continued if p == "t0" and u != "http://r2"]
    assert moved and min(d for _, d in moved) >= 100
    # responses of other replicas were never sent twice from the same point
    firsts = [(u, p) for u, p, _ in stub.log.started if p == "p0"]
    assert all(u == "http://r0" for u, _ in firsts)


async def test_move_waits_for_the_running_piece_and_continues_on_the_destination() -> None:
    """vLLM, unstreamed pieces: the move takes effect when the running piece ends, so its
    tokens are kept (the next piece starts at the seam after it, on the destination)."""
    length_of = lengths_fn(LENGTHS)
    stub = StubTransport(length_of, seconds_per_token=0.001)
    ex = LiveExecutor(URLS, ccfg(piece_tokens=100), transport=stub)

    async def mover() -> None:
        while len(ex.generated("t0")[0]) < 100:  # the first piece ended: the second runs
            await asyncio.sleep(0.001)
        assert ex.generated("t0")[0] == tuple(token_at(0, j) for j in range(100))
        assert ex.move("t0", 0, 0)

    task = asyncio.create_task(mover())
    res = await ex.run(PLAN, prompts_for(PLAN))
    await task
    assert_exact(res, length_of, stub)
    assert ex.num_moves == 1
    on_r0 = [d for u, p, s, d in stub.log.continued if p == "t0" and s == 0 and u == "http://r0"]
    assert on_r0 and on_r0[0] == 200  # the running piece (tokens 100-199) finished first
    assert not any(  # no piece of it was cut short
        p == "t0" and s == 0 and d % 100 for _, p, s, d in stub.log.continued)


async def test_move_with_streaming_keeps_the_streamed_tokens() -> None:
    length_of = lengths_fn(LENGTHS)
    stub = StubTransport(length_of, seconds_per_token=0.001)
    ex = LiveExecutor(URLS, ccfg(piece_tokens=None, stream=True), transport=stub)

    async def mover() -> None:  # once t0's response 1 has streamed some tokens
        while ex._run is None or ex._run.groups["t0"].progress.live_tokens.get(1, 0) < 10:
            await asyncio.sleep(0.002)
        assert ex.move("t0", 1, 1)

    task = asyncio.create_task(mover())
    res = await ex.run(PLAN, prompts_for(PLAN))
    await task
    assert_exact(res, length_of, stub, text=False)
    assert [p for u, p, s, _ in stub.log.continued if u == "http://r1"] == ["t0"]


def test_penalty_refused_and_seed_warned() -> None:
    with pytest.raises(ChainError, match="presence_penalty"):
        LiveExecutor(URLS, ccfg(sampling=SamplingParams(presence_penalty=1.0)))
    with pytest.warns(UserWarning, match="seeds are not kept"):
        LiveExecutor(URLS, ccfg(sampling=SamplingParams(seed=3)))
    with pytest.raises(ConfigError, match="continuation"):
        ExecutorConfig(piece_tokens=8)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    lengths=st.lists(st.integers(1, 120), min_size=7, max_size=7),
    piece=st.one_of(st.none(), st.integers(1, 40)),
    die=st.one_of(st.none(), st.tuples(st.integers(0, 2), st.floats(0.0, 0.1))),
    moves=st.lists(
        st.tuples(st.floats(0.0, 0.1), st.integers(0, 6), st.integers(0, 1), st.integers(0, 2)),
        max_size=4,
    ),
    stream=st.booleans(),
)
@example(  # a short streamed piece whose prompt ids came only with its end
    lengths=[23, 23, 30, 3, 23, 106, 115],
    piece=3,
    die=(2, 0.0),
    moves=[(0.018, 1, 1, 0), (0.0, 2, 1, 2), (0.018, 1, 1, 0)],
    stream=True,
)
def test_moves_and_faults_keep_exactly_once_whole_groups_exact_chains(
    lengths: list[int],
    piece: int | None,
    die: tuple[int, float] | None,
    moves: list[tuple[float, int, int, int]],
    stream: bool,
) -> None:
    ids = ["t0", "p0", "f0", "f1", "f2", "f3", "f4"]
    length_of = lengths_fn(dict(zip(ids, lengths, strict=True)))
    faults = {URLS[die[0]]: StubFault(die_after_s=die[1])} if die else {}
    stub = StubTransport(length_of, seconds_per_token=0.001, faults=faults)
    ex = LiveExecutor(URLS, ccfg(piece_tokens=piece, stream=stream), transport=stub)

    async def go() -> StepResult:
        async def mover() -> None:
            for at, g, s, to in sorted(moves):
                await asyncio.sleep(at)
                if ex.healthy[to]:
                    ex.move(ids[g], s, to)

        task = asyncio.create_task(mover())
        try:
            return await ex.run(PLAN, prompts_for(PLAN))
        finally:
            task.cancel()

    res = asyncio.run(go())
    validate_outcome(PLAN, res.outcome)
    delivered = [d.prompt_id for d in res.outcome.delivered]
    assert len(delivered) == len(set(delivered)) == 5  # t0, p0 + 3 fresh, once each
    assert_exact(res, length_of, stub, text=not stream)


async def test_rollout_api_with_continuation_and_a_dead_replica() -> None:
    """``RolloutConfig(continuation=True, piece_tokens=...)`` end to end: a replica that dies
    mid-run costs no group regeneration, and every response is token-exact."""

    table = {f"p{i}": 30 + (i * 37) % 300 for i in range(200)}
    length_of = lengths_fn(table)
    urls = [f"http://r{i}" for i in range(4)]
    stub = StubTransport(
        length_of, seconds_per_token=0.0002, faults={"http://r1": StubFault(die_after_s=0.05)}
    )
    cfg = RolloutConfig(
        num_groups=8, group_size=2, model="m", sampling=SamplingParams(max_tokens=2000, seed=0),
        continuation=True, piece_tokens=40,
    )  # fmt: skip
    source = iter(PromptInput(p, text=p) for p in table)
    async with TailSieveRollout(urls, cfg, transport=stub) as ro:
        for _ in range(3):
            batch = await ro.step([next(source) for _ in range(ro.num_fresh_needed())])
            assert batch.metrics.num_regenerated == 0
            for g in batch.groups:
                for s, r in enumerate(g.responses):
                    want = length_of(g.prompt_id, s)
                    assert r.token_ids == tuple(token_at(s, j) for j in range(want))
    assert stub.log.broken_chains == []
    assert not ro.executor.healthy[1]
