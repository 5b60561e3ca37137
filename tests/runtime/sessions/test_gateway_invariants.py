"""Hypothesis: under random sessions, turns, piece sizes, policies, moves and replica deaths,
every turn is delivered exactly once and is exactly the one-go generation of its prompt
(token-exact chain), and no piece is generated twice."""

from __future__ import annotations

import asyncio
import random

from hypothesis import given, settings
from hypothesis import strategies as st

from tailsieve.core.balancer import BalanceSettings
from tailsieve.runtime.sessions import GatewayConfig, SessionGateway
from tailsieve.runtime.stub import StubModel, StubPieceRunner
from tailsieve.session.routers import SessionPolicy

POLICIES = [p.value for p in SessionPolicy if p is not SessionPolicy.ORACLE]


async def scenario(num_replicas: int, num_sessions: int, num_turns: int,
                   piece_tokens: int | None, policy: str, kills: list[tuple[int, int]],
                   seed: int, interrupts: bool = False) -> None:
    rnd = random.Random(seed)
    runner = StubPieceRunner(num_replicas, StubModel(eos_every=37),
                             seconds_per_token=0.0002, batch_slowdown=0.5,
                             interrupts=interrupts)
    cfg = GatewayConfig(policy=policy, piece_tokens=piece_tokens, probe_interval_s=0.01,
                        balance=BalanceSettings(interval_s=0.003, horizon_s=30.0, seam_s=0.0),
                        profile="qwen3-4b-h100")
    delivered: dict[tuple[str, int], tuple[int, ...]] = {}
    prompts: dict[tuple[str, int], list[int]] = {}

    async def session(i: int) -> None:
        sid = f"s{i}"
        ctx = [rnd.randrange(1, 999) for _ in range(rnd.randrange(8, 60))]
        for t in range(num_turns):
            prompts[(sid, t)] = list(ctx)
            out = await gw.generate(sid, f"g{i % 2}", ctx, {"max_tokens": 90})
            assert (sid, t) not in delivered
            delivered[(sid, t)] = out.token_ids
            assert [p.start for p in out.pieces] == [0, *(p.end for p in out.pieces[:-1])]
            ctx = [*ctx, *out.token_ids, *(rnd.randrange(1, 999) for _ in range(5))]
        gw.end_session(sid)

    async def chaos() -> None:
        for after_pieces, replica in kills:
            while len(runner.calls) < after_pieces:
                await asyncio.sleep(0.001)
            if sum(not r.dead for r in runner.replicas) > 1:
                runner.kill(replica % num_replicas)
                await asyncio.sleep(0.005)
                runner.revive(replica % num_replicas)

    async with SessionGateway(num_replicas, runner, cfg) as gw:
        chaos_task = asyncio.create_task(chaos())
        await asyncio.wait_for(asyncio.gather(*(session(i) for i in range(num_sessions))), 120)
        chaos_task.cancel()
    assert len(delivered) == num_sessions * num_turns
    for key, ids in delivered.items():
        assert list(ids) == runner.stub.model.generate(prompts[key], 90)[0]
    # a killed piece returns what it streamed (nothing unstreamed) and an interrupted one what
    # it generated, so what was generated is exactly what was delivered
    assert sum(len(c.output_ids) for c in runner.calls) == sum(map(len, delivered.values()))
    st_ = gw.stats()
    assert st_.num_turns == len(delivered) and st_.num_running == 0 and st_.num_failed_turns == 0
    assert st_.rebalancer_crashes == 0


@settings(max_examples=30, deadline=None)
@given(
    num_replicas=st.integers(1, 4),
    num_sessions=st.integers(1, 6),
    num_turns=st.integers(1, 3),
    piece_tokens=st.one_of(st.none(), st.integers(4, 40)),
    policy=st.sampled_from(POLICIES),
    kills=st.lists(st.tuples(st.integers(1, 60), st.integers(0, 3)), max_size=3),
    seed=st.integers(0, 10**6),
    interrupts=st.booleans(),
)
def test_every_turn_exactly_once_and_token_exact(
    num_replicas: int, num_sessions: int, num_turns: int, piece_tokens: int | None,
    policy: str, kills: list[tuple[int, int]], seed: int, interrupts: bool,
) -> None:
    """Also where moves interrupt running pieces (``StubPieceRunner(interrupts=True)``)."""
    asyncio.run(scenario(num_replicas, num_sessions, num_turns, piece_tokens, policy, kills,
                         seed, interrupts))
