"""verl's ``rebalance_requests`` live (``runtime.sessions.gateway_rebalance``): under the
``verl-rebalance`` policy a replica that runs dry while another runs two turns or more makes
the gateway end every running turn's piece and send each on to its new pin, token-exact and
nothing generated twice, at most once a step."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

from tailsieve.runtime.sessions import GatewayConfig, SessionGateway, TurnResult
from tailsieve.runtime.stub import StubModel, StubPieceRunner
from tailsieve.session.rebalance import VerlRebalance

NEVER_EOS = StubModel(eos_every=10**9)
REBALANCE = GatewayConfig(policy="verl-rebalance")


def prompt(i: int, n: int = 40) -> list[int]:
    return [10 * i + j for j in range(n)]


def assert_exact(runner: StubPieceRunner, ids: Sequence[int], max_tokens: int,
                 out: TurnResult) -> None:
    want, reason = runner.stub.model.generate(ids, max_tokens)
    assert list(out.token_ids) == want and out.finish_reason == reason
    assert [p.start for p in out.pieces] == [0, *(p.end for p in out.pieces[:-1])]


async def _running(gw: SessionGateway, n: int) -> None:
    while len(gw._turns) < n or any(rt.piece_on is None for rt in gw._turns.values()):
        await asyncio.sleep(0.001)


async def _crowd_then_dry(gw: SessionGateway, max_tokens: int) -> list[asyncio.Task[TurnResult]]:
    """Three turns run on replica 0 (replica 1 out of service as they start); replica 1
    comes back, runs one short turn of its own, and runs dry when that session ends."""
    gw.set_healthy(1, False)
    tasks = [asyncio.create_task(gw.generate(f"s{i}", "g", prompt(i), {}, max_tokens=max_tokens))
             for i in range(3)]
    await _running(gw, 3)
    gw.set_healthy(1, True)
    assert gw.rebalance is not None and gw.rebalance.num_rebalances == 0
    short = await gw.generate("short", None, prompt(9), {}, max_tokens=4)
    assert short.pieces[0].replica == 1  # the least in flight
    assert gw.rebalance.num_rebalances == 0  # replica 1 holds a session in a tool call
    gw.end_session("short")
    return tasks


async def test_a_dry_replica_takes_running_turns_by_abort_and_resume() -> None:
    runner = StubPieceRunner(2, NEVER_EOS, seconds_per_token=0.002, interrupts=True)
    async with SessionGateway(2, runner, REBALANCE) as gw:
        tasks = await _crowd_then_dry(gw, 300)
        assert gw.rebalance is not None and gw.rebalance.num_rebalances == 1
        outs = await asyncio.gather(*tasks)
        assert gw.rebalance.num_rebalances == 1  # once a step
    moved = [o for o in outs if len(o.pieces) > 1]
    assert 1 <= len(moved) <= 2  # the three re-pinned over both replicas
    for i, out in enumerate(outs):
        assert_exact(runner, prompt(i), 300, out)
    for out in moved:
        assert [p.replica for p in out.pieces] == [0, 1]
        assert 0 < out.pieces[0].end < 300  # ended where it was, at once
        assert out.num_mid_turn_moves == 1
    assert all(len(o.pieces) == 1 and o.pieces[0].replica == 0 for o in outs if o not in moved)
    assert gw.stats().moves_mid_turn == len(moved) == gw.rebalance.num_moved
    assert runner.num_interrupts == len(moved)
    assert sum(len(c.output_ids) for c in runner.calls) == 3 * 300 + 4  # nothing twice


async def test_where_pieces_cannot_be_interrupted_the_abort_waits_for_a_piece_end() -> None:
    """Turns run in pieces while a rebalance is left this step; once it is spent, whole."""
    runner = StubPieceRunner(2, NEVER_EOS, seconds_per_token=0.001)
    async with SessionGateway(2, runner, REBALANCE) as gw:
        tasks = await _crowd_then_dry(gw, 1200)
        outs = await asyncio.gather(*tasks)
        after = await gw.generate("later", None, prompt(7), {}, max_tokens=1200)
        gw.begin_step()
        next_step = await gw.generate("next", None, prompt(8), {}, max_tokens=1200)
    assert gw.rebalance is not None and gw.rebalance.num_rebalances == 1
    moved = [o for o in outs if o.num_mid_turn_moves]
    assert moved and all(len(o.pieces) > 1 for o in outs)  # 512-token pieces
    for i, out in enumerate(outs):
        assert_exact(runner, prompt(i), 1200, out)
    for out in moved:
        reps = [p.replica for p in out.pieces]
        k = reps.index(1)
        assert reps[:k] == [0] * k and reps[k:] == [1] * (len(reps) - k)
        assert all(p.end - p.start == 512 for p in out.pieces[:k])  # moved at a piece end
    assert runner.num_interrupts == 0
    assert len(after.pieces) == 1  # no rebalance left this step: one piece
    assert len(next_step.pieces) == 3  # a new step: pieces again
    assert sum(len(c.output_ids) for c in runner.calls) == 5 * 1200 + 4


async def test_a_turn_pinned_where_it_runs_keeps_running() -> None:
    runner = StubPieceRunner(2, NEVER_EOS, seconds_per_token=0.002, interrupts=True)
    async with SessionGateway(2, runner, REBALANCE) as gw:
        assert gw.rebalance is not None
        gw.set_healthy(1, False)
        tasks = [asyncio.create_task(gw.generate(f"s{i}", None, prompt(i), {}, max_tokens=200))
                 for i in range(2)]
        await _running(gw, 2)
        gw.set_healthy(1, True)
        gw.end_session("never-started")  # an event: replica 1 dry, replica 0 runs 2
        assert gw.rebalance.num_rebalances == 1 and gw.rebalance.num_moved == 1
        outs = await asyncio.gather(*tasks)
    assert sorted(len(o.pieces) for o in outs) == [1, 2]
    assert runner.num_interrupts == 1


async def test_only_the_verl_rebalance_policy_aborts() -> None:
    runner = StubPieceRunner(2, NEVER_EOS)
    for policy in ("verl-sticky", "tailsieve", "affinity-margin"):
        async with SessionGateway(2, runner, GatewayConfig(policy=policy)) as gw:
            assert gw.rebalance is None
    async with SessionGateway(2, runner, REBALANCE) as gw:
        assert isinstance(gw.router, VerlRebalance) and gw.rebalance is not None
