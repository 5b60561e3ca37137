"""The session gateway's ``auto`` profile: every piece it sends is timed into the online fit
(whatever the runner), a failed piece is recorded as failed, and a trusted fit prices the next
step's placements and moves; a named profile stays fixed."""

from __future__ import annotations

import asyncio
import contextlib
import sys
from pathlib import Path

import numpy as np
import pytest

from tailsieve.model.profiles import load_profile
from tailsieve.runtime.emulator import EmulatorConfig, EmulatorServer
from tailsieve.runtime.engine.backends import SamplingParams
from tailsieve.runtime.engine.pieces import PieceOutput, PieceRequest
from tailsieve.runtime.execution.profile import REFIT_MIN_PIECES, LiveProfile
from tailsieve.runtime.sessions import GatewayConfig, ModelClock, SessionGateway
from tailsieve.runtime.stub import StubModel, StubPieceRunner
from tailsieve.session.priced import place_turn
from tailsieve.session.settings import SessionSettings

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "model"))
from online_sim import run_replica

NEVER_EOS = StubModel(eos_every=10**9)


def tau(b: float) -> float:
    return 0.003 + 0.00012 * b


def prompt(i: int, n: int = 40) -> list[int]:
    return [10 * i + j for j in range(n)]


def timed(prof: LiveProfile, replica: int, t_s: float) -> None:
    """One piece of 100 prompt and 64 generated tokens on ``replica``, sent at ``t_s``."""
    piece = PieceRequest(tuple(range(100)), SamplingParams(max_tokens=64), 64, "x")
    prof.record_piece(prof.time_piece(replica, t_s, piece), t_s, t_s + 0.5,
                      [PieceOutput(tuple(range(64)), "length")])


async def test_every_piece_is_timed_and_a_failed_one_recorded_as_failed() -> None:
    runner = StubPieceRunner(2, NEVER_EOS, seconds_per_token=0.001)
    async with SessionGateway(2, runner, GatewayConfig(piece_tokens=16)) as gw:
        ledger = gw.profile.online.ledger if gw.profile.online is not None else None
        assert ledger is not None and gw.profile.in_use == "cpu"
        tasks = [asyncio.create_task(gw.generate(f"s{i}", None, prompt(i), {}, max_tokens=64))
                 for i in range(4)]
        while len([c for c in runner.calls if not c.failed]) < 4:
            await asyncio.sleep(0.001)
        runner.kill(0)
        await asyncio.gather(*tasks)
        assert ledger.num_in_flight == 0  # every piece sent was ended, the failed ones too
        recs = [r for rs in ledger._replicas.values() for r in rs]
        timed = [r for r in recs if r.complete]
        assert len(recs) >= len(runner.calls) - 1  # pruned ones were harvested; none lost
        assert sum(max(r.tokens or (0,)) for r in timed) == sum(
            len(c.output_ids) for c in runner.calls if not c.failed)
        assert any(not r.complete for r in recs)  # the pieces the kill failed


async def test_the_fit_gets_the_servers_prompt_counts_cache_hits_and_first_tokens() -> None:
    """A text prompt is timed at the tokens the server counted (not the caller's estimate),
    and a streamed piece's first token is a time to first token of the prompt tokens the
    server did not find cached."""
    runner = StubPieceRunner(1, NEVER_EOS, seconds_per_token=0.002, interrupts=True)
    async with SessionGateway(1, runner, GatewayConfig()) as gw:
        online = gw.profile.online
        assert online is not None
        text = "x" * 200  # the stub's server counts one token per character
        out = await gw.generate("s", None, [], {}, max_tokens=16, prompt_text=text,
                                text_tokens=7)
        (rec,) = [r for rs in online.ledger._replicas.values() for r in rs]
        assert rec.complete and rec.prompt_tokens == len(text) != 7
        nxt = [*runner.calls[0].prompt_ids, *out.token_ids, *range(1000, 1030)]
        await gw.generate("s", None, nxt, {}, max_tokens=16)
    first, second = runner.calls
    assert (len(first.prompt_ids), len(second.prompt_ids)) == (200, len(nxt))
    block = runner.replicas[0].cache.block_tokens
    cached = (len(first.prompt_ids) + len(first.output_ids)) // block * block  # whole blocks
    prefill = [o.prompt_tokens for o in online._prefill]
    assert prefill == [200, len(nxt) - cached]  # the second turn's new tokens only
    assert all(o.ttft_s > 0 for o in online._prefill)


def test_a_trusted_fit_prices_the_next_step() -> None:
    runner = StubPieceRunner(2, NEVER_EOS)
    gw = SessionGateway(2, runner, GatewayConfig(), clock=lambda: 0.0)
    cpu = gw.book.configs[0].throughput
    assert gw.profile.online is not None
    rng = np.random.default_rng(3)
    t = 0.0
    for r in ("0", "1"):
        t = run_replica(gw.profile.online.ledger, rng, tau, 2e-7, replica=r, t0=t + 1.0)
    assert gw.book.configs[0].throughput is cpu  # nothing changes within a step
    gw.begin_step()
    fitted = gw.book.configs[0].throughput
    assert fitted is not cpu and gw.profile.in_use == "fitted"
    assert all(c.throughput is fitted for c in gw.book.configs)
    held = 32 * 400  # tokens of context 32 running requests hold mid-step
    assert fitted.step_s(32, held) == pytest.approx(tau(32) + 2e-7 * held, rel=0.1)
    assert gw.book.views(0.0)[1].config.throughput is fitted


def test_a_named_profile_stays_fixed() -> None:
    prof = LiveProfile("qwen3-4b-h100", "cpu")
    assert prof.online is None and prof.in_use == "qwen3-4b-h100"
    timed(prof, 0, 0.0)
    assert not prof.needs_probe
    named = LiveProfile("auto:qwen3-4b-h100", "cpu")
    assert named.online is not None and named.in_use == "qwen3-4b-h100"
    assert named.model.provenance == load_profile("qwen3-4b-h100").provenance


async def test_a_slowed_emulated_replica_is_priced_slower_and_avoided() -> None:
    """Three emulated replicas, the last slowed 6x: after a step of pieces on each, the
    gateway's ``auto`` fit prices that replica (decode and prefill) several times slower than
    the others, and TailSieve's next first turns avoid it."""
    scale = 0.1  # real seconds per model second
    cfgs = [EmulatorConfig.from_profile("qwen3-4b-h100", time_scale=scale, seed=i,
                                        slowdown=6.0 if i == 2 else 1.0) for i in range(3)]
    gcfg = GatewayConfig(policy="turn-round-robin", profile="auto:qwen3-4b-h100")
    async with contextlib.AsyncExitStack() as stack:
        urls = [(await stack.enter_async_context(EmulatorServer(c))).url for c in cfgs]
        gw = await stack.enter_async_context(SessionGateway.over_http(
            urls, gcfg, clock=ModelClock(scale)))
        sp = {"ignore_eos": True}
        for wave in range(3):  # every replica runs pieces at several batch sizes
            await asyncio.gather(*(gw.generate(f"s{wave}-{i}", None, prompt(i, 200), sp,
                                               max_tokens=96 + 32 * (i % 4))
                                   for i in range(3 * (2 + 3 * wave))))
        gw.begin_step()
        speeds = gw.profile.speed_factors(range(3))
        assert speeds[2] > 2.0 and max(speeds[:2]) < 1.3, speeds
        fast, slow = gw.book.configs[0], gw.book.configs[2]
        assert slow.throughput.tau(4) > 2.0 * fast.throughput.tau(4)
        assert slow.prefill_cost_s(2000) > 2.0 * fast.prefill_cost_s(2000)
        views = gw.book.views(gw.now())
        turns = [gw.book.request(f"new{i}", None, 300) for i in range(4)]
        placed = [place_turn(t, views, SessionSettings(), 0.0).replica for t in turns]
        assert 2 not in placed


def test_a_refit_within_a_step_waits_for_enough_new_pieces() -> None:
    prof = LiveProfile("auto", "cpu")
    assert prof.online is not None and not prof.refit_due and not prof.needs_probe
    for i in range(REFIT_MIN_PIECES - 1):
        timed(prof, 0, float(i))
    assert not prof.refit_due
    timed(prof, 1, 9.0)
    assert prof.refit_due
    prof.refit()  # between steps: always, and the count starts again
    assert prof.num_new == 0 and not prof.refit_due
    timed(prof, 0, 10.0)
    assert prof.refit(due_only=True) is None and prof.num_new == 1  # not due: skipped


def test_a_piece_on_a_replica_not_priced_yet_makes_a_refit_due_at_once() -> None:
    """A straggler whose turns never ended a piece (streamed whole) is first timed when a move
    cuts them: its first piece, while the others' speeds are fitted, refits at the next check
    rather than after ``REFIT_MIN_PIECES`` more; once it is priced, or where nothing is yet,
    the count rule holds."""
    prof = LiveProfile("auto", "cpu")
    timed(prof, 0, 0.0)
    assert not prof.refit_due  # nothing priced yet: the count rule
    for i in range(REFIT_MIN_PIECES):
        timed(prof, i % 2, 1.0 + i)
    prof.refit()
    assert set(prof.speeds) == {"0", "1"} and not prof.refit_due
    piece = PieceRequest(tuple(range(100)), SamplingParams(max_tokens=64), 64, "x")
    prof.record_piece(prof.time_piece(2, 20.0, piece), 20.0, 20.5, None)
    assert not prof.refit_due  # a failed piece times nothing
    timed(prof, 2, 21.0)
    assert prof.refit_due and prof.num_new == 2
    prof.refit(due_only=True)
    assert "2" in prof.speeds and prof.num_new == 0 and not prof.refit_due
    timed(prof, 2, 22.0)
    assert not prof.refit_due  # priced now: the count rule again


def _fitted_gateway(runner: StubPieceRunner) -> SessionGateway:
    """A gateway whose ``auto`` fit is trusted, every replica at the shared speed."""
    gw = SessionGateway(2, runner, GatewayConfig(), clock=lambda: 0.0)
    assert gw.profile.online is not None
    rng = np.random.default_rng(3)
    t = 0.0
    for r in ("0", "1"):
        t = run_replica(gw.profile.online.ledger, rng, tau, 2e-7, replica=r, t0=t + 1.0)
    gw.begin_step()
    assert gw.profile.fitted and gw.profile.speed_factors(range(2)) == (1.0, 1.0)
    return gw


async def test_a_turn_runs_whole_on_a_uniform_fitted_fleet_and_in_pieces_by_a_straggler(
) -> None:
    """Pieces (each end one more request) only where a move may pay: on a fitted fleet of
    one speed, balanced, a turn is one piece; once a replica is priced slower, or with the
    piece cap given, it is cut at the cap again."""
    runner = StubPieceRunner(2, NEVER_EOS)
    gw = _fitted_gateway(runner)
    async with gw:
        out = await gw.generate("a", None, prompt(1), {}, max_tokens=1500)
        assert len(out.token_ids) == 1500 and len(runner.calls) == 1
        gw.profile.speeds = {"1": 3.0}  # replica 1 priced 3x slower: moves may pay
        await gw.generate("b", None, prompt(2), {}, max_tokens=1500)
        assert len(runner.calls) == 1 + 3  # 512 + 512 + 476
    capped = StubPieceRunner(2, NEVER_EOS)
    gw = SessionGateway(2, capped, GatewayConfig(piece_tokens=512), clock=lambda: 0.0)
    async with gw:
        await gw.generate("c", None, prompt(3), {}, max_tokens=1500)
        assert len(capped.calls) == 3  # a cap given is kept, fit or not


async def test_a_check_refits_within_a_step_only_where_it_can_change_the_step() -> None:
    """On a uniform fitted fleet whose turns run whole, a due refit waits (it could move
    nothing, and costs the relay's CPU) until every kept piece is new."""
    gw = _fitted_gateway(StubPieceRunner(2, NEVER_EOS))
    prof = gw.profile
    kept = prof.num_observations
    t = 100.0
    async with gw:
        while not prof.refit_due:
            timed(prof, 0, t)
            t += 1.0
        assert not prof.turned_over
        gw.moves.check()
        assert prof.num_new > 0  # not refitted: no running turn may move
        while not prof.turned_over:
            timed(prof, 1, t)
            t += 1.0
        assert prof.num_new >= kept
        gw.moves.check()
        assert prof.num_new == 0  # a full turnover refits all the same
